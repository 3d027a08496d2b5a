"""Optuna pruning: settings, a trial's reports reaching the study, a run stopped as pruned,
and a sweep whose clearly bad setting is pruned before its budget ends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sweep_helpers import REPO, jobs, multirun

from agilerl.arena.models.errors import ConfigError
from agilerl.launch.optuna_study import (
    JOB_ATTR,
    PRUNED_ATTR,
    SWEEP_ATTR,
    SWEEPER_TARGET,
    connect_trial,
    open_storage,
    sweep_marker,
)
from agilerl.launch.pruners import (
    MedianPrunerSettings,
    NoPruner,
    SuccessiveHalvingSettings,
    make_pruner,
    parse_pruner,
)

optuna = pytest.importorskip("optuna")
optuna.logging.set_verbosity(optuna.logging.WARNING)


# --- settings ---------------------------------------------------------------------------
def test_pruner_settings_take_defaults_and_refuse_another_kinds_setting() -> None:
    assert parse_pruner(None) == NoPruner()
    median = parse_pruner({"kind": "median", "n_warmup_steps": 5000, "reduction_factor": None})
    assert median == MedianPrunerSettings(kind="median", n_warmup_steps=5000)
    assert median.n_startup_trials == 5  # Optuna's default
    halving = parse_pruner("successive_halving")
    assert isinstance(halving, SuccessiveHalvingSettings) and halving.min_resource == "auto"
    with pytest.raises(ConfigError) as wrong_kind:
        parse_pruner({"kind": "median", "reduction_factor": 3})
    assert "hydra.sweeper.pruner.reduction_factor: unknown field" in wrong_kind.value.render()
    assert "a median pruner takes n_startup_trials" in wrong_kind.value.render()
    with pytest.raises(ConfigError, match="'hyperband' is not a pruner; use one of none, median"):
        parse_pruner({"kind": "hyperband"})
    with pytest.raises(ConfigError, match="min_resource: must be a step count >= 1 or auto"):
        parse_pruner({"kind": "successive_halving", "min_resource": 0})


def test_a_sweep_with_a_bad_pruner_setting_is_refused_before_any_trial(tmp_path: Path) -> None:
    sweep = tmp_path / "bad"
    done = multirun(
        sweep,
        "hydra/sweeper=optuna",
        "hydra.sweeper.pruner.kind=median",
        "hydra.sweeper.pruner.min_resource=100",
        "training=smoke",
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "hydra.sweeper.pruner.min_resource: unknown field" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (sweep / "ledger.jsonl").exists() and not (sweep / "optuna.journal").exists()


# --- a trial's reports reach the study --------------------------------------------------
def _sweeper(pruner: dict[str, Any]) -> dict[str, Any]:
    return {"_target_": SWEEPER_TARGET, "study_name": "agilerl", "storage": None, "pruner": pruner}


def _finished_trials(sweep: Path, settings: dict[str, Any], curves: list[dict[int, float]]) -> Any:
    """A study in ``sweep``'s journal holding trials that ran these curves to the end
    (asking the pruner at each step, as a job does: a rung records its values so)."""
    study = optuna.create_study(
        study_name="agilerl",
        storage=open_storage(None, sweep),
        direction="maximize",
        pruner=make_pruner(parse_pruner(settings)),
    )
    for curve in curves:
        trial = study.ask()
        for step, value in curve.items():
            trial.report(value, step)
            trial.should_prune()
        study.tell(trial, max(curve.values()))
    return study


def _running(study: Any, sweep: Path, job: str) -> Any:
    trial = study.ask()
    trial.set_user_attr(JOB_ATTR, job)
    trial.set_user_attr(SWEEP_ATTR, sweep_marker(sweep))
    return trial


def test_successive_halving_prunes_a_trial_that_trails_at_a_rung(tmp_path: Path) -> None:
    settings = {"kind": "successive_halving", "min_resource": 100, "reduction_factor": 2}
    good = {100: 50.0, 200: 80.0, 400: 120.0}
    study = _finished_trials(tmp_path, settings, [good, good, good])
    trailing, leading = _running(study, tmp_path, "lr=1"), _running(study, tmp_path, "lr=2")

    reporter = connect_trial(_sweeper(settings), tmp_path, "lr=1")
    assert reporter is not None and reporter.number == trailing.number
    assert reporter(50, 1.0) is False  # below the first rung: nothing to compare yet
    assert reporter(100, 5.0) is True
    ahead = connect_trial(_sweeper(settings), tmp_path, "lr=2")
    assert ahead is not None and ahead.number == leading.number
    assert ahead(100, 60.0) is False and ahead(200, 90.0) is False

    stored = {t.number: t for t in study.get_trials()}
    assert stored[trailing.number].intermediate_values == {50: 1.0, 100: 5.0}
    assert stored[trailing.number].user_attrs[PRUNED_ATTR] == 100
    assert PRUNED_ATTR not in stored[leading.number].user_attrs


def test_median_pruner_waits_for_its_warm_up_and_a_resumed_job_skips_reported_steps(
    tmp_path: Path,
) -> None:
    settings = {"kind": "median", "n_startup_trials": 1, "n_warmup_steps": 200}
    study = _finished_trials(tmp_path, settings, [{100: 50.0, 200: 80.0}])
    _running(study, tmp_path, "job")
    reporter = connect_trial(_sweeper(settings), tmp_path, "job")
    assert reporter is not None
    assert reporter(100, 1.0) is False  # trails, but the warm-up runs to step 200
    resumed = connect_trial(_sweeper(settings), tmp_path, "job")  # a requeued job
    assert resumed is not None and resumed.last_step == 100
    assert resumed(100, 1.0) is False and resumed(200, 2.0) is True


def test_a_shared_rdb_study_gives_each_sweep_directory_its_own_trial(tmp_path: Path) -> None:
    pytest.importorskip("sqlalchemy")
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    study = optuna.create_study(study_name="agilerl", storage=url, direction="maximize")
    mine, other = tmp_path / "mine", tmp_path / "other"
    theirs = _running(study, other, "lr=1")  # another sweep's job of the same overrides
    ours = _running(study, mine, "lr=1")
    sweeper = {**_sweeper({"kind": "none"}), "storage": url}
    reporter = connect_trial(sweeper, mine, "lr=1")
    assert reporter is not None and reporter.number == ours.number != theirs.number
    assert reporter(10, 3.0) is False  # nothing to prune with
    assert study.trials[ours.number].intermediate_values == {10: 3.0}
    assert study.trials[theirs.number].intermediate_values == {}


def test_no_trial_to_report_to_trains_on_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert connect_trial({"_target_": "another.Sweeper"}, tmp_path, "job") is None
    _finished_trials(tmp_path, {"kind": "none"}, [{1: 1.0}])
    assert connect_trial(_sweeper({"kind": "median"}), tmp_path, "job") is None
    assert "no running trial of this sweep is job job; no pruning" in capsys.readouterr().err


# --- a run stopped as pruned --------------------------------------------------------------
def test_a_run_whose_evaluation_callback_says_stop_ends_as_pruned(tmp_path: Path) -> None:
    from agilerl.trainer import LocalTrainer

    seen: list[tuple[int, float]] = []

    def prune_after_warm_up(step: int, best: float) -> bool:
        seen.append((step, best))
        return step >= 1024

    trainer = LocalTrainer(
        {"name": "PPO", "learn_step": 256},
        {"name": "CartPole-v1", "num_envs": 4},
        {"max_steps": 4096, "evo_steps": 512, "eval_loop": 1, "eval_steps": 100},
        presets=False,
        run_dir=tmp_path / "run",
        verbose=False,
        logger={"tensorboard": False},
        on_evaluation=prune_after_warm_up,
    )
    result = trainer.run()
    assert result.status == "pruned"
    assert [step for step, _ in seen] == [512, 1024]  # the evaluation grid, per member
    assert seen[-1][1] == result.best_fitness
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "pruned" and 1024 <= summary["total_steps"] < 4096


# --- a sweep ------------------------------------------------------------------------------
BAD = "++environment.config.sutton_barto_reward=True"
"""CartPole's Sutton-Barto reward: 0 a step and -1 at the end, so every return is <= 0 while
the usual reward gives >= 8: a clearly bad setting, whatever the learning rate."""
SWEEP_ARGS = (
    "hydra/sweeper=optuna",
    "hydra.sweeper.n_trials=3",
    "hydra.sweeper.n_jobs=1",
    "hydra.sweeper.seed=4",  # the sampler's first draws: bad, good, bad
    "hydra.sweeper.pruner.kind=median",
    "hydra.sweeper.pruner.n_startup_trials=1",
    "hydra.sweeper.pruner.n_warmup_steps=1024",
    "hydra.sweeper.search_space={algorithm: {lr: {type: float, low: 1e-3, high: 2e-3}},"
    " environment: {config: {sutton_barto_reward: {type: categorical, choices: [false, true]}}}}",
    "training=smoke",
    "training.max_steps=4096",
    "training.evo_steps=512",
    "training.eval_loop=1",
    "training.eval_steps=200",
    "algorithm.learn_step=256",
    "logger.tensorboard=false",
)


@pytest.mark.parametrize(
    "launcher",
    [
        "sequential",  # every trial in the sweeper's process
        pytest.param("local", marks=pytest.mark.slow),  # each in its own process (~50 s)
    ],
)
def test_a_clearly_bad_setting_is_pruned_before_its_budget_ends_and_a_good_one_is_not(
    tmp_path: Path, launcher: str
) -> None:
    sweep = tmp_path / "sweep"
    done = multirun(sweep, f"hydra/launcher={launcher}", *SWEEP_ARGS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "optuna: pruner median (n_startup_trials=1, n_warmup_steps=1024" in done.stdout
    records = sorted(jobs(sweep).values(), key=lambda r: r.num)
    bad = [BAD in r.overrides for r in records]
    assert bad == [True, False, True], "the sampler's draws changed: pick another seed"
    # the first trial finishes (nothing to compare with), the good one is never pruned,
    # the second bad one is stopped after the warm-up
    assert [r.state for r in records] == ["completed", "completed", "pruned"]
    pruned = json.loads((Path(records[2].run_dir) / "summary.json").read_text())
    assert pruned["status"] == "pruned" and 1024 <= pruned["total_steps"] < 4096
    good = json.loads((Path(records[1].run_dir) / "summary.json").read_text())
    assert good["status"] == "completed" and good["total_steps"] >= 4096

    import yaml

    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert (results["n_completed"], results["n_pruned"], results["n_failed"]) == (2, 1, 0)
    assert results["best_trial"] == 1
    study = optuna.load_study(study_name="agilerl", storage=open_storage(None, sweep))
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "COMPLETE", "PRUNED"]
    assert max(study.trials[2].intermediate_values) < 4096  # reported until it was stopped
    if launcher == "sequential":
        return  # the slow case also reads the summary and launches the sweep again

    summary = subprocess.run(
        [sys.executable, "-m", "agilerl.cli", "sweep", "summary", str(sweep), "--no-plot"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert summary.returncode == 0, summary.stderr
    assert "1 job(s) pruned before their budget ended (not ranked" in summary.stdout
    assert "parameter importance (" in summary.stdout
    importance = json.loads((sweep / "param_importance.json").read_text())
    assert importance["n_trials"] == 2
    assert set(importance["importances"]) == {
        "algorithm.lr",
        "environment.config.sutton_barto_reward",
    }

    again = multirun(sweep, f"hydra/launcher={launcher}", *SWEEP_ARGS)  # its study is complete
    assert again.returncode == 0, again.stderr[-3000:]
    assert "optuna: 3 trial(s) of this sweep already finished; running 0 more" in again.stdout
