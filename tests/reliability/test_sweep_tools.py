"""Cases 12 and 15: the sweep tools tolerate a torn ledger and never relaunch a running job."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from agilerl.launch.ledger import Ledger
from tests.launch.sweep_helpers import QUICK, multirun
from tests.reliability.helpers import no_traceback, run


def test_case_15_a_torn_last_ledger_line_is_skipped(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.append(key="seed=0", overrides=["seed=0"], state="completed", best_fitness=10.0)
    ledger.append(key="seed=1", overrides=["seed=1"], state="running")
    with ledger.path.open("a") as handle:
        handle.write('{"key": "seed=1", "overrides": ["seed=1"], "sta')  # killed mid-append
    assert {j.key: j.state for j in ledger.jobs()} == {"seed=0": "completed", "seed=1": "running"}
    status = run("-m", "agilerl.cli", "sweep", "status", str(tmp_path))
    assert status.returncode == 0 and no_traceback(status) and "seed=1" in status.stdout
    summary = run("-m", "agilerl.cli", "sweep", "summary", "--no-plot", str(tmp_path))
    assert summary.returncode == 0 and no_traceback(summary) and "10.00" in summary.stdout
    with ledger.path.open("a") as handle:
        handle.write(
            "\n" + json.dumps({"key": "seed=2", "overrides": ["seed=2"], "state": "failed"})
        )
    with pytest.warns(UserWarning, match="ledger.jsonl:3: unreadable ledger line skipped"):
        assert len(ledger.jobs()) == 3


@pytest.mark.slow
def test_case_12_rerun_skips_jobs_that_are_still_running(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    first = multirun(sweep, "seed=0,1", *QUICK)
    assert first.returncode == 0, first.stderr
    ledger = Ledger(sweep)
    keys = {next(o for o in j.overrides if o.startswith("seed=")): j for j in ledger.jobs()}
    alive = keys["seed=0"]  # pretend another launch runs it now: a live pid on this host
    ledger.append(
        key=alive.key,
        overrides=alive.overrides,
        state="running",
        pid=os.getpid(),
        host=socket.gethostname(),
    )
    lost = keys["seed=1"]
    ledger.append(key=lost.key, overrides=lost.overrides, state="failed", error="node lost")
    printed = run("-m", "agilerl.cli", "sweep", "rerun", "--print-only", str(sweep))
    assert printed.returncode == 0
    assert "skipped, still running" in printed.stdout and "1 of 2 job(s)" in printed.stdout
    events_before = len(ledger.path.read_text().splitlines())
    again = run("-m", "agilerl.cli", "sweep", "rerun", str(sweep), timeout=300)
    assert again.returncode == 0, again.stderr
    assert "1 still running" in again.stdout and f"skipped [still running] {alive.key}" in (
        again.stdout
    )
    new = [json.loads(x) for x in ledger.path.read_text().splitlines()[events_before:]]
    assert new and all(e["key"] == lost.key for e in new)
    assert {j.key: j.state for j in ledger.jobs(reconcile=False)}[alive.key] == "running"
