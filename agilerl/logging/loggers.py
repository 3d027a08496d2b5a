"""Metric sinks besides the CSV: TensorBoard and Weights & Biases."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Protocol


class MetricSink(Protocol):
    """Something that records scalar metrics."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Record ``metrics`` at env step ``step``."""

    def close(self) -> None:
        """Flush and release resources."""


class TensorBoardSink:
    """Scalars to TensorBoard event files."""

    FLUSH_SECONDS = 1.0
    """Events reach the file at most this long after they are logged (and on close): the
    progress reports log every ``reporting_interval`` env steps, too often to flush each."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))
        self._flushed = time.monotonic()

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        if time.monotonic() - self._flushed >= self.FLUSH_SECONDS:
            self.writer.flush()
            self._flushed = time.monotonic()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """Scalars to Weights & Biases; the resolved manifest is the run config.

    ``WANDB_MODE=offline`` (or ``mode: offline``) works without network. The
    run id is kept so a resumed run continues the same wandb run.
    """

    def __init__(
        self,
        *,
        run_dir: Path,
        config: dict[str, Any],
        name: str,
        project: str,
        entity: str | None,
        mode: str | None,
        tags: list[str],
        run_id: str | None = None,
    ) -> None:
        from agilerl.extras import require

        require("wandb", "logger=wandb", "logger")
        import wandb

        self.run = wandb.init(
            project=project,
            entity=entity,
            name=name,
            config=config,
            dir=str(run_dir),
            mode=mode or os.environ.get("WANDB_MODE") or "online",
            tags=tags,
            id=run_id,
            resume="allow" if run_id else None,
            reinit="finish_previous",
        )
        self.run_id: str = self.run.id

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({**metrics, "env_steps": step})

    def close(self) -> None:
        self.run.finish()


class FanOut:
    """Sends metrics to every sink."""

    def __init__(self, sinks: list[MetricSink]) -> None:
        self.sinks = sinks

    def log(self, metrics: dict[str, float], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
