"""From validated manifest and run options to a finished run (what train.py calls)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.launch.ledger import FINAL_STATES
from agilerl.launch.options import RunOptions


@dataclass(frozen=True)
class RunResult:
    """What a finished (or stopped) run reports back to Hydra and the ledger."""

    status: str
    run_dir: Path
    best_fitness: float | None
    wall_seconds: float | None


def resolve_run_dir(options: RunOptions) -> Path:
    """The run directory: ``run_dir``, else Hydra's output dir, else ``runs/latest``."""
    if options.run_dir:
        return Path(options.run_dir)
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path("runs/latest")


def read_result(run_dir: Path) -> RunResult | None:
    """The result recorded in ``summary.json``, if the run wrote one."""
    path = run_dir / "summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    return RunResult(
        summary["status"], run_dir, summary.get("best_fitness"), summary.get("wall_seconds")
    )


def previous_run(run_dir: Path, manifest: TrainingManifest) -> RunResult | bool:
    """Decide what to do with a run directory that already holds a run.

    Returns:
        The stored result if that run finished, ``True`` to resume it (it was
        interrupted, killed or requeued), ``False`` if the directory is new.

    Raises:
        ConfigError: If the directory holds a run of a different manifest.
    """
    if not (run_dir / "checkpoints" / "latest").exists():
        return False
    stored = TrainingManifest.from_file(run_dir / "manifest.yaml")
    if stored.to_dict() != manifest.to_dict():
        raise ConfigError(
            f"{run_dir} already holds a run of a different manifest; choose another "
            f"run_dir, or resume={run_dir} to continue that run"
        )
    result = read_result(run_dir)
    if result is not None and result.status in FINAL_STATES:
        return result
    return True


def train_manifest(
    manifest: TrainingManifest,
    options: RunOptions,
    on_evaluation: Callable[[int, float], bool] | None = None,
) -> RunResult:
    """Train ``manifest``; a run directory holding this run's checkpoints is resumed.

    Started as several processes (``torchrun``, ``srun``), rank 0 names and
    claims the run directory and decides whether to resume; the others follow.
    ``on_evaluation`` (an Optuna trial's reporter) sees every evaluation and may
    prune the run (see :class:`~agilerl.trainer.LocalTrainer`).
    """
    from agilerl.strategies import select_strategy
    from agilerl.trainer import LocalTrainer
    from agilerl.training import distributed_run

    if distributed_run.process_info().multi:
        spec = manifest.algorithm_with_network()
        strategy = select_strategy(spec)
        label = f"{spec.name} ({strategy.paradigm or 'this paradigm'})"
        distributed_run.check_supported(label, strategy.multi_process)
        distributed_run.join(options.device)
    run_dir = Path(options.resume) if options.resume is not None else resolve_run_dir(options)
    run_dir = Path(distributed_run.broadcast(str(run_dir)))
    with distributed_run.claim(run_dir):  # one process per run dir, held from the first check on

        def decide() -> RunResult | bool:
            return True if options.resume is not None else previous_run(run_dir, manifest)

        previous = distributed_run.from_main(decide)
        if isinstance(previous, RunResult):
            if distributed_run.process_info().is_main:
                print(f"{run_dir}: this run already finished ({previous.status}); nothing to do")
            return previous
        trainer = LocalTrainer.from_manifest(
            manifest,
            seed=options.seed,
            device=options.device,
            run_dir=run_dir,
            resume=previous,
            logger=options.logger,
            torch_threads=options.torch_threads,
            flush_denormal=options.flush_denormal,
            trust_code=options.trust_code,
            accept_changed_inputs=options.accept_changed_inputs,
            on_evaluation=on_evaluation,
        )
        result = trainer.run()
    return RunResult(result.status, run_dir, result.best_fitness, result.wall_seconds)
