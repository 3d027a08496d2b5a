"""Launchers that validate every job's manifest before any job starts or is queued.

``hydra/launcher=sequential`` runs jobs one after another in this process,
``hydra/launcher=local`` through submitit's local executor (subprocesses), and
``hydra/launcher=slurm_cpu`` / ``slurm_gpu`` on a SLURM cluster. All of them:

- refuse the whole sweep if one job's manifest is invalid (exit 2, naming the
  job's overrides), before anything is queued;
- with ``dry_run=true``, print jobs x pop_size x max_steps and queue nothing;
- keep the ledger (``ledger.jsonl`` at the sweep root);
- skip jobs the ledger already shows finished, so running the same sweep
  command again only reruns the jobs that failed or never finished.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from agilerl.arena.models.errors import EXIT_USER_ERROR, ConfigError
from agilerl.extras import install_hint, require
from agilerl.launch.ledger import Ledger, hold_sweep_dir, job_key
from agilerl.launch.slurm_check import check_partition, sbatch_refusal
from agilerl.launch.sweep import plan_sweep, render_plan


def _prepare(launcher: Any, job_overrides: Sequence[Sequence[str]]) -> tuple[list, list, Ledger]:
    """Validate, handle dry runs and finished jobs; returns (to_run, done_returns, ledger)."""
    try:
        jobs = plan_sweep(
            launcher.hydra_context,
            launcher.config,
            job_overrides,
            local_devices=getattr(launcher, "_EXECUTOR", "local") != "slurm",
        )
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir))
    ledger = Ledger(sweep_dir)
    if jobs and all(job.options.dry_run for job in jobs):
        print(render_plan(jobs))
        return [], [_done(job.overrides, None) for job in jobs], ledger
    try:
        hold_sweep_dir(sweep_dir)
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    records = ledger.jobs()
    finished = {r.key: r for r in records if r.finished}
    running = {r.key for r in records if r.still_running()}
    to_run, done, skipped, still_running = [], [], [], 0
    for num, job in enumerate(jobs):
        key = job_key(job.overrides)
        if key in finished:
            record = finished[key]
            done.append(_done(job.overrides, record.best_fitness))
            skipped.append(f"[{record.state}, best {_fitness(record.best_fitness)}] {key}")
        elif key in running:  # another launch of this sweep runs it right now
            done.append(_done(job.overrides, None))
            skipped.append(f"[still running] {key}")
            still_running += 1
        else:
            to_run.append((num, job.overrides))
    if done:
        elsewhere = f", {still_running} still running" if still_running else ""
        say(
            f"{sweep_dir}: {len(done) - still_running} of {len(jobs)} job(s) already "
            f"finished there (ledger.jsonl){elsewhere}; skipping them, running {len(to_run)}"
        )
        for line in skipped:
            say(f"  skipped {line}")
        if not to_run:
            say(f"nothing to run; see agilerl sweep summary {sweep_dir}")
    return to_run, done, ledger


def say(text: str) -> None:
    """A launcher message: on stdout, flushed (jobs in other processes print too)."""
    print(text, flush=True)


def _fitness(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _done(overrides: list[str], value: Any) -> JobReturn:
    ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
    ret._return_value = value
    return ret


try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import (
        BaseSubmititLauncher,
    )
except ImportError as _exc:  # without the slurm extra (Hydra imports this module on every run)
    _SUBMITIT_ERROR = str(_exc)

    class BaseSubmititLauncher:  # type: ignore[no-redef]
        """Stands in for submitit's launcher base: refuses to start, naming the extra."""

        def __init__(self, **_params: Any) -> None:
            module = "hydra_plugins.hydra_submitit_launcher"
            require(module, "a submitit launcher", "hydra/launcher")
            raise ConfigError(
                f"hydra/launcher: {module} is installed but fails to import: "
                f"{_SUBMITIT_ERROR}; reinstall it: {install_hint('slurm')}"
            )


class ValidatingBasicLauncher(BasicLauncher):
    """Hydra's in-process launcher, with sweep validation and the ledger."""

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        to_run, done, ledger = _prepare(self, job_overrides)
        for _num, overrides in to_run:
            ledger.append(key=job_key(overrides), overrides=overrides, state="pending")
        ran = super().launch([o for _, o in to_run], initial_job_idx) if to_run else []
        _exit_on_user_errors(ran)
        return [*done, *ran]


