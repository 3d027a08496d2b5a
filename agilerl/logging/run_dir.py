"""The run directory: the contract between a run and its readers.

| file | what |
|---|---|
| ``manifest.yaml`` | the validated manifest that ran |
| ``summary.json`` | totals, best/final fitness, status, checkpoint path |
| ``metrics.csv`` | one row per evaluation per agent |
| ``tb/`` | TensorBoard events of the same metrics |
| ``checkpoints/`` | ``latest`` and numbered checkpoints |
| ``hpo.csv`` | evolutionary HPO lineage: members, parents, mutations, hyperparameters |
| ``plots/`` | learning curve (and population) PNGs written at the end |
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from agilerl.logging.files import atomic_write_json, atomic_write_text, disk_full_guard

SUMMARY_STATUSES = (
    "running",
    "completed",
    "target_reached",
    "time_limit",
    "interrupted",
    "failed",
    "pruned",
)


class CsvTable:
    """A CSV file kept in memory and rewritten atomically with the union of its columns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = []
        if path.exists():
            with path.open(newline="") as handle:
                self.rows = [dict(row) for row in csv.DictReader(handle)]

    def append(self, rows: list[dict[str, Any]]) -> None:
        self.rows.extend(rows)
        self._write()

    def truncate(self, max_step: int) -> None:
        if self.rows:
            self.rows = [r for r in self.rows if int(float(r["step"])) <= max_step]
            self._write()

    def keep(self, predicate: Callable[[dict[str, Any]], bool]) -> None:
        """Keep only the rows ``predicate`` accepts."""
        if self.rows:
            self.rows = [r for r in self.rows if predicate(r)]
            self._write()

    def _write(self) -> None:
        columns: list[str] = []
        for row in self.rows:
            columns += [k for k in row if k not in columns]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write_text(self.path, out.getvalue())


class RunDirectory:
    """Paths and writers of one run directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._metrics = CsvTable(self.metrics_file)
        self._lineage = CsvTable(self.lineage_file)

    @property
    def manifest_file(self) -> Path:
        return self.path / "manifest.yaml"

    @property
    def summary_file(self) -> Path:
        return self.path / "summary.json"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.csv"

    @property
    def tb_dir(self) -> Path:
        return self.path / "tb"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def plots_dir(self) -> Path:
        return self.path / "plots"

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Write the validated manifest that runs here."""
        atomic_write_text(self.manifest_file, yaml.safe_dump(manifest, sort_keys=False))

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write ``summary.json``."""
        atomic_write_json(self.summary_file, summary)

    @property
    def lineage_file(self) -> Path:
        return self.path / "hpo.csv"

    def truncate_metrics(self, max_step: int) -> None:
        """Drop rows logged after ``max_step`` (from a run killed after its last checkpoint)."""
        for table in (self._metrics, self._lineage):
            table.truncate(max_step)

    def append_metrics(self, rows: list[dict[str, Any]]) -> None:
        """Append evaluation rows to ``metrics.csv``."""
        self._metrics.append(rows)

    def append_lineage(self, rows: list[dict[str, Any]]) -> None:
        """Append one generation's members (parent, mutation, hyperparameters) to ``hpo.csv``."""
        self._lineage.append(rows)

    @property
    def metrics_rows(self) -> list[dict[str, Any]]:
        return self._metrics.rows

    @property
    def lineage_rows(self) -> list[dict[str, Any]]:
        return self._lineage.rows

    def plot_learning_curve(
        self,
        title: str,
        target: float | None = None,
        *,
        subtitle: str | None = None,
        x_label: str = "env steps (population total)",
        y_label: str = "evaluation return",
    ) -> Path | None:
        """The learning curve (see :func:`learning_curve_figure`) into
        ``plots/learning_curve.png``."""
        if not self.metrics_rows:
            return None
        import matplotlib.pyplot as plt

        fig = learning_curve_figure(
            self.metrics_rows, title, target=target, subtitle=subtitle, x_label=x_label,
            y_label=y_label,
        )  # fmt: skip
        with disk_full_guard(self.plots_dir):
            self.plots_dir.mkdir(exist_ok=True)
        path = self.plots_dir / "learning_curve.png"
        with disk_full_guard(path):
            fig.savefig(path, dpi=100)
        plt.close(fig)
        return path

    def plot_population(self) -> Path | None:
        """Parent fitness and every hyperparameter that evolved, by generation, into
        ``plots/population.png``.

        Hyperparameters no member ever changed get no panel; their values are listed
        under the title. Panels wrap three to a row.
        """
        rows = self.lineage_rows
        if not rows:
            return None
        import math

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        def number(value: Any) -> float:
            return float(value) if value not in ("", None) else float("nan")

        hp_columns = [k for k in rows[0] if k.startswith("hp_")]
        varying = [c for c in hp_columns if len({str(r.get(c)) for r in rows}) > 1]
        constant = [c for c in hp_columns if c not in varying]
        panels = 1 + len(varying)
        columns = min(panels, 3)
        lines = math.ceil(panels / columns)
        fig, axes = plt.subplots(
            lines, columns, figsize=(4 * columns, 3.2 * lines + 0.6), squeeze=False
        )
        flat = list(axes.ravel())
        generations = [int(r["generation"]) for r in rows]
        flat[0].scatter(generations, [number(r["parent_fitness"]) for r in rows], s=12)
        flat[0].set_title("parent fitness")
        for ax, column in zip(flat[1:], varying, strict=False):
            ax.scatter(generations, [number(r.get(column)) for r in rows], s=12)
            ax.set_title(column.removeprefix("hp_"))
        for ax in flat[:panels]:
            ax.set_xlabel("generation")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
        for ax in flat[panels:]:
            ax.set_visible(False)
        size = generations.count(generations[0])
        title = f"population of {size}, {len(set(generations))} evolutions"
        if constant:
            fixed = ", ".join(f"{c.removeprefix('hp_')}={rows[0][c]}" for c in constant)
            title += f"\nunchanged: {fixed}"
        fig.suptitle(title, fontsize=9)
        with disk_full_guard(self.plots_dir):
            self.plots_dir.mkdir(exist_ok=True)
        path = self.plots_dir / "population.png"
        fig.tight_layout()
        with disk_full_guard(path):
            fig.savefig(path, dpi=90)
        plt.close(fig)
        return path


