"""Cases 17, 18, 24, 26: stops checkpoint, say how the run ended, and leave handlers as found."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from agilerl.arena.models.errors import ConfigError
from agilerl.trainer import LocalTrainer
from agilerl.training.checkpointing import CheckpointManager
from tests.reliability.helpers import REPO, TINY_PPO, no_traceback, write_manifest

FAULTY = "tests.reliability.faulty_envs:make"


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_case_18_ctrl_c_checkpoints_records_interrupted_and_exits_130(
    tmp_path: Path, inherited: str
) -> None:
    """Also when SIGINT was inherited as ignored (a script's background job, a test
    worker): the run still stops on it, so it must not exit 0 as if it had finished."""

    def disposition() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if inherited == "ignored" else signal.SIG_DFL)

    manifest = write_manifest(
        tmp_path / "m.yaml",
        training={"max_steps": 200_000, "evo_steps": 256, "eval_loop": 1, "eval_steps": 20},
    )
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "train.py"), f"manifest={manifest}", f"run_dir={run_dir}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=disposition,
    )
    _wait_for(run_dir / "checkpoints" / "latest", proc)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["total_steps"] > 0
    assert summary["checkpoint"] and Path(summary["checkpoint"]).is_dir()


ALGORITHMS: dict[str, tuple[dict, str, dict]] = {
    # name: (algorithm section, env id, replay_buffer section)
    "ppo": ({**TINY_PPO, "learn_step": 32}, "CartPole-v1", {}),
    "dqn": (
        {"name": "DQN", "learn_step": 4, "batch_size": 32},
        "CartPole-v1",
        {"replay_buffer": {"max_size": 10_000, "store_in_checkpoint": True}},
    ),
    "rainbow_dqn": (
        {"name": "RainbowDQN", "learn_step": 4, "batch_size": 32},
        "CartPole-v1",
        {"replay_buffer": {"max_size": 10_000, "store_in_checkpoint": True}},
    ),
    "sac": (
        {"name": "SAC", "learn_step": 4, "batch_size": 32},
        "Pendulum-v1",
        {"replay_buffer": {"max_size": 10_000, "store_in_checkpoint": True}},
    ),
    "dqn_unstored": ({"name": "DQN", "learn_step": 4, "batch_size": 32}, "CartPole-v1", {}),
}


def _run(
    run_dir: Path,
    flag: Path,
    *,
    resume: bool = False,
    fault: str = "sigterm",
    algorithm: str = "ppo",
) -> None:
    section, env_id, extra = ALGORITHMS[algorithm]
    training = {} if algorithm == "ppo" else {"learning_delay": 50}
    LocalTrainer(
        section,
        {
            "name": "Faulty-v0",
            "entrypoint": FAULTY,
            "num_envs": 1,
            "config": {"fault": fault, "at": 200, "flag": str(flag), "env_id": env_id},
        },
        {"max_steps": 448, "evo_steps": 128, "eval_loop": 1, "eval_steps": 20, **training},
        run_dir=run_dir,
        resume=resume,
        seed=2,
        verbose=False,
        trust_code=True,
        **extra,
    ).train()


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    for row in rows:
        row.pop("wall_seconds")
    return rows


@pytest.mark.parametrize("algorithm", ["ppo", "dqn", "rainbow_dqn", "sac"])
def test_case_24_sigterm_mid_generation_then_resume_equals_uninterrupted(
    tmp_path: Path, algorithm: str
) -> None:
    """Off-policy too: the buffer, its sampling generator, the agents' exploration
    generators and the learning credits are checkpointed, and every generation starts
    from seeded env resets, so the resumed run repeats the dropped generation exactly."""
    torch.set_num_threads(1)
    whole_flag = tmp_path / "never"
    whole_flag.write_text("no signal in this run\n")
    _run(tmp_path / "whole", whole_flag, algorithm=algorithm)
    parts, flag = tmp_path / "parts", tmp_path / "flag"
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        _run(parts, flag, algorithm=algorithm)  # SIGTERM at env step 200, in generation 2
    assert stopped.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is previous
    summary = json.loads((parts / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["total_steps"] == 128
    assert [r["step"] for r in _metrics(parts)] == ["128"]  # no extra evaluation row
    _run(parts, flag, resume=True, algorithm=algorithm)
    assert _metrics(parts) == _metrics(tmp_path / "whole")
    a = CheckpointManager(parts / "checkpoints").load_latest()[0][0]
    b = CheckpointManager(tmp_path / "whole" / "checkpoints").load_latest()[0][0]
    assert _tensors(a).keys() == _tensors(b).keys() and _tensors(a)
    for key, tensor in _tensors(a).items():
        assert torch.equal(tensor, _tensors(b)[key]), key


def test_case_24_a_buffer_kept_out_of_checkpoints_still_survives_a_stop(tmp_path: Path) -> None:
    """Without ``store_in_checkpoint`` the periodic checkpoints skip the buffer, but the
    one made as the run stops carries it: a preempted run resumes with what it collected."""
    torch.set_num_threads(1)
    parts, flag = tmp_path / "parts", tmp_path / "flag"
    with pytest.raises(SystemExit):
        _run(parts, flag, algorithm="dqn_unstored")
    stored = sorted(p.parent.name for p in (parts / "checkpoints").glob("*/memory.pt"))
    assert stored == ["step_000000000200"]  # the stop's checkpoint only
    _run(parts, flag, resume=True, algorithm="dqn_unstored")
    sizes = [int(r["memory_size"]) for r in _metrics(parts)]
    assert sizes == [128, 200, 256, 384, 448]  # the resumed run did not start empty


def _tensors(state: object, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested agent state, by its path (weights and optimiser state)."""
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    if isinstance(state, dict):
        items = state.items()
    elif isinstance(state, list | tuple):
        items = enumerate(state)
    else:
        return {}
    found: dict[str, torch.Tensor] = {}
    for key, value in items:
        found.update(_tensors(value, f"{prefix}/{key}"))
    return found


