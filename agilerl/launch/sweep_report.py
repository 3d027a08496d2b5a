"""``agilerl sweep status|summary|rerun``: follow, rank and finish a sweep from its ledger."""

from __future__ import annotations

import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.live import Live
from rich.table import Table

from agilerl.arena.models.errors import ConfigError
from agilerl.launch.ledger import FINAL_STATES, JobRecord, Ledger
from agilerl.logging.console import console as make_console
from agilerl.logging.rl_stats import (
    Interval,
    aggregate,
    bootstrap_interval,
    iqm,
    performance_profile,
    probability_of_improvement,
)
from agilerl.logging.stats import Summary, summarise

_STATE_STYLE = {
    "completed": "green",
    "target_reached": "green",
    "time_limit": "yellow",
    "pruned": "magenta",
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
class RunScores:
    """What one finished job scored (from its ledger record and run directory)."""

    job: JobRecord
    best: float
    final: float | None = None
    solved_at: int | None = None
    curve: list[tuple[int, float]] | None = None


@dataclass
class Group:
    """Jobs that differ only in their seed, with the statistics of their scores.

    ``final`` is the IQM (95% stratified bootstrap interval) of each run's final
    evaluation; without final scores (no run directories) the best evaluation
    stands in, and ``score_kind`` says which.
    """

    overrides: list[str]
    runs: list[RunScores]
    stats: Summary
    score_kind: str = "final"
    aggregates: dict[str, Interval] | None = None

    @property
    def jobs(self) -> list[JobRecord]:
        return [r.job for r in self.runs]

    @property
    def label(self) -> str:
        return " ".join(self.overrides) or "(defaults)"

    def scores(self) -> list[float]:
        """Each run's score of ``score_kind`` (final, or best when no final is known)."""
        if self.score_kind == "final":
            return [float(r.final) for r in self.runs if r.final is not None]
        return [r.best for r in self.runs]


def _run_dir(job: JobRecord, sweep_dir: Path | None) -> Path | None:
    if not job.run_dir:
        return None
    path = Path(job.run_dir)
    if not path.is_absolute() and sweep_dir is not None:
        path = sweep_dir / path
    return path if path.is_dir() else None


def _curve(path: Path) -> list[tuple[int, float]] | None:
    """The population's best fitness at each evaluation step of ``metrics.csv``."""
    import csv

    try:
        with (path / "metrics.csv").open() as handle:
            rows = list(csv.DictReader(handle))
    except OSError:
        return None
    best: dict[int, float] = {}
    for row in rows:
        step, fitness = _numeric(row.get("step", "")), _numeric(row.get("fitness", ""))
        if step is None or fitness is None or not math.isfinite(fitness):
            continue
        best[int(step)] = max(best.get(int(step), -math.inf), fitness)
    return sorted(best.items()) or None


def run_scores(job: JobRecord, sweep_dir: Path | None = None) -> RunScores:
    """A finished job's best (ledger), final fitness, solve step and curve (run directory)."""
    import json

    scores = RunScores(job, float(job.best_fitness))  # type: ignore[arg-type]
    path = _run_dir(job, sweep_dir)
    if path is None:
        return scores
    try:
        summary = json.loads((path / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    final = summary.get("final_fitness")
    scores.final = float(final) if isinstance(final, int | float) else None
    scores.solved_at = summary.get("solved_at_step")
    scores.curve = _curve(path)
    return scores


def group_by_seed(jobs: list[JobRecord], sweep_dir: Path | None = None) -> list[Group]:
    """Jobs with a fitness grouped by their overrides without ``seed=``, best IQM first.

    Pruned jobs are left out: their fitness comes from a budget cut short.
    """
    groups: dict[tuple[str, ...], list[RunScores]] = {}
    for job in jobs:
        if job.best_fitness is None or not math.isfinite(job.best_fitness):
            continue
        if job.state == "pruned":
            continue
        key = tuple(sorted(o for o in job.overrides if not _is_seed(o)))
        groups.setdefault(key, []).append(run_scores(job, sweep_dir))
    out = []
    for key, runs in groups.items():
        kind = "final" if all(r.final is not None for r in runs) else "best"
        group = Group(list(key), runs, summarise([r.best for r in runs]), kind)
        group.aggregates = aggregate(group.scores())
        out.append(group)
    return sorted(out, key=lambda g: g.aggregates["iqm"].value, reverse=True)  # type: ignore[index]


def _solved(group: Group) -> str:
    steps = [r.solved_at for r in group.runs if r.solved_at is not None]
    if not steps:
        return f"0/{len(group.runs)}"
    interval = bootstrap_interval(steps, "iqm")
    return f"{len(steps)}/{len(group.runs)}: {interval.render(',.0f')}"


def show_summary(sweep_dir: str | Path, plot: bool = True, importance: str = "auto") -> int:
    """Aggregate finished jobs over seeds, rank the settings by IQM, compare, plot.

    Per setting: the runs' final evaluation (the best evaluation when no run
    directory says what the final one was, labelled so) as IQM, median and
    mean with 95% stratified bootstrap intervals (the method of ``rliable``),
    the IQM of the best evaluations, and the steps to ``training.target_score``
    (runs that reached it, with the IQM and its interval). Jobs pruned by an
    Optuna sweep's pruner are counted, not ranked. For an Optuna sweep, each
    searched parameter's importance (``importance``: an evaluator of
    :data:`~agilerl.launch.sweep_importance.EVALUATORS`) is printed and written
    to ``param_importance.json``.
    """
    from agilerl.launch.sweep_importance import evaluator_name

    if importance != "none":
        evaluator_name(importance)  # an unusable choice is refused before any output
    root = Path(sweep_dir)
    jobs = _ledger(sweep_dir).jobs()
    groups = group_by_seed(jobs, root)
    console = make_console()
    kind = "final" if groups and all(g.score_kind == "final" for g in groups) else "best"
    table = Table(
        title=f"{sweep_dir}: {kind} fitness over seeds (95% bootstrap CI), settings ranked by IQM"
    )
    for column in (
        "rank", "n", "seeds", f"IQM {kind}", "median", "mean", "best (IQM)",
        "steps to target", "wall s", "overrides",
    ):  # fmt: skip
        table.add_column(column)
    for rank, group in enumerate(groups, 1):
        agg = group.aggregates or {}
        seeds = ",".join(
            next((o.partition("=")[2] for o in j.overrides if _is_seed(o)), "-") for j in group.jobs
        )
        walls = [j.wall_seconds for j in group.jobs if j.wall_seconds is not None]
        table.add_row(
            str(rank),
            str(len(group.runs)),
            seeds,
            agg["iqm"].render(),
            agg["median"].render(),
            agg["mean"].render(),
            f"{iqm([r.best for r in group.runs]):.2f}",
            _solved(group),
            _fmt(sum(walls) / len(walls) if walls else None, ".1f"),
            group.label,
        )
    console.print(table)
    unfinished = [j for j in jobs if not j.finished]
    if unfinished:
        console.print(f"{len(unfinished)} job(s) not finished: agilerl sweep rerun {sweep_dir}")
    pruned = [j for j in jobs if j.state == "pruned"]
    if pruned:
        console.print(
            f"{len(pruned)} job(s) pruned before their budget ended (not ranked; "
            "agilerl sweep status lists them)"
        )
    _print_importance(root, importance, console)
    if not groups:
        console.print("no job has reported a fitness yet")
        return 0
    if kind == "best":
        console.print("(no run directory gave a final evaluation: the best evaluation is shown)")
    best = groups[0]
    top = best.aggregates["iqm"]  # type: ignore[index]
    console.print(f"best: IQM {kind} fitness {top.render()} (95% CI, n={top.n}) with {best.label}")
    for line in improvement_lines(groups, jobs):
        console.print(line)
    if all(len(g.runs) == 1 for g in groups):
        console.print("one seed per setting: add seed=0,1,2,3,4 to the sweep for intervals")
    if plot:
        for path in (
            plot_summary(groups, root / "sweep_summary.png"),
            plot_profile(groups, root / "sweep_profile.png"),
        ):
            if path:
                console.print(f"plot: {path}")
    return 0


def _print_importance(root: Path, choice: str, console: Any) -> None:
    """An Optuna sweep's parameter importance: printed, and ``param_importance.json``."""
    from agilerl.launch.sweep_importance import (
        importance_lines,
        param_importance,
        write_importance,
    )

    result = param_importance(root, choice)
    if result is None:
        return
    for line in importance_lines(result):
        console.print(line, highlight=False)
    if result["importances"]:
        console.print(f"importance: {write_importance(root, result)}")


def improvement_lines(groups: list[Group], jobs: list[JobRecord]) -> list[str]:
    """``P(A > B)`` of the best setting against each other one, when the sweep varies
    one parameter besides the seed."""
    params = [k for k in varying_parameters(jobs) if k != "seed"]
    if len(params) != 1 or len(groups) < 2:
        return []
    best = groups[0]
    lines = []
    for other in groups[1:]:
        chance = probability_of_improvement(best.scores(), other.scores())
        lines.append(
            f"P({best.label} > {other.label}) = {chance.render()} "
            "(probability of improvement, 95% CI)"
        )
    return lines


def _short(label: str, width: int = 28) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def plot_summary(groups: list[Group], path: Path) -> Path | None:
    """The IQM learning curve of each setting with its 95% band (when the run
    directories hold curves), and each setting's runs with the IQM and interval."""
    if not groups:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [g for g in groups if all(r.curve for r in g.runs)]
    panels = 2 if curves else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.2), squeeze=False)
    ax = axes[0][0]
    for x, group in enumerate(groups):
        agg = (group.aggregates or {})["iqm"]
        ax.scatter([x] * len(group.runs), group.scores(), s=14, alpha=0.5)
        if agg.n > 1:
            ax.errorbar(
                x, agg.value, yerr=[[agg.value - agg.low], [agg.high - agg.value]],
                fmt="o", color="black", capsize=4,
            )  # fmt: skip
        else:
            ax.plot(x, agg.value, "o", color="black")
    ax.set_xticks(range(len(groups)), [_short(g.label) for g in groups], rotation=20, ha="right")
    kind = groups[0].score_kind
    ax.set_ylabel(f"{kind} fitness (IQM, 95% bootstrap CI)")
    ax.set_title("settings ranked by IQM")
    ax.grid(alpha=0.3)
    if curves:
        ax = axes[0][1]
        for group in curves:
            steps, middle, low, high = iqm_curve(group)
            ax.plot(steps, middle, label=_short(group.label))
            ax.fill_between(steps, low, high, alpha=0.2)
        ax.set_xlabel("env steps")
        ax.set_ylabel("best fitness of the population (IQM over seeds)")
        ax.set_title("learning curves, 95% bootstrap band")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def iqm_curve(group: Group) -> tuple[list[int], list[float], list[float], list[float]]:
    """IQM over seeds at each evaluation step every run reached, with a 95% band."""
    curves = [dict(r.curve or []) for r in group.runs]
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    middle, low, high = [], [], []
    for step in steps:
        interval = bootstrap_interval([c[step] for c in curves], "iqm", reps=2_000)
        middle.append(interval.value)
        low.append(interval.low if interval.n > 1 else interval.value)
        high.append(interval.high if interval.n > 1 else interval.value)
    return steps, middle, low, high


def plot_profile(groups: list[Group], path: Path) -> Path | None:
    """Performance profiles: the share of each setting's runs scoring above each threshold."""
    scores = [s for g in groups for s in g.scores()]
    if not scores:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    taus = np.linspace(min(scores), max(scores), 101)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for group in groups:
        ax.step(taus, performance_profile(group.scores(), taus), where="post",
                label=_short(group.label))  # fmt: skip
    ax.set_xlabel(f"{groups[0].score_kind} fitness threshold τ")
    ax.set_ylabel("fraction of runs with fitness > τ")
    ax.set_title("performance profile")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
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
