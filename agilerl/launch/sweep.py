"""Sweep checks before submission: every job's manifest validated, a dry-run plan."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agilerl.arena.models.errors import ConfigError, Problem
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.launch.compose import build_manifest
from agilerl.launch.options import RunOptions
from agilerl.launch.preflight import preflight


@dataclass
class PlannedJob:
    """One job of a sweep, validated."""

    overrides: list[str]
    manifest: TrainingManifest
    options: RunOptions

    @property
    def env_steps(self) -> int:
        """Env steps the job may take: pop_size x max_steps."""
        training = self.manifest.training
        return training.pop_size * training.max_steps


def plan_sweep(
    hydra_context: Any,
    config: Any,
    job_overrides: Sequence[Sequence[str]],
    *,
    local_devices: bool = True,
) -> list[PlannedJob]:
    """Compose and validate every job of a sweep before any is queued.

    Args:
        hydra_context: Hydra's context of the launcher.
        config: The sweep's config.
        job_overrides: Each job's overrides.
        local_devices: The jobs run on this machine, so their devices are checked
            here (a scheduler's jobs check theirs on the node they get).

    Raises:
        ConfigError: Naming each bad job by its overrides, with its problems.
    """
    planned: list[PlannedJob] = []
    problems: list[Problem] = []
    for overrides in job_overrides:
        overrides = list(overrides)
        try:
            sweep_config = hydra_context.config_loader.load_sweep_config(config, overrides)
            task_overrides = list(sweep_config.hydra.overrides.task)
            manifest, options = build_manifest(sweep_config, task_overrides)
            preflight(
                manifest,
                device=options.device,
                trust_code=options.trust_code or options.dry_run,
                check_devices=local_devices,
            )
        except ConfigError as error:
            label = " ".join(overrides) or "(no overrides)"
            for problem in error.problems:
                problems.append(
                    Problem(f"job [{label}]: {problem.path}".rstrip(": "), problem.message)
                )
            continue
        planned.append(PlannedJob(overrides, manifest, options))
    if problems:
        raise ConfigError(
            [*problems, Problem("", "no job was submitted; fix the sweep and run it again")]
        )
    return planned


def render_plan(jobs: list[PlannedJob]) -> str:
    """A table of jobs x pop_size x max_steps, with the total."""
    lines = [f"{'#':>3}  {'pop':>4}  {'max_steps':>10}  {'env steps':>11}  overrides"]
    for num, job in enumerate(jobs):
        training = job.manifest.training
        lines.append(
            f"{num:3d}  {training.pop_size:4d}  {training.max_steps:10,d}  "
            f"{job.env_steps:11,d}  {' '.join(job.overrides)}"
        )
    total = sum(job.env_steps for job in jobs)
    lines.append(f"{len(jobs)} jobs, {total:,d} env steps at most (jobs x pop_size x max_steps)")
    return "\n".join(lines)