def test_case_26_handlers_are_restored_after_a_failed_train(tmp_path: Path) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    with pytest.raises(ConfigError, match="exploded"):
        _run(tmp_path / "run", tmp_path / "flag", fault="raise")
    assert {s: signal.getsignal(s) for s in before} == before


def test_case_17_sigterm_stops_a_whole_local_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "train.py"),
            "-m",
            f"hydra.sweep.dir={sweep}",
            "seed=0,1",
            "training.max_steps=200000",
            "training.evo_steps=256",
            "training.eval_steps=20",
            "environment.num_envs=1",
            "logger.tensorboard=false",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list(sweep.glob("*/checkpoints/latest")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    events = [json.loads(line) for line in (sweep / "ledger.jsonl").read_text().splitlines()]
    states = [(e["key"].rsplit(",", 1)[-1], e["state"]) for e in events]
    assert ("seed=0", "interrupted") in states
    assert ("seed=1", "running") not in states  # the next job never started
    assert no_traceback(subprocess.CompletedProcess([], 0, "", err))


@pytest.mark.slow
@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_case_17_sigterm_stops_a_submitit_local_sweep(tmp_path: Path, inherited: str) -> None:
    """Also when the sweep inherited SIGINT as ignored (its jobs would inherit it too, and
    the cancel that submitit sends them as SIGINT would be lost)."""

    def disposition() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if inherited == "ignored" else signal.SIG_DFL)

    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "train.py"),
            "-m",
            "hydra/launcher=local",
            f"hydra.sweep.dir={sweep}",
            "seed=0,1",
            "training.max_steps=200000",
            "training.evo_steps=256",
            "training.eval_steps=20",
            "environment.num_envs=1",
            "logger.tensorboard=false",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=disposition,
    )
    deadline = time.monotonic() + 240
    while len(list(sweep.glob("*/checkpoints/latest"))) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    deadline = time.monotonic() + 120
    while True:  # the cancelled jobs checkpoint and record how they ended
        summaries = [json.loads(p.read_text()) for p in sweep.glob("*/summary.json")]
        if len(summaries) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [s["status"] for s in summaries] == ["interrupted", "interrupted"]
