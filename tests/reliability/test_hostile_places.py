"""Round 3 of hostile input: a read-only working directory, two sweeps in one folder, a
job failing on a user error inside a sweep, and a file-size limit while checkpointing."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agilerl.training.run_lock import claim_run_dir
from tests.launch.sweep_helpers import QUICK, jobs, multirun
from tests.reliability.helpers import REPO, no_traceback

SMOKE = ("algorithm=ppo", "env=cartpole", "training=smoke", "logger.tensorboard=false")


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder this process cannot write: a read-only bind mount when running as root
    (root ignores permission bits), else a folder without write permission."""
    source, target = tmp_path / "source", tmp_path / "read_only"
    source.mkdir()
    target.mkdir()
    if os.geteuid() != 0:
        target.chmod(0o555)
        yield target
        target.chmod(0o755)
        return
    mount = shutil.which("mount")
    done = mount and subprocess.run(
        [mount, "--bind", "-o", "ro", str(source), str(target)], capture_output=True
    )
    if not done or done.returncode != 0 or os.access(target, os.W_OK):
        pytest.skip("cannot make a read-only folder here (no bind mount for root)")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)


def _train(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=cwd, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


def test_a_read_only_working_directory_is_refused_or_bypassed(
    read_only_dir: Path, tmp_path: Path
) -> None:
    refused = _train(*SMOKE, cwd=read_only_dir)
    assert refused.returncode == 2 and no_traceback(refused), refused.stderr
    assert "is not writable" in refused.stderr and "run_dir=" in refused.stderr
    sweep = _train("-m", *SMOKE, "seed=0,1", cwd=read_only_dir)
    assert sweep.returncode == 2 and no_traceback(sweep) and "hydra.sweep.dir=" in sweep.stderr
    # A run that names a writable folder trains; Hydra writes nothing in the working dir.
    pinned = _train(*SMOKE, f"run_dir={tmp_path / 'run'}", cwd=read_only_dir)
    assert pinned.returncode == 0, pinned.stderr
    assert (tmp_path / "run" / "summary.json").is_file()
    inside = _train(*SMOKE, f"run_dir={read_only_dir / 'run'}", cwd=tmp_path)
    assert inside.returncode == 2 and no_traceback(inside) and "cannot create it" in inside.stderr


def test_a_second_sweep_into_a_running_sweeps_folder_is_refused(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    command = [sys.executable, str(REPO / "train.py"), "-m", f"hydra.sweep.dir={sweep}"]
    first = subprocess.Popen(
        [*command, *SMOKE, "seed=0,1"], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (sweep / "multirun.yaml").exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    plan = (sweep / "multirun.yaml").read_text()
    second = multirun(sweep, *SMOKE, "seed=5")
    _out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert second.returncode == 2 and no_traceback(second), second.stderr
    assert "in use by another sweep" in second.stderr
    assert (sweep / "multirun.yaml").read_text() == plan  # the first sweep's plan is intact
    assert len(jobs(sweep)) == 2 and not any("seed=5" in key for key in jobs(sweep))
    folders = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert [name.split("seed=")[1][0] for name in folders] == ["0", "1"]  # job names keep it


def test_a_job_failing_on_a_user_error_ends_the_sweep_with_exit_2(tmp_path: Path) -> None:
    """The other jobs still run; the failed one is in the ledger; no traceback."""
    free, busy = tmp_path / "free", tmp_path / "busy"
    with claim_run_dir(busy):  # as if another process trained there: the job is refused
        result = multirun(tmp_path / "sweep", *QUICK, f"run_dir={free},{busy}")
    assert result.returncode == 2 and no_traceback(result), result.stderr
    assert "is in use by another process" in result.stderr and "1 of 2 job(s) failed" in (
        result.stderr
    )
    assert sorted(j.state for j in jobs(tmp_path / "sweep").values()) == ["completed", "failed"]
    assert (free / "summary.json").is_file()


def test_a_file_size_limit_while_checkpointing_exits_2_and_keeps_the_checkpoints(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    limit = 256 * 1024  # the replay memory of the second checkpoint passes it

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    args = ("algorithm=dqn", "env=cartpole", "training.max_steps=8192", "training.evo_steps=4096",
            "training.target_score=null", "replay_buffer=standard",
            "replay_buffer.store_in_checkpoint=true", "logger.tensorboard=false",
            f"run_dir={run_dir}")  # fmt: skip
    result = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args], cwd=REPO, capture_output=True,
        text=True, timeout=300, preexec_fn=limited,
    )  # fmt: skip
    assert result.returncode == 2 and no_traceback(result), (result.returncode, result.stderr)
    assert "file-size limit (262,144 bytes" in result.stderr and "memory.pt" in result.stderr
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.is_dir())
    assert kept == ["step_000000004096"]  # the earlier checkpoint, whole; no temp folder left
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000000004096"


def test_mdp_files_that_declare_far_more_than_they_store_are_refused(tmp_path: Path) -> None:
    """A 3 KB HDF5 file of fill-value datasets asked for 36 GB; a zip bomb in an .npz."""
    import zipfile

    import numpy as np

    from agilerl.arena.models.errors import ConfigError
    from agilerl.envs.offline import load_offline_dataset

    h5py = pytest.importorskip("h5py")
    bomb = tmp_path / "bomb.h5"
    with h5py.File(bomb, "w") as handle:
        handle.create_dataset("observations", shape=(10**9, 4), dtype="f4")
        for key in ("actions", "rewards", "terminals", "episode_terminals"):
            handle.create_dataset(key, shape=(10**9,), dtype="f4")
    assert bomb.stat().st_size < 10_000
    with pytest.raises(ConfigError, match="declares 32,000,000,000 bytes of arrays but stores 0"):
        load_offline_dataset(dataset_path=str(bomb))
    zipped = tmp_path / "bomb.npz"
    chunk = np.zeros(2**20, np.uint8).tobytes()
    with (
        zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("observations.npy", "w", force_zip64=True) as member,
    ):
        for _ in range(128):  # 128 MiB of zeros in ~130 KB
            member.write(chunk)
    with pytest.raises(ConfigError, match="declares 134,217,728 bytes"):
        load_offline_dataset(dataset_path=str(zipped))
