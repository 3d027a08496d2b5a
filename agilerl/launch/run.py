"""From validated manifest and run options to a finished run (what train.py calls)."""

from __future__ import annotations

from pathlib import Path

from agilerl.arena.models.manifest import TrainingManifest
from agilerl.launch.options import RunOptions


def resolve_run_dir(options: RunOptions) -> Path:
    """The run directory: ``run_dir``, else Hydra's output dir, else ``runs/``."""
    if options.run_dir:
        return Path(options.run_dir)
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return Path(HydraConfig.get().runtime.output_dir)
    except ImportError:  # pragma: no cover - hydra is a core dependency
        pass
    return Path("runs/latest")


def train_manifest(manifest: TrainingManifest, options: RunOptions) -> float | None:
    """Train ``manifest`` and return the best fitness (for Hydra sweepers)."""
    from agilerl.trainer import LocalTrainer

    resume = options.resume is not None
    run_dir = Path(options.resume) if resume else resolve_run_dir(options)
    trainer = LocalTrainer.from_manifest(
        manifest,
        seed=options.seed,
        device=options.device,
        run_dir=run_dir,
        resume=resume,
        logger=options.logger,
        torch_threads=options.torch_threads,
    )
    _population, fitnesses = trainer.train()
    return max(fitnesses) if fitnesses else None
