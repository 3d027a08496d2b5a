"""The learning-curve plot of a population: best/median/worst per evaluation, members faint."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agilerl.logging.run_dir import RunDirectory, learning_curves


def _rows(members: int, generations: int) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for g in range(generations):
        for m in range(members):
            rows.append(
                {
                    "step": (g + 1) * 1000,
                    "agent": g * members + m,  # new members every generation, as evolution makes
                    "fitness": float(rng.uniform(0, 100)) if m else float("nan"),
                    "eval_std": 3.0,
                }
            )
    return rows


def test_population_statistics_per_evaluation_step_ignore_nan() -> None:
    rows = _rows(members=4, generations=9)
    curves = learning_curves(rows)
    steps, best, median, worst = curves["population"]
    assert list(steps) == [1000.0 * (g + 1) for g in range(9)]
    for i, step in enumerate(steps):
        values = [r["fitness"] for r in rows if r["step"] == step and np.isfinite(r["fitness"])]
        assert best[i] == max(values) and worst[i] == min(values)
        assert median[i] == float(np.median(values))
    assert len(curves["members"]) == 36


def test_a_37_member_population_plots_and_a_single_agent_gets_a_std_band(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "pop")
    run.append_metrics(_rows(members=37, generations=3))
    path = run.plot_learning_curve("population", target=50.0)
    assert path is not None and path.stat().st_size > 10_000
    single = RunDirectory(tmp_path / "one")
    single.append_metrics(
        [{"step": s, "agent": 0, "fitness": s / 10, "eval_std": 2.0} for s in (1, 2)]
    )
    reread = RunDirectory(tmp_path / "one")  # strings from the CSV plot the same
    assert reread.plot_learning_curve("one") is not None


def test_the_plot_is_labelled_with_the_run_units_and_settings(tmp_path: Path) -> None:
    """Issue 33: a curve read at a glance says what its axes count and how it was made."""
    import matplotlib.pyplot as plt

    from agilerl.logging.run_dir import learning_curve_figure
    from agilerl.trainer import LocalTrainer

    trainer = LocalTrainer(
        {"name": "PPO", "lr": 3e-4}, {"name": "CartPole-v1", "num_envs": 4},
        {"target_score": 475}, seed=7, run_dir=tmp_path / "run", verbose=False,
    )  # fmt: skip
    labels = trainer._plot_labels()
    assert labels["x_label"] == "env steps" and labels["y_label"] == "evaluation return"
    assert labels["subtitle"] == "seed 7 · population 1 · lr 0.0003 · 10 eval episodes · 4 envs"
    rows = [{"step": s, "agent": 0, "fitness": s / 10, "eval_std": 2.0} for s in (1, 2)]
    fig = learning_curve_figure(rows, "PPO on CartPole-v1", target=475, **labels)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "env steps" and ax.get_ylabel() == "evaluation return"
    assert ax.get_title().splitlines() == ["PPO on CartPole-v1", labels["subtitle"]]
    assert "target 475" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)


def test_the_population_plot_shows_what_evolved_and_lists_what_did_not(tmp_path: Path) -> None:
    """Issue 33: ``population.png`` was a 3,960-px strip, 7 of its 11 panels constant."""
    import matplotlib.image

    run = RunDirectory(tmp_path / "run")
    fixed = {f"hp_fixed_{i}": 0.5 for i in range(7)}
    run.append_lineage(
        [
            {
                "generation": g,
                "step": g * 100,
                "index": m,
                "parent": m,
                "elite": m == 0,
                "parent_fitness": float(g + m),
                "mutation": "rl",
                "detail": "",
                **{f"hp_moved_{i}": float(g * m + i) for i in range(4)},
                **fixed,
            }
            for g in range(3)
            for m in range(4)
        ]
    )
    path = run.plot_population()
    assert path is not None
    height, width, _ = matplotlib.image.imread(path).shape
    # parent fitness and the four that moved: two rows of three panels, 4 inches each
    assert width == 3 * 4 * 90 and height < width