def learning_curve_figure(
    rows: list[dict[str, Any]],
    title: str,
    *,
    target: float | None = None,
    subtitle: str | None = None,
    x_label: str = "env steps (population total)",
    y_label: str = "evaluation return",
) -> Any:
    """Fitness against steps, labelled with the run's units and settings.

    One agent: its fitness with a band of one evaluation std. A population:
    every member as a faint line (no legend entry each), the population's best
    and median per evaluation, and a band from its worst to its best; the legend
    sits outside the axes. ``subtitle`` (the settings that shape the curve: seed,
    population, learning rate, evaluation episodes) goes under the title.

    Returns:
        The matplotlib figure (the caller saves and closes it).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    curves = learning_curves(rows)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    if len(curves["members"]) == 1:
        ((steps, fitness, std),) = curves["members"].values()
        ax.plot(steps, fitness, marker=".", color="C0", label=y_label)
        if any(np.isfinite(std)):
            ax.fill_between(
                steps, fitness - std, fitness + std, color="C0", alpha=0.2, label="± 1 std"
            )
    else:
        for steps, fitness, _std in curves["members"].values():
            ax.plot(steps, fitness, color="grey", alpha=0.25, linewidth=0.8)
        steps, best, median, worst = curves["population"]
        ax.fill_between(steps, worst, best, color="C0", alpha=0.15, label="worst to best")
        ax.plot(steps, best, color="C0", linewidth=2, label="best")
        ax.plot(steps, median, color="C1", linewidth=1.5, label="median")
        ax.plot([], [], color="grey", alpha=0.4, label=f"members ({len(curves['members'])})")
    if target is not None:
        ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(f"{title}\n{subtitle}" if subtitle else title, fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def learning_curves(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-member curves and the population's best/median/worst per evaluation step.

    Returns:
        ``{"members": {agent: (steps, fitness, std)}, "population": (steps, best,
        median, worst)}`` as numpy arrays; non-finite fitness is left out of the
        population statistics.
    """
    import numpy as np

    def number(value: Any) -> float:
        try:
            return float(value)
        except (TypeError, ValueError):
            return float("nan")

    members: dict[str, Any] = {}
    for agent in sorted({str(r["agent"]) for r in rows}, key=lambda a: int(float(a))):
        mine = [r for r in rows if str(r["agent"]) == agent]
        members[agent] = (
            np.array([number(r["step"]) for r in mine]),
            np.array([number(r["fitness"]) for r in mine]),
            np.array([number(r.get("eval_std")) for r in mine]),
        )
    by_step: dict[float, list[float]] = {}
    for r in rows:
        value = number(r["fitness"])
        if np.isfinite(value):
            by_step.setdefault(number(r["step"]), []).append(value)
    steps = np.array(sorted(by_step))
    values = [np.array(by_step[s]) for s in steps]
    population = (
        steps,
        np.array([v.max() for v in values]),
        np.array([float(np.median(v)) for v in values]),
        np.array([v.min() for v in values]),
    )
    return {"members": members, "population": population}
