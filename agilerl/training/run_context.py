"""Everything a training loop needs besides agents and envs: where to write, when to stop."""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agilerl.arena.models.training import TrainingSpec
from agilerl.logging.loggers import FanOut
from agilerl.logging.progress import TrainingProgress
from agilerl.logging.run_dir import RunDirectory
from agilerl.training.checkpointing import CheckpointManager, ResumeState
from agilerl.training.results import LoopResult

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


@dataclass
class RunContext:
    """Run-directory writers, metric sinks, progress display and stop conditions.

    A loop called without one gets :meth:`ephemeral`: no files, no display.

    Attributes:
        run_dir: The run directory, or ``None`` to write nothing.
        sinks: TensorBoard/wandb sinks.
        progress: The console display.
        checkpoints: Checkpoint writer/reader.
        seed: Base seed of envs, torch and numpy.
        max_wall_seconds: Stop after this much wall time (including time
            before a resume).
        resume_state: Loop state from the checkpoint being resumed.
        extra_state: Plain data a paradigm's loop adds to its checkpointed state.
        elapsed_before: Wall seconds spent before this process (resume).
        stop_requested: Set by a signal handler; the loop checkpoints and stops.
        wandb_id: The wandb run id, checkpointed so a resume continues that run.
        last_result: The loop's result as of its latest evaluation, kept up to
            date by the loop so a run that raises still reports its counters.
        memory_provider: Returns the replay memory's state for checkpoints,
            else ``None``.
        memory_every_checkpoint: Every checkpoint carries the memory (the
            manifest's ``store_in_checkpoint``); otherwise only one made as
            the run stops early (a signal, the time limit, a failure).
        operators_provider: Returns the selection and mutation operators' RNG
            states for checkpoints (evolutionary HPO), else ``None``.
        stop_agreement: In a multi-process run, takes this process's "stop now"
            and returns whether any process stops (a collective every process
            calls at the same step); ``None`` in one process.
        training: The run's validated training section: a loop binds the spec it is given
            here (:func:`~agilerl.training.engine.bind_training`), so the engine and
            :class:`~agilerl.training.population_loop.PopulationLoop` read the same one.
        on_evaluation: Called after each evaluation of the population with the step
            (per member, the unit of ``max_steps``) and the run's best fitness so far;
            returning ``True`` stops the run as ``pruned`` (an Optuna trial's pruner).
            Not called in a multi-process run.
    """

    run_dir: RunDirectory | None = None
    sinks: FanOut = field(default_factory=lambda: FanOut([]))
    progress: TrainingProgress | None = None
    checkpoints: CheckpointManager | None = None
    seed: int = 0
    max_wall_seconds: float | None = None
    resume_state: ResumeState | None = None
    extra_state: dict[str, Any] = field(default_factory=dict)
    elapsed_before: float = 0.0
    stop_requested: str | None = None
    wandb_id: str | None = None
    last_result: LoopResult | None = None
    memory_provider: Any = None
    memory_every_checkpoint: bool = True
    operators_provider: Any = None
    stop_agreement: Callable[[bool], bool] | None = None
    training: TrainingSpec = field(default_factory=TrainingSpec)
    on_evaluation: Callable[[int, float], bool] | None = None
    started: float = field(default_factory=time.perf_counter)

    @classmethod
    def ephemeral(cls, seed: int = 0) -> RunContext:
        """A context that writes nothing."""
        return cls(seed=seed)

    def elapsed(self) -> float:
        """Wall seconds of the run, including time before a resume."""
        return self.elapsed_before + time.perf_counter() - self.started

    def explicit(self, name: str) -> Any:
        """``training.<name>`` if the manifest set it, else ``None`` (the paradigm's default)."""
        return getattr(self.training, name) if name in self.training.model_fields_set else None

    def out_of_time(self) -> bool:
        """Whether ``max_wall_seconds`` is used up."""
        return self.max_wall_seconds is not None and self.elapsed() >= self.max_wall_seconds

    def install_signal_handlers(self) -> None:
        """SIGINT (Ctrl-C), SIGTERM, SIGUSR1 and SIGUSR2 (SLURM's signals) stop the run.

        The loop finishes its current rollout, writes a checkpoint and returns;
        :meth:`forward_stop_signal` then hands the signal on. A second Ctrl-C
        stops at once (``KeyboardInterrupt``).
        """

        def handler(signum: int, _frame: Any) -> None:
            if signum == signal.SIGINT and self.stop_requested == "SIGINT":
                raise KeyboardInterrupt
            self.stop_requested = signal.Signals(signum).name
            self._stop_signal = signum

        self._previous_handlers = {}
        for sig in (signal.SIGINT, *STOP_SIGNALS):
            self._previous_handlers[sig] = signal.signal(sig, handler)
        # Past a file-size limit (ulimit -f) a write then fails with EFBIG, which the
        # writers report naming the file, instead of SIGXFSZ killing the run mid-write.
        self._previous_xfsz = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def restore_signal_handlers(self) -> None:
        """Put back the handlers :meth:`install_signal_handlers` replaced (idempotent)."""
        previous = getattr(self, "_previous_handlers", {})
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._previous_handlers = {}
        xfsz = getattr(self, "_previous_xfsz", None)
        if xfsz is not None:
            signal.signal(signal.SIGXFSZ, xfsz)
            self._previous_xfsz = None
        self._forward_to = {**getattr(self, "_forward_to", {}), **previous}

    def forward_stop_signal(self) -> None:
        """Restore the previous handlers and pass on a stop signal that arrived.

        Ctrl-C raises ``KeyboardInterrupt`` (``train.py`` exits 130), also when SIGINT
        was inherited as ignored. A previous Python handler (submitit's requeue) is
        called. Otherwise the process exits with ``128 + signum`` as the signal's
        default action would, so a sweep stops instead of starting its next job.
        """
        self.restore_signal_handlers()
        signum = getattr(self, "_stop_signal", None)
        if signum is None:
            return
        old = self._forward_to.get(signum)
        # SIGINT inherited as ignored (a background job of a script, a test worker) still
        # stopped this run: it ends as interrupted (exit 130), not as a success
        if signum == signal.SIGINT and old in (
            signal.default_int_handler,
            signal.SIG_IGN,
            signal.SIG_DFL,
            None,
        ):
            raise KeyboardInterrupt
        if callable(old) and old is not signal.default_int_handler:
            old(signum, None)
            if not os.environ.get("SLURM_JOB_ID"):
                return
        raise SystemExit(128 + signum)

    @property
    def path(self) -> Path | None:
        return self.run_dir.path if self.run_dir else None


def finite_or_none(value: float | None) -> float | None:
    """``value`` if it is a finite number, else ``None`` (JSON has no NaN)."""
    return value if value is not None and math.isfinite(value) else None
