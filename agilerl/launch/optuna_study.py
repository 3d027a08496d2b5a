"""Where an Optuna sweep's trials meet its study: the storage in the sweep directory.

The sweeper (``hydra_plugins/agilerl_plugins/optuna_sweeper.py``) asks the study
for trials and tells it their results. Each trial is one job of the sweep, run in
the sweeper's process, a subprocess or on a SLURM node; it reports its evaluations
to the same study as intermediate values and stops when the pruner says so. They
meet in the study's storage: ``hydra.sweeper.storage`` when set (an RDB URL such as
``sqlite:///study.db``), else a journal file at the sweep root (``optuna.journal``,
whose appends Optuna locks, so jobs on a shared file system can write it too).

The sweeper marks each trial with the job it launched (the job's key in the
ledger) and the sweep directory; a job finds its running trial by that mark.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agilerl.launch.pruners import make_pruner, parse_pruner

JOURNAL_FILE = "optuna.journal"
"""The study's journal at the sweep root, unless ``hydra.sweeper.storage`` names another."""
SWEEPER_TARGET = "hydra_plugins.agilerl_plugins.optuna_sweeper.OptunaSweeper"
JOB_ATTR = "agilerl_job"
"""Trial user attribute: the key (sorted overrides) of the job that runs the trial."""
SWEEP_ATTR = "agilerl_sweep_dir"
"""Trial user attribute: the sweep directory whose launch asked for the trial."""
PRUNED_ATTR = "pruned_at_step"
"""Trial user attribute: the step at which the pruner stopped the trial."""


def open_storage(storage: str | None, sweep_dir: Path) -> Any:
    """The study's storage: the RDB URL ``storage``, else the sweep's journal file.

    Args:
        storage: ``hydra.sweeper.storage`` (``None``: the journal in ``sweep_dir``).
        sweep_dir: The sweep's directory (``hydra.sweep.dir``).
    """
    if storage:
        return storage
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    sweep_dir.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(sweep_dir / JOURNAL_FILE)))


def sweep_marker(sweep_dir: Path) -> str:
    """How trials name the sweep directory that asked for them (its absolute path)."""
    return str(Path(sweep_dir).resolve())


class TrialReporter:
    """Reports a run's evaluations to its Optuna trial and says when to stop.

    Called by the training loop after every evaluation with the step (per member,
    the unit of ``training.max_steps``) and the run's best fitness so far (what the
    sweep maximises). A storage failure is reported once; the run then goes on
    unpruned rather than dying for a side channel.

    Args:
        trial: The running ``optuna.trial.Trial``.
        last_step: The last step already reported (a resumed job skips them).
    """

    def __init__(self, trial: Any, last_step: int = -1) -> None:
        self.trial = trial
        self.last_step = last_step
        self.broken = False

    @property
    def number(self) -> int:
        """The trial's number in the study."""
        return int(self.trial.number)

    def __call__(self, step: int, value: float) -> bool:
        """Report ``value`` at ``step``; ``True`` when the pruner stops the trial."""
        if self.broken or step <= self.last_step or not math.isfinite(value):
            return False
        import optuna

        try:
            self.trial.report(float(value), int(step))
            self.last_step = step
            if not self.trial.should_prune():
                return False
            self.trial.set_user_attr(PRUNED_ATTR, int(step))
        except (optuna.exceptions.OptunaError, OSError, RuntimeError, ValueError) as exc:
            self.broken = True
            print(
                f"warning: optuna trial {self.number}: reporting to the study failed ({exc}); "
                "the run goes on without pruning",
                file=sys.stderr,
                flush=True,
            )
            return False
        print(
            f"optuna: trial {self.number} pruned at step {step:,} (best fitness {value:.2f} "
            "trails the other trials)",
            file=sys.stderr,
            flush=True,
        )
        return True


def connect_trial(sweeper: Mapping[str, Any], sweep_dir: Path, job: str) -> TrialReporter | None:
    """The reporter of the trial this job runs, in a sweep of our Optuna sweeper.

    Args:
        sweeper: The sweep's ``hydra.sweeper`` settings, as plain data.
        sweep_dir: ``hydra.sweep.dir``.
        job: The job's key (:func:`agilerl.launch.ledger.job_key` of its overrides).

    Returns:
        ``None`` outside such a sweep, or (with a warning) when the study or the
        trial cannot be found: the run then trains its whole budget.
    """
    if sweeper.get("_target_") != SWEEPER_TARGET:
        return None
    import optuna

    try:
        study = optuna.load_study(
            study_name=str(sweeper.get("study_name") or "agilerl"),
            storage=open_storage(sweeper.get("storage"), Path(sweep_dir)),
            pruner=make_pruner(parse_pruner(sweeper.get("pruner"))),
        )
        # the journal in the sweep directory holds this sweep's trials alone (whatever path
        # a node mounts it under); a shared RDB study may hold other sweeps' trials too
        marker = sweep_marker(sweep_dir) if sweeper.get("storage") else None
        running = [
            t
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if t.user_attrs.get(JOB_ATTR) == job
            and (marker is None or t.user_attrs.get(SWEEP_ATTR) == marker)
        ]
    except (optuna.exceptions.OptunaError, OSError, KeyError, ValueError) as exc:
        print(
            f"warning: optuna: cannot open the sweep's study ({exc}); no pruning", file=sys.stderr
        )
        return None
    if not running:
        print(
            f"warning: optuna: no running trial of this sweep is job {job}; no pruning",
            file=sys.stderr,
        )
        return None
    frozen = running[-1]
    trial = optuna.trial.Trial(study, frozen._trial_id)
    return TrialReporter(trial, last_step=max(frozen.intermediate_values, default=-1))
