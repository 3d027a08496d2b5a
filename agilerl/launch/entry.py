"""What ``train.py`` runs: argv checks before Hydra, then the task function."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

from agilerl.arena.models.errors import (
    EXIT_RUN_FAILED,
    EXIT_USER_ERROR,
    ConfigError,
    RunFailure,
)
from agilerl.extras import missing_extra_error
from agilerl.launch import register_resolvers

register_resolvers()

EXIT_INTERRUPTED = 130
_QUIET_HYDRA = (
    "hydra.output_subdir=null",
    "hydra/job_logging=disabled",
    "hydra/hydra_logging=disabled",
    "hydra.run.dir=.",
)


def _interrupted() -> None:
    """Ctrl-C: the run has checkpointed and recorded ``interrupted``; exit 130, no traceback."""
    print(
        "interrupted (Ctrl-C): checkpoint written; continue with resume=<run dir>",
        file=sys.stderr,
    )
    sys.exit(EXIT_INTERRUPTED)


def fail(error: ConfigError) -> None:
    """Print a user error without a traceback and exit with code 2."""
    print(error.render(), file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


MAX_OVERRIDE_CHARS = 100_000
MAX_OVERRIDE_DEPTH = 32


def check_override_size(arg: str) -> None:
    """Refuse a command-line override too long or too deeply nested to parse safely.

    Raises:
        ConfigError: Naming the override's key.
    """
    key = arg.split("=", 1)[0][:80]
    control = next((c for c in arg if ord(c) < 32 and c not in "\t\n"), None)
    if control is not None:
        raise ConfigError(
            f"{key!r}: the override holds the control character {control!r}; remove it",
            "command line",
        )
    if len(arg) > MAX_OVERRIDE_CHARS:
        raise ConfigError(
            f"{key}: an override of {len(arg):,} characters is too long", "command line"
        )
    depth = deepest = 0
    for char in arg:
        if char in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]})":
            depth -= 1
    if deepest > MAX_OVERRIDE_DEPTH:
        raise ConfigError(
            f"{key}: a value nested {deepest} levels deep (at most {MAX_OVERRIDE_DEPTH})",
            "command line",
        )


def prepare_argv(conf_dir: Path) -> None:
    """Check and normalise ``sys.argv`` in place before Hydra parses it.

    A dry run writes nothing: Hydra's output directory and log files are
    switched off for it. SIGINT inherited as ignored (a script's background job)
    is listened to again: ``kill -INT`` stops a run with a checkpoint, and the jobs a
    local sweep starts can be cancelled (they inherit the disposition).
    """
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    from agilerl.launch.overrides import normalise_overrides
    from agilerl.logging.console import plain_warnings

    plain_warnings()

    try:
        for arg in sys.argv[1:]:
            check_override_size(arg)
        args = normalise_overrides(sys.argv[1:], conf_dir)
    except ConfigError as error:
        fail(error)
    dry_run = _value_of(args, "dry_run") in ("true", "True")
    sweep_dir = _value_of(args, "hydra.sweep.dir")
    try:
        if {"-m", "--multirun"} & set(args) and sweep_dir is not None:
            from agilerl.launch.ledger import check_sweep_dir, hold_sweep_dir

            check_sweep_dir(sweep_dir)
            if not dry_run:  # before Hydra writes multirun.yaml into it
                hold_sweep_dir(sweep_dir)
        quiet = dry_run or hydra_dir_unneeded(args, Path.cwd())
    except ConfigError as error:
        fail(error)
    if quiet:  # a dry run (or a pinned run dir in a read-only folder): Hydra writes nothing
        args += [a for a in _QUIET_HYDRA if a.split("=")[0] not in {x.split("=")[0] for x in args}]
    sys.argv[1:] = args


def _value_of(args: list[str], key: str) -> str | None:
    for arg in args:
        name, _, value = arg.lstrip("+").partition("=")
        if name == key:
            return value
    return None


def hydra_dir_unneeded(args: list[str], cwd: Path) -> bool:
    """Whether Hydra's output folder under a read-only ``cwd`` can be switched off.

    Hydra creates ``runs/...`` (``multirun/...`` for ``-m``) under the working
    directory before the task starts. Where that folder cannot be written, a run
    that names its own folder (``run_dir=``, ``resume=``) goes on without it; any
    other run is refused before Hydra fails with a traceback.

    Returns:
        True when Hydra's folder should be switched off (``cwd`` is read-only and
        the run is pinned elsewhere); False when ``cwd`` is writable.

    Raises:
        ConfigError: ``cwd`` is read-only and nothing says where the run goes.
    """
    if os.access(cwd, os.W_OK):
        return False
    sweep = bool({"-m", "--multirun"} & set(args))
    if sweep:
        if _value_of(args, "hydra.sweep.dir") is not None:
            return False
        raise ConfigError(
            f"the working directory {cwd} is not writable, and a sweep writes its jobs "
            "under multirun/ there; run from a writable folder or choose one with "
            "hydra.sweep.dir=/path/to/sweep"
        )
    if _value_of(args, "hydra.run.dir") is not None:
        return False
    if _value_of(args, "run_dir") not in (None, "null") or _value_of(args, "resume") not in (
        None,
        "null",
    ):
        return True
    raise ConfigError(
        f"the working directory {cwd} is not writable, and a run writes its folder "
        "under runs/ there; run from a writable folder or choose one with "
        "run_dir=/path/to/run"
    )


def _unused_hydra_dir() -> Path | None:
    """Hydra's default run dir of this single run (``None`` in a sweep or when pinned)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        return None
    if any(o.lstrip("+").startswith("hydra.run.dir=") for o in hydra_cfg.overrides.hydra):
        return None
    return Path(hydra_cfg.runtime.output_dir)


