"""The sweep ledger: one line per job event at the multirun root, newest state wins.

``<sweep dir>/ledger.jsonl`` is appended to by the launcher (``pending`` when a
job is queued, ``failed`` when the scheduler lost it) and by each job
(``running`` at start; ``completed``, ``target_reached``, ``time_limit``,
``pruned`` (stopped early by an Optuna sweep's pruner), ``interrupted`` or
``failed`` at the end). Appends are whole lines under an
exclusive lock, so concurrent jobs on one file system never interleave.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agilerl.arena.models.errors import ConfigError
from agilerl.training.run_lock import try_lock

LEDGER_FILE = "ledger.jsonl"
FINAL_STATES = ("completed", "target_reached", "time_limit", "pruned")
UNFINISHED_STATES = ("pending", "running", "interrupted", "failed")
_SLURM_FAILED = (
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
)


_SLURM_ALIVE = ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED", "CONFIGURING", "COMPLETING")


def job_key(overrides: list[str] | tuple[str, ...]) -> str:
    """A stable name for a job: its sweep overrides, sorted (Hydra's own keys left out)."""
    kept = sorted(o for o in overrides if not o.lstrip("+~").startswith("hydra"))
    return ",".join(kept) or "(defaults)"


@dataclass
class JobRecord:
    """The latest known state of one sweep job."""

    key: str
    overrides: list[str]
    state: str
    num: int | None = None
    job_id: str | None = None
    run_dir: str | None = None
    best_fitness: float | None = None
    wall_seconds: float | None = None
    error: str | None = None
    pid: int | None = None
    host: str | None = None
    scheduler_state: str | None = None
    updated: float = field(default_factory=time.time)

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    def still_running(self) -> bool:
        """Whether the job is pending or running right now.

        A job that recorded ``running`` from this host counts while its
        process is alive; a scheduler job (``job_id``) counts while it is
        pending or running (``sacct`` has already marked the lost ones failed).
        """
        if self.state not in ("pending", "running"):
            return False
        if self.pid is not None and self.host == socket.gethostname():
            try:
                os.kill(int(self.pid), 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        return self.scheduler_state in _SLURM_ALIVE


class Ledger:
    """Reads and appends ``ledger.jsonl`` of one sweep directory."""

    def __init__(self, sweep_dir: str | Path) -> None:
        self.dir = Path(sweep_dir)
        self.path = self.dir / LEDGER_FILE

    def append(self, **record: Any) -> None:
        """Append one event (``key``, ``overrides`` and ``state`` at least)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"updated": time.time(), **record}, default=str) + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
            fcntl.flock(handle, fcntl.LOCK_UN)

    def jobs(self, reconcile: bool = True) -> list[JobRecord]:
        """Every job's newest state, in the order the jobs first appeared.

        Args:
            reconcile: Ask SLURM (``sacct``) about jobs still marked pending or
                running; a job the scheduler reports as failed, cancelled or
                timed out without writing its own end record is marked failed.
        """
        records: dict[str, JobRecord] = {}
        if self.path.exists():
            lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                    if not isinstance(event, dict) or "key" not in event:
                        raise ValueError("not a job event")
                except ValueError:
                    # A torn last line is a job killed mid-append; anything else is reported.
                    if number != len(lines):
                        warnings.warn(
                            f"{self.path}:{number}: unreadable ledger line skipped",
                            UserWarning,
                            stacklevel=2,
                        )
                    continue
                known = records.get(event["key"])
                merged = {**(known.__dict__ if known else {}), **event}
                records[event["key"]] = JobRecord(
                    **{k: merged.get(k) for k in JobRecord.__dataclass_fields__ if k in merged}
                )
        jobs = list(records.values())
        if reconcile:
            _reconcile_with_slurm(jobs)
        return jobs


def _reconcile_with_slurm(jobs: list[JobRecord]) -> None:
    open_jobs = [j for j in jobs if j.state in ("pending", "running") and j.job_id]
    if not open_jobs or shutil.which("sacct") is None:
        return
    ids = ",".join(sorted({str(j.job_id) for j in open_jobs}))
    try:
        out = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-j", ids, "-o", "JobID,State"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return
    states = {}
    for line in out.splitlines():
        job_id, _, state = line.partition("|")
        states[job_id.strip()] = state.split()[0] if state else ""
    for job in open_jobs:
        state = states.get(str(job.job_id), "")
        job.scheduler_state = state or None
        if state in _SLURM_FAILED:
            job.state = "failed"
            job.error = f"SLURM state {state}"
        elif state == "RUNNING" and job.state == "pending":
            job.state = "running"


SWEEP_LOCK_FILE = ".sweep.lock"
SWEEP_ENTRIES = frozenset(
    {
        "ledger.jsonl",
        "multirun.yaml",
        "optimization_results.yaml",
        "optuna.journal",
        SWEEP_LOCK_FILE,
    }
)
"""Files only a sweep of ours writes at the top of its directory."""


def check_sweep_dir(path: str | Path) -> None:
    """Refuse ``hydra.sweep.dir`` naming an existing folder that is not one of our sweeps.

    An empty or new folder is used, and a sweep directory of ours (``ledger.jsonl``)
    is resumed; anything else is the user's and is left untouched.

    Raises:
        ConfigError: Naming the folder and what it holds.
    """
    folder = Path(path)
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ConfigError(f"hydra.sweep.dir={folder} is a file; choose a new sweep directory")
    try:
        entries = {entry.name for entry in folder.iterdir()}
    except OSError as exc:
        raise ConfigError(f"hydra.sweep.dir={folder} cannot be read ({exc.strerror})") from None
    if not entries or entries & SWEEP_ENTRIES:
        return
    shown = ", ".join(sorted(entries)[:5])
    raise ConfigError(
        f"hydra.sweep.dir={folder} already exists and is not a sweep of agilerl (it holds "
        f"{shown}); choose a new or empty folder: nothing in it was changed"
    )


_held_sweeps: dict[Path, int] = {}


def hold_sweep_dir(path: str | Path) -> None:
    """Take ``path``'s sweep lock for the rest of this process (one launcher per sweep).

    A second launcher on the same folder (two sweeps started in the same second
    into ``multirun/<date>/<time>``, or one ``hydra.sweep.dir`` given twice) is
    refused before it queues a job, instead of both running the same jobs.
    A launcher that ended (or was killed) releases it; jobs it left running are
    then recognised through the ledger.

    Raises:
        ConfigError: Another launcher holds the folder (naming its pid).
    """
    folder = Path(path)
    key = folder.resolve()
    if key in _held_sweeps:
        return
    fd = try_lock(folder, SWEEP_LOCK_FILE, "hydra.sweep.dir")
    if isinstance(fd, str):
        raise ConfigError(
            f"hydra.sweep.dir={folder} is in use by another sweep (pid {fd}); wait for it "
            "to end (agilerl sweep status shows its jobs), or choose another hydra.sweep.dir"
        )
    _held_sweeps[key] = fd
