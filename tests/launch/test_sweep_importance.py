"""Parameter importance of an Optuna sweep in ``agilerl sweep summary``."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import yaml

from agilerl.arena.models.errors import ConfigError
from agilerl.launch import sweep_importance
from agilerl.launch.ledger import Ledger
from agilerl.launch.optuna_study import SWEEPER_TARGET, open_storage
from agilerl.launch.sweep_report import show_summary

optuna = pytest.importorskip("optuna")
optuna.logging.set_verbosity(optuna.logging.WARNING)
HAS_SKLEARN = importlib.util.find_spec("sklearn") is not None


@pytest.fixture
def optuna_sweep(tmp_path: Path) -> Path:
    """A finished Optuna sweep: 12 trials whose fitness depends on lr only (batch_size is
    noise-free but irrelevant), the ledger of their jobs and the sweep's multirun.yaml."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    hydra = {"sweeper": {"_target_": SWEEPER_TARGET, "study_name": "agilerl", "storage": None}}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    study = optuna.create_study(
        study_name="agilerl",
        storage=open_storage(None, sweep),
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    ledger = Ledger(sweep)
    for _ in range(12):
        trial = study.ask()
        lr = trial.suggest_float("algorithm.lr", 1e-5, 1e-1, log=True)
        batch = trial.suggest_categorical("algorithm.batch_size", [32, 64])
        fitness = 200.0 - 40.0 * abs(math.log10(lr) + 3.0)
        study.tell(trial, fitness)
        overrides = [f"++algorithm.lr={lr}", f"++algorithm.batch_size={batch}"]
        key = ",".join(sorted(overrides))
        ledger.append(key=key, overrides=overrides, state="completed", best_fitness=fitness)
    pruned = study.ask()
    pruned.suggest_float("algorithm.lr", 1e-5, 1e-1, log=True)
    pruned.suggest_categorical("algorithm.batch_size", [32, 64])
    pruned.report(-50.0, 512)
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    ledger.append(key="pruned", overrides=["++algorithm.lr=9e-2"], state="pruned", best_fitness=-50)
    return sweep


@pytest.mark.parametrize(
    "evaluator",
    [
        "ped_anova",
        pytest.param(
            "fanova", marks=pytest.mark.skipif(not HAS_SKLEARN, reason="needs scikit-learn")
        ),
    ],
)
def test_summary_ranks_the_parameter_that_matters_first(
    optuna_sweep: Path, evaluator: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show_summary(optuna_sweep, plot=False, importance=evaluator) == 0
    out = capsys.readouterr().out
    assert f"parameter importance ({evaluator}, 12 completed trials" in out
    assert "1 job(s) pruned before their budget ended (not ranked" in out
    written = json.loads((optuna_sweep / "param_importance.json").read_text())
    assert written["evaluator"] == evaluator and written["n_trials"] == 12
    ranked = list(written["importances"])
    assert ranked == ["algorithm.lr", "algorithm.batch_size"]
    assert written["importances"]["algorithm.lr"] > 0.5
    assert math.isclose(sum(written["importances"].values()), 1.0, abs_tol=1e-3)
    lr_line = next(line for line in out.splitlines() if line.strip().startswith("algorithm.lr"))
    assert "#" in lr_line


def test_auto_picks_fanova_only_with_scikit_learn(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sweep_importance.evaluator_name("auto") == ("fanova" if HAS_SKLEARN else "ped_anova")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        sweep_importance.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "sklearn" else real(name, *a),
    )
    assert sweep_importance.evaluator_name("auto") == "ped_anova"
    with pytest.raises(ConfigError, match="--importance fanova needs scikit-learn"):
        sweep_importance.evaluator_name("fanova")
    with pytest.raises(ConfigError, match="--importance shap: use one of auto, fanova"):
        sweep_importance.evaluator_name("shap")


def test_no_importance_for_other_sweeps_or_when_switched_off(
    optuna_sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show_summary(optuna_sweep, plot=False, importance="none") == 0
    assert "parameter importance" not in capsys.readouterr().out
    assert not (optuna_sweep / "param_importance.json").exists()
    grid = tmp_path / "grid"  # a basic (grid) sweep: no study to ask
    Ledger(grid).append(key="seed=0", overrides=["seed=0"], state="completed", best_fitness=1.0)
    (grid / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": {"_target_": "x"}}}))
    assert sweep_importance.param_importance(grid) is None


def test_too_few_completed_trials_say_so(tmp_path: Path) -> None:
    sweep = tmp_path / "one"
    sweep.mkdir()
    hydra = {"sweeper": {"_target_": SWEEPER_TARGET, "study_name": "agilerl", "storage": None}}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    study = optuna.create_study(study_name="agilerl", storage=open_storage(None, sweep))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    result = sweep_importance.param_importance(sweep, "ped_anova")
    assert result is not None and result["importances"] == {}
    (line,) = sweep_importance.importance_lines(result)
    assert "1 completed trials" in line and "needs 2 completed trials or more" in line
