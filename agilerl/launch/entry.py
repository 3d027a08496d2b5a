"""What ``train.py`` runs: argv checks before Hydra, then the task function."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agilerl.arena.models.errors import EXIT_USER_ERROR, ConfigError

_QUIET_HYDRA = (
    "hydra.output_subdir=null",
    "hydra/job_logging=disabled",
    "hydra/hydra_logging=disabled",
    "hydra.run.dir=.",
)


def fail(error: ConfigError) -> None:
    """Print a user error without a traceback and exit with code 2."""
    print(error.render(), file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


def prepare_argv(conf_dir: Path) -> None:
    """Check and normalise ``sys.argv`` in place before Hydra parses it.

    A dry run writes nothing: Hydra's output directory and log files are
    switched off for it.
    """
    from agilerl.launch.overrides import normalise_overrides

    try:
        args = normalise_overrides(sys.argv[1:], conf_dir)
    except ConfigError as error:
        fail(error)
    if any(a.replace("+", "") in ("dry_run=true", "dry_run=True") for a in args):
        args += [a for a in _QUIET_HYDRA if a.split("=")[0] not in {x.split("=")[0] for x in args}]
    sys.argv[1:] = args


def run_task(cfg: Any) -> float | None:
    """Validate the composed config, then dry-run or train.

    Returns:
        The best fitness of the run (what Hydra sweepers optimise), or ``None``
        for a dry run.
    """
    from hydra.core.hydra_config import HydraConfig

    from agilerl.launch.compose import build_manifest
    from agilerl.launch.env_check import check_environment
    from agilerl.launch.job import SweepJob

    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    job = SweepJob.current()
    try:
        manifest, options = build_manifest(cfg, overrides)
        check_environment(manifest)
        if options.dry_run:
            import yaml

            sys.stdout.write(yaml.safe_dump(manifest.to_dict(), sort_keys=False))
            return None
        from agilerl.launch.run import train_manifest

        if job is None:
            return train_manifest(manifest, options).best_fitness
        job.record("running")
        try:
            result = train_manifest(manifest, options)
        except SystemExit:  # a stop signal: checkpointed, the scheduler requeues or cancels
            job.record("interrupted")
            raise
        except BaseException as exc:
            job.record("failed", error=str(exc).splitlines()[0][:300] if str(exc) else repr(exc))
            raise
        job.record(
            result.status,
            run_dir=str(result.run_dir),
            best_fitness=result.best_fitness,
            wall_seconds=result.wall_seconds,
        )
        return result.best_fitness
    except ConfigError as error:
        if job is not None:
            job.record("failed", error=error.render().splitlines()[0][:300])
            raise  # Hydra records the failed job; the sweep goes on
        fail(error)
    return None
