"""Parameter importance of an Optuna sweep, for ``agilerl sweep summary``.

How much of the spread in the completed trials' fitness each searched parameter
explains (Optuna's ``get_param_importances``, normalised to sum to one). The
evaluator is fANOVA (Optuna's default, a random forest from scikit-learn) when
scikit-learn is installed, else PED-ANOVA (Optuna's own, no other dependency);
``--importance`` picks one. Pruned trials are left out: their fitness comes
from a cut budget.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from agilerl.arena.models.errors import ConfigError
from agilerl.launch.optuna_study import SWEEPER_TARGET, open_storage

IMPORTANCE_FILE = "param_importance.json"
EVALUATORS = ("auto", "fanova", "ped_anova", "mean_decrease_impurity", "none")
"""``--importance`` choices; ``auto``: fanova with scikit-learn, else ped_anova."""
MIN_TRIALS = 2
"""Completed trials below which no importance is computed."""


def optuna_settings(sweep_dir: Path) -> dict[str, Any] | None:
    """The ``hydra.sweeper`` settings of a sweep run by our Optuna sweeper, else ``None``."""
    path = Path(sweep_dir) / "multirun.yaml"
    if not path.exists():
        return None
    import yaml

    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    sweeper = (config.get("hydra") or {}).get("sweeper") or {}
    return sweeper if sweeper.get("_target_") == SWEEPER_TARGET else None


def evaluator_name(choice: str) -> str:
    """The evaluator ``choice`` stands for (``auto`` resolved).

    Raises:
        ConfigError: For an unknown choice, or one whose package is missing.
    """
    if choice not in EVALUATORS:
        raise ConfigError(f"--importance {choice}: use one of {', '.join(EVALUATORS)}")
    has_sklearn = importlib.util.find_spec("sklearn") is not None
    if choice == "auto":
        return "fanova" if has_sklearn else "ped_anova"
    if choice in ("fanova", "mean_decrease_impurity") and not has_sklearn:
        raise ConfigError(
            f"--importance {choice} needs scikit-learn, which is not installed: pip install "
            "scikit-learn, or use --importance ped_anova"
        )
    return choice


def _evaluator(name: str) -> Any:
    import optuna

    if name == "fanova":
        return optuna.importance.FanovaImportanceEvaluator(seed=0)
    if name == "mean_decrease_impurity":
        return optuna.importance.MeanDecreaseImpurityImportanceEvaluator(seed=0)
    return optuna.importance.PedAnovaImportanceEvaluator()


def param_importance(sweep_dir: Path, choice: str = "auto") -> dict[str, Any] | None:
    """Each searched parameter's importance in an Optuna sweep's study.

    Args:
        sweep_dir: The sweep directory.
        choice: One of :data:`EVALUATORS`.

    Returns:
        ``None`` when the sweep is not an Optuna sweep or ``choice`` is ``none``;
        else ``{"evaluator", "n_trials", "importances"}`` (importances ``{}``, with a
        ``note``, when the study has too few completed trials or cannot be read).

    Raises:
        ConfigError: For an unusable ``choice``.
    """
    settings = optuna_settings(sweep_dir)
    if settings is None or choice == "none":
        return None
    name = evaluator_name(choice)
    try:
        import optuna
    except ModuleNotFoundError:
        return _empty(name, 0, "optuna is not installed (pip install 'agilerl[slurm]')")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(
            study_name=str(settings.get("study_name") or "agilerl"),
            storage=open_storage(settings.get("storage"), Path(sweep_dir)),
        )
    except (optuna.exceptions.OptunaError, OSError, KeyError, ValueError) as exc:
        return _empty(name, 0, f"the study cannot be read ({exc})")
    completed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(completed) < MIN_TRIALS:
        return _empty(name, len(completed), f"needs {MIN_TRIALS} completed trials or more")
    values = optuna.importance.get_param_importances(study, evaluator=_evaluator(name))
    importances = {str(k): round(float(v), 4) for k, v in values.items()}
    return {"evaluator": name, "n_trials": len(completed), "importances": importances}


def _empty(name: str, n_trials: int, note: str) -> dict[str, Any]:
    return {"evaluator": name, "n_trials": n_trials, "importances": {}, "note": note}


def write_importance(sweep_dir: Path, result: dict[str, Any]) -> Path:
    """Write ``param_importance.json`` at the sweep root."""
    path = Path(sweep_dir) / IMPORTANCE_FILE
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def importance_lines(result: dict[str, Any]) -> list[str]:
    """The importance report: one line per parameter, most important first."""
    head = (
        f"parameter importance ({result['evaluator']}, {result['n_trials']} completed trials"
        f"{'; pruned ones left out' if result['importances'] else ''}):"
    )
    if not result["importances"]:
        return [f"{head} none: {result.get('note', 'no parameter')}"]
    width = max(len(k) for k in result["importances"])
    lines = [head]
    for param, share in result["importances"].items():
        bar = "#" * round(share * 30)
        lines.append(f"  {param:<{width}}  {share:6.3f}  {bar}")
    return lines
