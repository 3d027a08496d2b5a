"""Cases 19-22, 25, 28: faults name the env, the step, the directory, the device or the file."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
import torch

from agilerl.arena.models.errors import ConfigError
from agilerl.trainer import LocalTrainer
from tests.reliability.helpers import TINY_PPO, no_traceback, run, train, write_manifest

FAULTY = "tests.reliability.faulty_envs:make"
TINY = {"max_steps": 128, "evo_steps": 64, "eval_loop": 1, "eval_steps": 10}


def _faulty(tmp_path: Path, fault: str, at: int) -> LocalTrainer:
    return LocalTrainer(
        TINY_PPO,
        {
            "name": "Faulty-v0",
            "entrypoint": FAULTY,
            "num_envs": 1,
            "config": {"fault": fault, "at": at},
        },
        TINY,
        run_dir=tmp_path / "run",
        verbose=False,
        trust_code=True,
    )


def test_case_19_an_env_that_raises_is_named_with_its_step(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=rf"{FAULTY}.*RuntimeError: the physics engine exploded at env step 30"
    ):
        _faulty(tmp_path, "raise", 30).train()
    manifest = write_manifest(
        tmp_path / "m.yaml",
        {
            "name": "Faulty-v0",
            "entrypoint": FAULTY,
            "num_envs": 1,
            "config": {"fault": "raise", "at": 30},
        },
    )
    cli = train(f"manifest={manifest}", f"run_dir={tmp_path / 'cli'}", "trust_code=true")
    assert cli.returncode == 2 and no_traceback(cli) and "env step 30" in cli.stderr


def test_case_20_non_finite_observations_blame_the_env_not_the_lr(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"non-finite.*observation at env step 30") as caught:
        _faulty(tmp_path, "nan_obs", 30).train()
    assert FAULTY in str(caught.value) and "algorithm.lr" not in str(caught.value)


@pytest.fixture
def tiny_disk(tmp_path: Path):
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=40k", f"agilerl-{uuid.uuid4().hex[:6]}", str(mount)],
        capture_output=True,
    )
    if made.returncode != 0:
        pytest.skip("needs permission to mount a small tmpfs (a full disk on demand)")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_case_21_a_full_disk_names_the_directory(tiny_disk: Path, tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "m.yaml")
    run_dir = tiny_disk / "run"
    result = train(f"manifest={manifest}", f"run_dir={run_dir}", "logger.tensorboard=false")
    assert result.returncode == 2 and no_traceback(result), result.stderr
    assert f"no space left on the device holding {run_dir}" in result.stderr
    assert "inline_container" not in result.stderr


def test_case_22_devices_are_checked_at_validation_time(tmp_path: Path) -> None:
    tpu = train("device=tpu", "dry_run=true")
    assert tpu.returncode == 2 and no_traceback(tpu) and "device='tpu'" in tpu.stderr
    if not torch.cuda.is_available():
        cuda = train("device=cuda", "dry_run=true")
        assert cuda.returncode == 2 and "no CUDA GPU is visible" in cuda.stderr
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            LocalTrainer("PPO", "CartPole-v1", device="cuda", run_dir=tmp_path / "run")
    else:
        count = torch.cuda.device_count()
        beyond = train(f"device=cuda:{count}", "dry_run=true")
        assert beyond.returncode == 2 and f"has {count} CUDA device(s)" in beyond.stderr
        assert train("device=cuda", "dry_run=true").returncode == 0
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def population_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("evaluate") / "run"
    LocalTrainer(
        TINY_PPO,
        {"name": "CartPole-v1", "num_envs": 1},
        {**TINY, "pop_size": 2},
        run_dir=run_dir,
        verbose=False,
    ).train()
    return run_dir


def test_case_25_evaluate_refuses_another_env_and_skips_a_truncated_agent(
    population_run: Path,
) -> None:
    other = run(
        "-m",
        "agilerl.cli",
        "evaluate",
        str(population_run),
        "--env",
        "Pendulum-v1",
        "--episodes",
        "1",
    )
    assert other.returncode == 2 and no_traceback(other)
    assert "does not match the agent" in other.stderr and "Pendulum-v1" in other.stderr
    latest = (
        population_run
        / "checkpoints"
        / (population_run / "checkpoints" / "latest").read_text().strip()
    )
    agent = latest / "agent_1.pt"
    agent.write_bytes(agent.read_bytes()[:80])
    best = run("-m", "agilerl.cli", "evaluate", str(population_run), "--episodes", "1")
    assert best.returncode == 0, best.stderr
    assert "agent_1.pt is truncated or corrupt" in best.stderr and "agent_0.pt" in best.stdout
    chosen = run(
        "-m", "agilerl.cli", "evaluate", str(population_run), "--agent", "1", "--episodes", "1"
    )
    assert chosen.returncode == 2 and no_traceback(chosen) and "agent_1.pt" in chosen.stderr


def test_case_28_wrappers_are_validated_before_the_run(tmp_path: Path) -> None:
    typo = write_manifest(tmp_path / "typo.yaml", {"name": "CartPole-v1", "wrappers": ["TimeLimt"]})
    bad = train(f"manifest={typo}", "dry_run=true")
    assert bad.returncode == 2 and no_traceback(bad)
    assert (
        "env_wrappers[0]: 'TimeLimt' is not a gymnasium wrapper (did you mean TimeLimit?)"
        in bad.stderr
    )
    args = write_manifest(
        tmp_path / "args.yaml",
        {"name": "CartPole-v1", "wrappers": [["TimeLimit", {"max_steps": 5}]]},
    )
    wrong = train(f"manifest={args}", "dry_run=true")
    assert wrong.returncode == 2 and "TimeLimit takes max_episode_steps" in wrong.stderr
    good = {
        "name": "CartPole-v1",
        "num_envs": 1,
        "wrappers": [["TimeLimit", {"max_episode_steps": 5}]],
    }
    LocalTrainer(TINY_PPO, good, TINY, run_dir=tmp_path / "run", verbose=False).train()
    assert (tmp_path / "run" / "summary.json").is_file()


def test_video_recording_without_a_render_mode_is_refused_before_the_run(tmp_path: Path) -> None:
    video = write_manifest(
        tmp_path / "video.yaml",
        {"name": "CartPole-v1", "wrappers": [["RecordVideo", {"video_folder": "videos"}]]},
    )
    refused = train(f"manifest={video}", "dry_run=true")
    assert refused.returncode == 2 and no_traceback(refused)
    assert "RecordVideo records rendered frames" in refused.stderr
    assert "environment.env_config.render_mode=rgb_array" in refused.stderr
