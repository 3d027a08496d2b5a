"""``agilerl sweep status|summary|rerun``: follow, rank and finish a sweep from its ledger."""

from __future__ import annotations

import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.live import Live
from rich.table import Table

from agilerl.arena.models.errors import ConfigError
from agilerl.launch.ledger import FINAL_STATES, JobRecord, Ledger
from agilerl.logging.console import console as make_console
from agilerl.logging.stats import Summary, summarise

_STATE_STYLE = {
    "completed": "green",
    "target_reached": "green",
    "time_limit": "yellow",
    "running": "cyan",
    "pending": "dim",
    "interrupted": "yellow",
    "failed": "red",
}


def _ledger(sweep_dir: str | Path) -> Ledger:
    ledger = Ledger(sweep_dir)
    if not ledger.path.exists():
        raise ConfigError(f"{sweep_dir}: no {ledger.path.name} here; pass a multirun sweep dir")
    return ledger


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def status_table(jobs: list[JobRecord], title: str) -> Table:
    """The sweep's jobs and their states."""
    table = Table(title=title)
    for column in ("job", "state", "slurm id", "best fitness", "wall s", "overrides"):
        table.add_column(column, overflow="fold")
    for index, job in enumerate(jobs):
        style = _STATE_STYLE.get(job.state, "")
        table.add_row(
            str(job.num if job.num is not None else index),
            f"[{style}]{job.state}",
            job.job_id or "-",
            _fmt(job.best_fitness),
            _fmt(job.wall_seconds, ".1f"),
            " ".join(job.overrides),
        )
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.state] = counts.get(job.state, 0) + 1
    table.caption = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    return table


def show_status(sweep_dir: str | Path, watch: float | None = None) -> int:
    """Print the status table (refreshing every ``watch`` seconds until every job ends)."""
    ledger = _ledger(sweep_dir)
    console = make_console()
    if not watch:
        console.print(status_table(ledger.jobs(), str(sweep_dir)))
        return 0
    with Live(console=console, refresh_per_second=2) as live:
        while True:
            jobs = ledger.jobs()
            live.update(status_table(jobs, str(sweep_dir)))
            if jobs and all(j.state in (*FINAL_STATES, "failed") for j in jobs):
                return 0
            time.sleep(watch)