def _exit_on_user_errors(returns: Sequence[JobReturn]) -> None:
    """Jobs that failed only on user errors end the sweep with their messages and exit 2.

    Hydra would re-raise the first failure with a traceback once the jobs have run;
    a failure that is not a user error is still left to it.
    """
    failed = [r for r in returns if r.status == JobStatus.FAILED]
    if not failed or not all(isinstance(r._return_value, ConfigError) for r in failed):
        return
    for ret in failed:
        print(f"job {' '.join(ret.overrides)} failed:", file=sys.stderr)
        print(ret._return_value.render(), file=sys.stderr)
    print(f"{len(failed)} of {len(returns)} job(s) failed; see the ledger", file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


class _ValidatingSubmitit(BaseSubmititLauncher):
    """Submitit launchers that wait for every job and report failures without aborting."""

    _CANCEL_ON_STOP = False

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        import submitit

        to_run, done, ledger = _prepare(self, job_overrides)
        if not to_run:
            return done
        params = dict(self.params)
        init = {"folder": params.pop("submitit_folder")}
        if "max_num_timeout" in params:
            init[f"{self._EXECUTOR}_max_num_timeout"] = params.pop("max_num_timeout")
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        shared = set(OmegaConf.structured(_base_queue_conf()).keys())
        executor.update_parameters(
            **{k if k in shared else f"{self._EXECUTOR}_{k}": v for k, v in params.items()}
        )
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        from hydra.core.singleton import Singleton

        args = [
            (
                list(overrides),
                "hydra.sweep.dir",
                initial_job_idx + n,
                f"job_id_for_{n}",
                Singleton.get_state(),
            )
            for n, (_num, overrides) in enumerate(to_run)
        ]
        partition = params.get("partition")
        try:
            if self._EXECUTOR == "slurm":
                check_partition(partition)
            jobs = executor.map_array(self, *zip(*args, strict=True))
        except ConfigError as error:
            print(error.render(), file=sys.stderr)
            sys.exit(EXIT_USER_ERROR)
        except Exception as exc:  # submitit re-raises sbatch's refusal with its output
            error = sbatch_refusal(exc, partition)
            if error is None:
                raise
            print(error.render(), file=sys.stderr)
            sys.exit(EXIT_USER_ERROR)
        for job, (_num, overrides) in zip(jobs, to_run, strict=True):
            ledger.append(
                key=job_key(overrides), overrides=overrides, state="pending", job_id=str(job.job_id)
            )
        say(
            f"submitted {len(jobs)} job(s) to {self._EXECUTOR} "
            f"({', '.join(str(j.job_id) for j in jobs)}); logs in {init['folder']}"
        )
        previous = _cancel_on_stop(jobs) if self._CANCEL_ON_STOP else {}
        wait_with_progress(jobs, [o for _, o in to_run], ledger)
        returns = list(done)
        for job, (_num, overrides) in zip(jobs, to_run, strict=True):
            try:
                returns.append(job.results()[0])
            except Exception as exc:  # the job died, was cancelled, or raised
                ledger.append(
                    key=job_key(overrides),
                    overrides=overrides,
                    state="failed",
                    job_id=str(job.job_id),
                    error=str(exc).splitlines()[0][:300],
                )
                failed = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
                failed._return_value = exc
                returns.append(failed)
        import signal

        for sig, handler in previous.items():
            signal.signal(sig, handler)
        return returns


def wait_with_progress(
    jobs: list[Any], overrides: list[list[str]], ledger: Ledger, poll_s: float = 2.0
) -> None:
    """Wait for submitit jobs, printing one line whenever a job starts or ends.

    The states come from the ledger (each job records ``running`` and its end
    state) and from submitit (a job that died without writing its end).
    """
    keys = [job_key(o) for o in overrides]
    common = set.intersection(*(set(o) for o in overrides)) if overrides else set()
    labels = [" ".join(x for x in o if x not in common) or " ".join(o) for o in overrides]
    shown: dict[str, str] = {}
    while True:
        records = {r.key: r for r in ledger.jobs(reconcile=False)}
        ended = [job.done() for job in jobs]
        finished = sum(ended)
        for num, (job, key, over) in enumerate(zip(jobs, keys, ended, strict=True)):
            label = labels[num]
            record = records.get(key)
            state = record.state if record is not None else "pending"
            if over and state in ("pending", "running"):
                state = f"ended ({str(job.state).lower()})"
            elif not over and state != "pending":
                state = "running"  # its end is printed once the process has exited
            if state == "pending" or shown.get(key) == state:
                continue
            shown[key] = state
            detail = ""
            if over and record is not None:
                if record.best_fitness is not None:
                    detail += f", best {record.best_fitness:.2f}"
                if record.wall_seconds is not None:
                    detail += f", {record.wall_seconds:.1f} s"
            counter = f"  ({finished}/{len(jobs)} done)" if over else ""
            say(f"job {num} [{label}] ({job.job_id}): {state}{detail}{counter}")
        if finished == len(jobs):
            return
        time.sleep(poll_s)


def _cancel_on_stop(jobs: list[Any]) -> dict[int, Any]:
    """SIGTERM/SIGINT to the launcher stops the whole local sweep, not just the launcher.

    Every job is cancelled (submitit sends it SIGINT: it checkpoints and records
    ``interrupted``), then the launcher exits with ``128 + signum``.

    Returns:
        The handlers replaced, to restore once every job has ended.
    """
    import contextlib
    import signal

    def stop(signum: int, _frame: Any) -> None:
        for job in jobs:
            with contextlib.suppress(Exception):  # a job that already ended
                job.cancel(check=False)
        name = signal.Signals(signum).name
        print(f"stopping the sweep ({name}): every job cancelled", file=sys.stderr)
        raise SystemExit(128 + signum)

    return {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}


def _base_queue_conf() -> Any:
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    return BaseQueueConf


class ValidatingLocalLauncher(_ValidatingSubmitit):
    """submitit's local executor: each job in its own subprocess."""

    _EXECUTOR = "local"
    _CANCEL_ON_STOP = True


class ValidatingSlurmLauncher(_ValidatingSubmitit):
    """A SLURM cluster through submitit; requeued jobs resume from their checkpoints."""

    _EXECUTOR = "slurm"