def run_task(cfg: Any) -> float | None:
    """Validate the composed config, then dry-run or train.

    Nothing is left behind when validation fails: Hydra's run directory is
    removed again if the run did not use it (a validation error, ``run_dir=``,
    ``resume=``).

    Returns:
        The best fitness of the run (what Hydra sweepers optimise), or ``None``
        for a dry run.
    """
    from agilerl.training.run_lock import remove_if_fresh

    hydra_dir = _unused_hydra_dir()
    try:
        return _run_task(cfg)
    finally:
        if hydra_dir is not None:
            remove_if_fresh(hydra_dir)


def _print_budget_note(manifest: Any) -> None:
    """Say when the budget far exceeds what the preset needed in ``benchmarks/``."""
    from hydra.core.hydra_config import HydraConfig

    from agilerl.launch.budget_note import budget_note
    from agilerl.strategies import select_strategy

    if not HydraConfig.initialized():
        return
    choices = dict(HydraConfig.get().runtime.choices)
    unit = select_strategy(manifest.algorithm_with_network()).step_unit[1]
    note = budget_note(manifest, choices, unit)
    if note:
        print(note, file=sys.stderr)


def optuna_trial(job: Any) -> Any:
    """The reporter of the Optuna trial this sweep job runs (``None`` in other sweeps)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    sweeper = HydraConfig.get().get("sweeper")
    if sweeper is None or sweeper.get("_target_") is None:
        return None
    from agilerl.launch.optuna_study import SWEEPER_TARGET, connect_trial

    if sweeper.get("_target_") != SWEEPER_TARGET:
        return None
    settings = OmegaConf.to_container(sweeper, resolve=True)
    return connect_trial(settings, job.ledger.dir, job.key)  # type: ignore[arg-type]


def _run_task(cfg: Any) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from agilerl.launch.compose import build_manifest
    from agilerl.launch.env_check import check_environment
    from agilerl.launch.job import SweepJob
    from agilerl.launch.preflight import preflight
    from agilerl.training.distributed_run import process_info

    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    job = SweepJob.current()
    if job is not None and not process_info().is_main:
        job = None  # several tasks train one run (srun); rank 0 records its states
    manifest = None
    try:
        manifest, options = build_manifest(cfg, overrides)
        fields = preflight(
            manifest,
            device=options.device,
            trust_code=options.trust_code or options.dry_run,
            source="command line",
        )
        if not fields or options.trust_code:  # making the env runs no untrusted code
            check_environment(manifest)
        if options.dry_run:
            import yaml

            from agilerl.training.run_lock import check_run_dir

            if options.run_dir:
                check_run_dir(options.run_dir)
            for field in fields:
                print(
                    f"note: {field.path}={field.value!r} runs code ({field.why}); "
                    "the run needs trust_code=true",
                    file=sys.stderr,
                )
            sys.stdout.write(yaml.safe_dump(manifest.to_dict(), sort_keys=False))
            return None
        from agilerl.launch.run import train_manifest

        if process_info().is_main:
            _print_budget_note(manifest)
        if job is None:
            try:
                return train_manifest(manifest, options).best_fitness
            except KeyboardInterrupt:
                _interrupted()
            except RunFailure as failure:
                print(f"error: {failure}", file=sys.stderr)
                sys.exit(EXIT_RUN_FAILED)
        job.record("running", pid=os.getpid(), host=socket.gethostname())
        try:
            reporter = optuna_trial(job) if not process_info().multi else None
            result = train_manifest(manifest, options, on_evaluation=reporter)
        except KeyboardInterrupt:
            job.record("interrupted")
            _interrupted()
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
    except ModuleNotFoundError as exc:  # an extra this run needs is not installed
        what = (
            f"{manifest.algorithm.name} on {manifest.environment.name}" if manifest else "this run"
        )
        error = missing_extra_error(exc, what)
        if error is None:
            raise
        if job is not None:
            job.record("failed", error=error.render().splitlines()[0][:300])
            raise error from None
        fail(error)
    except ConfigError as error:
        if job is not None:
            job.record("failed", error=error.render().splitlines()[0][:300])
            raise  # Hydra records the failed job; the sweep goes on
        fail(error)
    return None
