"""Live console display: steps, steps/s, ETA, latest and best fitness."""

from __future__ import annotations

import sys
import time

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from agilerl.logging.console import console


class TrainingProgress:
    """A rich progress bar on a terminal; one plain line per evaluation elsewhere."""

    def __init__(
        self,
        total_steps: int,
        label: str,
        *,
        enabled: bool = True,
        unit: tuple[str, str] = ("step", "steps"),
        fitness_name: str = "fitness",
    ) -> None:
        self.total = total_steps
        self.label = label
        self.unit, self.units = unit[0], unit[1].split()[-1]
        self.fitness_name = fitness_name
        self.enabled = enabled
        self.console = console(stderr=True)
        self.live = enabled and sys.stderr.isatty()
        self.start = time.perf_counter()
        self.latest: float | None = None
        self.best: float | None = None
        self.progress: Progress | None = None
        if self.live:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:>8} " + f"{self.units}/s"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn(fitness_name + " {task.fields[latest]} (best {task.fields[best]})"),
                console=self.console,
                transient=False,
            )
            self.task = self.progress.add_task(
                label, total=total_steps, rate="-", latest="-", best="-"
            )
            self.progress.start()

    def update(self, steps: int, steps_per_second: float) -> None:
        """Move the bar to ``steps``."""
        if self.progress is not None:
            self.progress.update(
                self.task, completed=min(steps, self.total), rate=f"{steps_per_second:,.0f}"
            )

    def evaluation(
        self,
        steps: int,
        fitness: list[float],
        steps_per_second: float,
        spread: list[tuple[float | None, int | None]] | None = None,
    ) -> None:
        """Report an evaluation of the population (``spread``: each agent's std and episodes)."""
        self.latest = max(fitness)
        self.best = self.latest if self.best is None else max(self.best, self.latest)
        if self.progress is not None:
            self.progress.update(self.task, latest=f"{self.latest:.1f}", best=f"{self.best:.1f}")
        elif self.enabled:
            shown = ", ".join(
                _with_spread(f, s)
                for f, s in zip(fitness, spread or [(None, None)] * len(fitness), strict=True)
            )
            self.console.print(
                f"{self.label}: {self.unit} {steps:,}/{self.total:,}  "
                f"{_rate(steps_per_second)} {self.units}/s{self._eta(steps, steps_per_second)}  "
                f"{self.fitness_name} [{shown}]  best {self.best:.1f}",
                highlight=False,
            )

    def _eta(self, steps: int, steps_per_second: float) -> str:
        """``  eta 1m05s`` to the budget at the current rate (nothing once it is spent)."""
        left = self.total - steps
        if left <= 0 or steps_per_second <= 0:
            return ""
        seconds = int(left / steps_per_second)
        minutes, seconds = divmod(seconds, 60)
        hours, minutes = divmod(minutes, 60)
        if hours:
            return f"  eta {hours}h{minutes:02d}m"
        return f"  eta {minutes}m{seconds:02d}s" if minutes else f"  eta {seconds}s"

    def notice(self, text: str) -> None:
        """A warning about the run the user should act on (one line, above the bar)."""
        if self.enabled:
            self.console.print(f"[yellow]warning:[/yellow] {text}", highlight=False)

    def population(self, generation: int, rows: list[dict]) -> None:
        """A small table of the new population after an evolution step."""
        if not self.enabled:
            return
        from rich.table import Table

        table = Table(title=f"generation {generation}", title_justify="left")
        hp_columns = [k for k in (rows[0] if rows else {}) if k.startswith("hp_")][:5]
        for column in (
            "member",
            "parent",
            "parent fitness",
            "mutation",
            *(c.removeprefix("hp_") for c in hp_columns),
        ):
            table.add_column(column)
        for row in rows:
            fitness = row.get("parent_fitness")
            table.add_row(
                str(row["index"]) + (" (elite)" if row.get("elite") else ""),
                str(row["parent"]),
                "-" if fitness is None else f"{fitness:.1f}",
                self._fit(str(row.get("detail") or row.get("mutation"))),
                *(
                    f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c])
                    for c in hp_columns
                ),
            )
        self.console.print(table)

    def _fit(self, text: str, width: int = 28) -> str:
        """A terminal table keeps to the screen; a log keeps every character."""
        if not self.console.is_terminal or len(text) <= width:
            return text
        return text[: width - 1] + "…"

    def close(self) -> None:
        """Stop the live display."""
        if self.progress is not None:
            self.progress.stop()


def _with_spread(fitness: float, spread: tuple[float | None, int | None]) -> str:
    std, episodes = spread
    if std is None or not episodes:
        return f"{fitness:.1f}"
    return f"{fitness:.1f} ± {std:.1f} ({episodes} ep)"


def _rate(per_second: float) -> str:
    """A rate as the progress lines show it: whole numbers, one decimal below 10."""
    return f"{per_second:,.1f}" if per_second < 10 else f"{per_second:,.0f}"
