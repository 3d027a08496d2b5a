"""The run directory: the contract between a run and its readers.

| file | what |
|---|---|
| ``manifest.yaml`` | the validated manifest that ran |
| ``summary.json`` | totals, best/final fitness, status, checkpoint path |
| ``metrics.csv`` | one row per evaluation per agent |
| ``tb/`` | TensorBoard events of the same metrics |
| ``checkpoints/`` | ``latest`` and numbered checkpoints |
| ``plots/`` | learning curve PNG written at the end |
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import yaml

from agilerl.logging.files import atomic_write_json, atomic_write_text

SUMMARY_STATUSES = ("running", "completed", "target_reached", "time_limit", "interrupted", "failed")


class RunDirectory:
    """Paths and writers of one run directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.metrics_rows: list[dict[str, Any]] = self._read_metrics()

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

    def _read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_file.exists():
            return []
        with self.metrics_file.open(newline="") as handle:
            return [dict(row) for row in csv.DictReader(handle)]

    def truncate_metrics(self, max_step: int) -> None:
        """Drop rows logged after ``max_step`` (from a run killed after its last checkpoint)."""
        self.metrics_rows = [r for r in self.metrics_rows if int(float(r["step"])) <= max_step]
        self._write_metrics()

    def append_metrics(self, rows: list[dict[str, Any]]) -> None:
        """Append evaluation rows; the CSV is rewritten atomically with the union of columns."""
        self.metrics_rows.extend(rows)
        self._write_metrics()

    def _write_metrics(self) -> None:
        columns: list[str] = []
        for row in self.metrics_rows:
            columns += [k for k in row if k not in columns]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(self.metrics_rows)
        atomic_write_text(self.metrics_file, out.getvalue())

    def plot_learning_curve(self, title: str, target: float | None = None) -> Path | None:
        """Draw fitness against env steps, one line per agent, into ``plots/``."""
        if not self.metrics_rows:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        agents = sorted({r["agent"] for r in self.metrics_rows}, key=lambda a: int(a))
        for agent in agents:
            rows = [r for r in self.metrics_rows if r["agent"] == agent]
            steps = [float(r["step"]) for r in rows]
            fitness = [float(r["fitness"]) for r in rows]
            ax.plot(steps, fitness, marker=".", label=f"agent {agent}")
        if target is not None:
            ax.axhline(target, color="grey", linestyle="--", label="target")
        ax.set_xlabel("env steps")
        ax.set_ylabel("evaluation return")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if len(agents) > 1 or target is not None:
            ax.legend()
        self.plots_dir.mkdir(exist_ok=True)
        path = self.plots_dir / "learning_curve.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path
