"""The lines a run prints when it ends: how it ended, best/final fitness, wall time, where it is."""

from __future__ import annotations

from typing import Any


def _steps(value: Any) -> str:
    return f"{int(value):,}" if value is not None else "?"


def _fitness(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}"


def how_it_ended(
    summary: dict[str, Any],
    *,
    max_steps: int | None,
    target: float | None,
    unit: tuple[str, str] = ("step", "steps"),
) -> str:
    """One phrase for ``summary["status"]``: target reached at step N, budget done, ..."""
    status = summary.get("status")
    one, many = unit[0], unit[1].split()[-1]
    steps = _steps(summary.get("total_steps"))
    if status == "target_reached":
        solved = summary.get("solved_at_step", summary.get("total_steps"))
        return f"target {target:g} reached at {one} {_steps(solved)}"
    if status == "completed":
        per_agent = f" ({max_steps:,} {many} per agent)" if max_steps else ""
        missed = f"; target {target:g} not reached" if target is not None else ""
        return f"budget done at {one} {steps}{per_agent}{missed}"
    if status == "time_limit":
        return f"time limit (training.max_wall_seconds) reached at {one} {steps}"
    if status == "pruned":
        return f"pruned at {one} {steps}: its evaluations trailed the sweep's other trials"
    if status == "interrupted":
        return f"interrupted at {one} {steps}; checkpointed"
    return f"failed at {one} {steps}"


def render_run_end(
    summary: dict[str, Any],
    *,
    max_steps: int | None = None,
    target: float | None = None,
    unit: tuple[str, str] = ("step", "env steps"),
    fitness_name: str = "fitness",
) -> str:
    """The end-of-run report, from ``summary.json``'s fields.

    Args:
        summary: What the run wrote to ``summary.json``.
        max_steps: ``training.max_steps`` (per agent), for a run that used its budget.
        target: ``training.target_score``, if any.
        unit: What a step is in this paradigm (singular, plural).
        fitness_name: What the fitness measures in this paradigm.
    """
    status = summary.get("status", "failed")
    head = f"{summary.get('algorithm', '?')} on {summary.get('env', '?')}"
    ended = how_it_ended(summary, max_steps=max_steps, target=target, unit=unit)
    lines = [f"{head}: {status}: {ended}"]
    best, final = summary.get("best_fitness"), summary.get("final_fitness")
    spread = ""
    if summary.get("final_fitness_std") is not None and summary.get("eval_episodes"):
        n = summary["eval_episodes"]
        spread = f" ± {summary['final_fitness_std']:.2f} (std over {n} episode{'s' * (n != 1)})"
    lines.append(
        f"  best {fitness_name} {_fitness(best)}, final {fitness_name} {_fitness(final)}{spread}"
    )
    wall = summary.get("wall_seconds")
    rate = summary.get("steps_per_second")
    shown = f"{rate:,.1f}" if rate and rate < 10 else f"{rate or 0:,.0f}"
    lines.append(
        f"  wall time {wall:.1f} s" + (f", {shown} {unit[1]}/s" if rate else "")
        if wall is not None
        else "  wall time -"
    )
    run_dir = summary.get("run_dir")
    lines.append(f"  run dir {run_dir}")
    if status == "interrupted" and run_dir:
        lines.append(f"  continue with: python train.py resume={run_dir}")
    return "\n".join(lines)
