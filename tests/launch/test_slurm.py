"""Sweeps on a real single-node SLURM cluster (scripts/slurm_local_cluster.sh).

Run with ``python -m pytest -m slurm`` after ``scripts/slurm_local_cluster.sh start``
(the fixture starts it too, idempotently).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from sweep_helpers import QUICK, REPO, jobs, multirun

pytestmark = pytest.mark.slurm
SCRIPT = REPO / "scripts" / "slurm_local_cluster.sh"


@pytest.fixture(scope="module", autouse=True)
def slurm_cluster() -> Iterator[None]:
    started = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True)
    assert started.returncode == 0, started.stdout + started.stderr
    env = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True).stdout
    os.environ["SLURM_CONF"] = env.strip().split("=", 1)[1]
    yield


def _now() -> str:
    return datetime.now().strftime("%Y-%m-%dT%H:%M:%S")


def _jobs_submitted_since(start: str) -> list[str]:
    """Job ids submitted at or after ``start`` (by submit time, so a job of an earlier test
    that the accounting records late is not counted)."""
    out = subprocess.run(
        ["sacct", "-n", "-X", "-a", "-P", "-S", "2000-01-01", "-o", "JobID,Submit"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split("|") for line in out.splitlines() if "|" in line]
    return [job for job, submit in rows if submit >= start]


def test_two_job_seed_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "seeds"
    done = multirun(sweep, "hydra/launcher=slurm_cpu", "seed=0,1", *QUICK)
    assert done.returncode == 0, done.stderr[-3000:]
    records = jobs(sweep)
    assert len(records) == 2
    for record in records.values():
        assert record.state == "completed" and record.job_id and record.wall_seconds
        summary = json.loads((Path(record.run_dir) / "summary.json").read_text())
        assert summary["status"] == "completed"
        assert summary["host"]["slurm_job_id"] is not None


def test_requeued_job_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    sweep = tmp_path / "requeue"
    args = [
        *QUICK,
        "training.max_steps=30000",
        "training.checkpoint_steps=1024",
        "training.evo_steps=1024",
    ]
    command = [
        sys.executable,
        str(REPO / "train.py"),
        "-m",
        f"hydra.sweep.dir={sweep}",
        "hydra/launcher=slurm_cpu",
        "seed=5",
        *args,
    ]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while not list(sweep.glob("*/checkpoints/latest")) and time.time() < deadline:
        time.sleep(0.2)
    record = next(iter(jobs(sweep).values()))
    assert record.job_id, "the job never started"
    subprocess.run(["scontrol", "requeue", record.job_id], check=True)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output.decode()[-3000:]
    events = [json.loads(line) for line in (sweep / "ledger.jsonl").read_text().splitlines()]
    states = [e["state"] for e in events]
    assert states.count("running") == 2, states
    assert "interrupted" in states and states[-1] == "completed"
    run_dir = Path(jobs(sweep)[record.key].run_dir)
    rows = (run_dir / "metrics.csv").read_text().splitlines()[1:]
    steps = [int(r.split(",")[0]) for r in rows]
    assert steps == sorted(set(steps)), "metrics restarted instead of continuing"
    assert json.loads((run_dir / "summary.json").read_text())["total_steps"] >= 30000


def test_failed_job_is_reported_and_does_not_hang(tmp_path: Path) -> None:
    sweep = tmp_path / "fail"
    start = time.time()
    done = multirun(
        sweep,
        "hydra/launcher=slurm_cpu",
        "environment.name=CartPole-v1,CartPol-v1",
        *QUICK,
        timeout=300,
    )
    assert done.returncode != 0 and time.time() - start < 300
    states = sorted(r.state for r in jobs(sweep).values())
    assert states == ["completed", "failed"]
    status = subprocess.run(
        [sys.executable, "-m", "agilerl.cli", "sweep", "status", str(sweep)],
        capture_output=True,
        text=True,
    )
    assert "failed" in status.stdout and "completed" in status.stdout


def test_cancelled_job_is_marked_failed_by_the_scheduler_state(tmp_path: Path) -> None:
    sweep = tmp_path / "cancel"
    command = [
        sys.executable,
        str(REPO / "train.py"),
        "-m",
        f"hydra.sweep.dir={sweep}",
        "hydra/launcher=slurm_cpu",
        "hydra.launcher.max_num_timeout=0",
        "seed=7",
        *QUICK,
        "training.max_steps=500000",
    ]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        records = list(jobs(sweep).values()) if (sweep / "ledger.jsonl").exists() else []
        if records and records[0].state == "running":
            break
        time.sleep(0.2)
    subprocess.run(["scancel", "--signal=KILL", "--full", records[0].job_id], check=True)
    proc.wait(timeout=180)
    assert next(iter(jobs(sweep).values())).state == "failed"


def test_invalid_sweep_submits_nothing(tmp_path: Path) -> None:
    start = _now()
    done = multirun(
        tmp_path / "bad", "hydra/launcher=slurm_cpu", "algorithm.clip_coef=0.2,7", *QUICK
    )
    assert done.returncode == 2 and "algorithm.clip_coef" in done.stderr
    assert _jobs_submitted_since(start) == []


def test_gpus_per_node_reaches_the_job(tmp_path: Path) -> None:
    sweep = tmp_path / "gpu"
    done = multirun(
        sweep, "hydra/launcher=slurm_cpu", "hydra.launcher.gpus_per_node=1", "seed=0", *QUICK
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = next(iter(jobs(sweep).values()))
    summary = json.loads((Path(record.run_dir) / "summary.json").read_text())
    assert summary["host"]["cuda_visible_devices"] not in (None, "")


def test_unknown_partition_is_refused_naming_the_ones_that_exist(tmp_path: Path) -> None:
    sweep = tmp_path / "partition"
    start = _now()
    done = multirun(
        sweep, "hydra/launcher=slurm_cpu", "hydra.launcher.partition=cpu", "seed=0", *QUICK
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "hydra.launcher.partition: this cluster has no partition cpu" in done.stderr
    assert "debug (default), urgent" in done.stderr
    assert "Traceback" not in done.stderr
    assert _jobs_submitted_since(start) == []


def test_other_sbatch_refusals_are_user_errors(tmp_path: Path) -> None:
    done = multirun(
        tmp_path / "gres",
        "hydra/launcher=slurm_cpu",
        "+hydra.launcher.additional_parameters.gres=nosuch:1",
        "seed=0",
        *QUICK,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "hydra.launcher: sbatch refused the jobs: sbatch: error:" in done.stderr
    assert "partitions (sinfo): debug (default), urgent" in done.stderr
    assert "Traceback" not in done.stderr