def _numeric(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def varying_parameters(jobs: list[JobRecord]) -> dict[str, list[str]]:
    """Override keys whose values differ between jobs -> each job's value."""
    table: dict[str, list[str]] = {}
    for job in jobs:
        for override in job.overrides:
            key, _, value = override.lstrip("+").partition("=")
            table.setdefault(key, [""] * len(jobs))
    for i, job in enumerate(jobs):
        for override in job.overrides:
            key, _, value = override.lstrip("+").partition("=")
            table[key][i] = value
    return {k: v for k, v in table.items() if len(set(v)) > 1}


def _is_seed(override: str) -> bool:
    return override.lstrip("+~").partition("=")[0] == "seed"


@dataclass
class Group:
    """Jobs that differ only in their seed, and the summary of their best fitness."""

    overrides: list[str]
    jobs: list[JobRecord]
    stats: Summary

    @property
    def label(self) -> str:
        return " ".join(self.overrides) or "(defaults)"


def group_by_seed(jobs: list[JobRecord]) -> list[Group]:
    """Jobs with a fitness grouped by their overrides without ``seed=``, best mean first."""
    groups: dict[tuple[str, ...], list[JobRecord]] = {}
    for job in jobs:
        if job.best_fitness is None or not math.isfinite(job.best_fitness):
            continue
        key = tuple(sorted(o for o in job.overrides if not _is_seed(o)))
        groups.setdefault(key, []).append(job)
    out = [
        Group(list(key), members, summarise([j.best_fitness for j in members]))
        for key, members in groups.items()
    ]
    return sorted(out, key=lambda g: g.stats.mean, reverse=True)


def show_summary(sweep_dir: str | Path, plot: bool = True) -> int:
    """Aggregate finished jobs over seeds (mean, std, 95% CI, n), rank the settings, plot."""
    jobs = _ledger(sweep_dir).jobs()
    groups = group_by_seed(jobs)
    console = make_console()
    table = Table(title=f"{sweep_dir}: best fitness over seeds, settings ranked by mean")
    for column in ("rank", "mean", "std", "95% CI", "n", "seeds", "wall s", "overrides"):
        table.add_column(column)
    for rank, group in enumerate(groups, 1):
        stats = group.stats
        ci = f"[{stats.ci_low:.2f}, {stats.ci_high:.2f}]" if stats.n > 1 else "-"
        seeds = ",".join(
            next((o.partition("=")[2] for o in j.overrides if _is_seed(o)), "-") for j in group.jobs
        )
        walls = [j.wall_seconds for j in group.jobs if j.wall_seconds is not None]
        table.add_row(
            str(rank),
            f"{stats.mean:.2f}",
            f"{stats.std:.2f}",
            ci,
            str(stats.n),
            seeds,
            _fmt(sum(walls) / len(walls) if walls else None, ".1f"),
            group.label,
        )
    console.print(table)
    unfinished = [j for j in jobs if not j.finished]
    if unfinished:
        console.print(f"{len(unfinished)} job(s) not finished: agilerl sweep rerun {sweep_dir}")
    if not groups:
        console.print("no job has reported a fitness yet")
        return 0
    best = groups[0]
    console.print(f"best: {best.stats.render()} with {best.label}")
    if all(g.stats.n == 1 for g in groups):
        console.print("one seed per setting: add seed=0,1,2 to the sweep for a confidence interval")
    if plot:
        path = plot_summary(groups, Path(sweep_dir) / "sweep_summary.png")
        if path:
            console.print(f"plot: {path}")
    return 0


def plot_summary(groups: list[Group], path: Path) -> Path | None:
    """Each setting's seeds (points) with mean and 95% CI, then one panel per varying parameter."""
    jobs = [j for g in groups for j in g.jobs]
    if not jobs:
        return None
    params = {k: v for k, v in varying_parameters(jobs).items() if k != "seed"}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 1 + len(params)
    fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 3.8), squeeze=False)
    ax = axes[0][0]
    for x, group in enumerate(groups):
        ax.scatter([x] * len(group.jobs), [j.best_fitness for j in group.jobs], s=14, alpha=0.5)
        half = group.stats.half_width if group.stats.n > 1 else 0.0
        ax.errorbar(x, group.stats.mean, yerr=half, fmt="o", color="black", capsize=4)
    ax.set_xticks(range(len(groups)), [f"#{i + 1}" for i in range(len(groups))])
    ax.set_xlabel("setting (rank in the summary table)")
    ax.set_ylabel("best fitness (mean, 95% CI)")
    ax.grid(alpha=0.3)
    fitness = [j.best_fitness for j in jobs]
    for ax, (name, values) in zip(axes[0][1:], params.items(), strict=True):
        numbers = [_numeric(v) for v in values]
        if all(n is not None for n in numbers):
            ax.scatter(numbers, fitness)
            if min(numbers) > 0 and max(numbers) / min(numbers) > 50:
                ax.set_xscale("log")
        else:
            labels = sorted(set(values))
            ax.scatter([labels.index(v) for v in values], fitness)
            ax.set_xticks(range(len(labels)), labels, rotation=30)
        ax.set_xlabel(name)
        ax.set_ylabel("best fitness")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def rerun_command(sweep_dir: str | Path) -> list[str]:
    """The command that runs the sweep again; finished jobs are skipped, the rest resume."""
    from omegaconf import OmegaConf

    root = Path(sweep_dir)
    config_file = root / "multirun.yaml"
    if not config_file.exists():
        raise ConfigError(f"{sweep_dir}: no multirun.yaml; pass a multirun sweep dir")
    config: Any = OmegaConf.load(config_file)
    hydra_cfg = config.hydra
    sources = [
        s for s in hydra_cfg.runtime.config_sources if s.schema == "file" and s.provider == "main"
    ]
    conf_dir = Path(sources[0].path) if sources else Path(hydra_cfg.runtime.cwd) / "conf"
    script = conf_dir.parent / "train.py"
    hydra_overrides = [
        o
        for o in hydra_cfg.overrides.hydra
        if not o.startswith(("hydra.sweep.dir=", "hydra.mode="))
    ]
    return [
        sys.executable,
        str(script),
        "-m",
        f"hydra.sweep.dir={root.resolve()}",
        *hydra_overrides,
        *hydra_cfg.overrides.task,
    ]


def rerun(sweep_dir: str | Path, execute: bool = True) -> int:
    """Run the unfinished jobs of a sweep again (they resume from their checkpoints).

    Jobs still running (a live process on this host, or a pending/running
    scheduler job) are left alone; the launcher skips them too.
    """
    import subprocess

    jobs = _ledger(sweep_dir).jobs()
    running = [j for j in jobs if j.still_running()]
    unfinished = [j for j in jobs if not j.finished and not j.still_running()]
    command = rerun_command(sweep_dir)
    for job in running:
        print(f"  skipped, still {job.state}: {' '.join(job.overrides)}")
    print(f"{len(unfinished)} of {len(jobs)} job(s) to run again:")
    for job in unfinished:
        print(f"  [{job.state}] {' '.join(job.overrides)}")
    print(shlex.join(command))
    if not execute or not unfinished:
        return 0
    return subprocess.run(command, cwd=Path(command[1]).parent, check=False).returncode
