"""A sweep job's own bookkeeping: its ledger records and its scheduler identity."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agilerl.launch.ledger import Ledger, job_key


def scheduler_job_id() -> str | None:
    """The SLURM job id (array jobs as ``<array>_<task>``), if running under SLURM."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID")


class SweepJob:
    """Ledger updates of the running job, when it is part of a multirun sweep."""

    def __init__(self, sweep_dir: Path, overrides: list[str], num: int | None) -> None:
        self.ledger = Ledger(sweep_dir)
        self.overrides = overrides
        self.key = job_key(overrides)
        self.num = num

    @classmethod
    def current(cls) -> SweepJob | None:
        """The job Hydra is running, or ``None`` outside a multirun."""
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if not HydraConfig.initialized():
            return None
        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode != RunMode.MULTIRUN:
            return None
        num = hydra_cfg.job.get("num")
        return cls(Path(hydra_cfg.sweep.dir), list(hydra_cfg.overrides.task), num)

    def record(self, state: str, **fields: Any) -> None:
        """Append this job's state to the ledger."""
        self.ledger.append(
            key=self.key,
            overrides=self.overrides,
            state=state,
            num=self.num,
            job_id=scheduler_job_id(),
            **fields,
        )
