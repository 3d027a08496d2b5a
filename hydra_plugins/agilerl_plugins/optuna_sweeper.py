"""A Bayesian sweeper on current Optuna (ask/tell), maximising each job's returned fitness.

    python train.py -m hydra/sweeper=optuna algorithm=dqn env=cartpole
    python train.py -m hydra/sweeper=optuna hydra/launcher=slurm_cpu hydra.sweeper.n_trials=40

Trials are launched in batches of ``n_jobs`` through the chosen launcher, so
they run in parallel on SLURM. A trial whose job fails is told to Optuna as
failed. The best trial goes to ``optimization_results.yaml`` at the sweep root.

The study lives in ``hydra.sweeper.storage``, else in ``optuna.journal`` at the
sweep root, where every trial's job reports its evaluations (see
:mod:`agilerl.launch.optuna_study`); ``hydra.sweeper.pruner`` stops the trials that
trail the others (recorded as ``pruned``). Running the sweep again in the same
directory continues its study up to ``n_trials`` finished trials.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from agilerl.arena.models.errors import EXIT_USER_ERROR, ConfigError
from agilerl.launch.compose import build_manifest
from agilerl.launch.ledger import Ledger, hold_sweep_dir, job_key
from agilerl.launch.optuna_study import JOB_ATTR, SWEEP_ATTR, open_storage, sweep_marker
from agilerl.launch.pruners import describe_pruner, make_pruner, parse_pruner
from agilerl.launch.search_space import (
    CategoricalParam,
    FloatParam,
    IntParam,
    check_space_fields,
    default_search_space,
    parse_search_space,
)


def _distribution(param: FloatParam | IntParam | CategoricalParam) -> Any:
    import optuna

    if isinstance(param, FloatParam):
        return optuna.distributions.FloatDistribution(param.low, param.high, log=param.log)
    if isinstance(param, IntParam):
        return optuna.distributions.IntDistribution(
            param.low, param.high, log=param.log, step=param.step
        )
    return optuna.distributions.CategoricalDistribution(param.choices)


def describe(param: FloatParam | IntParam | CategoricalParam) -> str:
    """``float 0.0001..0.01 (log)``, ``int 1..8``, ``one of [32, 64]``."""
    if isinstance(param, CategoricalParam):
        return f"one of {param.choices}"
    kind = "float" if isinstance(param, FloatParam) else "int"
    return f"{kind} {param.low:g}..{param.high:g}" + (" (log)" if param.log else "")


class OptunaSweeper(Sweeper):
    """Hydra sweeper driving an Optuna study with TPE."""

    def __init__(
        self,
        n_trials: int = 20,
        n_jobs: int = 2,
        direction: str = "maximize",
        seed: int | None = 0,
        study_name: str = "agilerl",
        storage: str | None = None,
        search_space: Any = None,
        pruner: Any = None,
    ) -> None:
        self.n_trials = int(n_trials)
        self.n_jobs = max(1, int(n_jobs))
        self.direction = direction
        self.seed = seed
        self.study_name = study_name
        self.storage = storage
        raw = (
            OmegaConf.to_container(search_space)
            if OmegaConf.is_config(search_space)
            else search_space
        )
        self.raw_space: dict[str, Any] | None = dict(raw) if raw else None
        self.raw_pruner = (
            OmegaConf.to_container(pruner, resolve=True) if OmegaConf.is_config(pruner) else pruner
        )
        self.pruner: Any = None
        self.space: dict[str, FloatParam | IntParam | CategoricalParam] = {}
        self.launcher: Any = None
        self.config: DictConfig | None = None
        self.hydra_context: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def _search_space(self, arguments: list[str]) -> dict[str, Any]:
        """The user's space, else the algorithm's default; checked against the manifest."""
        sweep_config = self.hydra_context.config_loader.load_sweep_config(
            self.config, list(arguments)
        )
        manifest, _ = build_manifest(sweep_config, list(sweep_config.hydra.overrides.task))
        name = manifest.algorithm.name
        if self.raw_space is None:
            raw, origin = default_search_space(type(manifest.algorithm)), f"{name}'s default"
        else:
            raw, origin = self.raw_space, "hydra.sweeper.search_space"
        space = parse_search_space(raw)
        check_space_fields(space, manifest)
        print(f"optuna: {self.n_trials} trials of {name}, search space ({origin}):", flush=True)
        for path, param in space.items():
            print(f"  {path}: {describe(param)}", flush=True)
        print(f"optuna: pruner {describe_pruner(self.pruner)}", flush=True)
        return space

    def sweep(self, arguments: list[str]) -> Any:
        import optuna

        assert self.config is not None
        for argument in arguments:
            if "," in argument.split("=", 1)[-1] and not argument.startswith("hydra"):
                raise ValueError(
                    f"{argument}: the optuna sweeper takes fixed overrides only; "
                    "put ranges in hydra.sweeper.search_space"
                )
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        dry_run = bool(self.config.get("dry_run"))  # plans only: the study stays in memory
        try:
            self.pruner = parse_pruner(self.raw_pruner)
            self.space = self._search_space(arguments)
            if not dry_run:  # one launch per sweep directory: its study's running trials are ours
                hold_sweep_dir(sweep_dir)
        except ConfigError as error:
            print(error.render(), file=sys.stderr)
            sys.exit(EXIT_USER_ERROR)
        study = optuna.create_study(
            direction=self.direction,
            sampler=optuna.samplers.TPESampler(seed=self.seed),
            pruner=make_pruner(self.pruner),
            study_name=self.study_name,
            storage=None if dry_run else open_storage(self.storage, sweep_dir),
            load_if_exists=True,
        )
        if not dry_run:  # as Hydra's basic sweeper: agilerl sweep summary and rerun read it
            OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        marker = sweep_marker(sweep_dir)
        done = self._resume(study, marker)
        distributions = {name: _distribution(p) for name, p in self.space.items()}
        while done < self.n_trials:
            trials = [
                study.ask(distributions) for _ in range(min(self.n_jobs, self.n_trials - done))
            ]
            batch = [[*arguments, *_param_overrides(trial.params)] for trial in trials]
            for trial, overrides in zip(trials, batch, strict=True):
                trial.set_user_attr(JOB_ATTR, job_key(overrides))
                trial.set_user_attr(SWEEP_ATTR, marker)
            returns = self.launcher.launch(batch, initial_job_idx=trials[0].number)
            states = {r.key: r.state for r in Ledger(sweep_dir).jobs(reconcile=False)}
            for trial, overrides, ret in zip(trials, batch, returns, strict=True):
                value = ret._return_value if ret.status == JobStatus.COMPLETED else None
                if states.get(job_key(overrides)) == "pruned":
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                elif isinstance(value, int | float) and math.isfinite(value):
                    study.tell(trial, float(value))
                else:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
            done += len(trials)
        results = _results(study, marker, self.pruner)
        if not dry_run:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(OmegaConf.create(results), sweep_dir / "optimization_results.yaml")
        return results

    def _resume(self, study: Any, marker: str) -> int:
        """Trials this sweep directory finished before (a second launch continues them).

        Trials it left running (the launch was killed) are told failed: this
        process holds the sweep directory, so no job of theirs reports any more.
        """
        import optuna

        state = optuna.trial.TrialState
        ours = [
            t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(SWEEP_ATTR) == marker
        ]
        for trial in ours:
            if trial.state in (state.RUNNING, state.WAITING):
                study.tell(trial.number, state=state.FAIL)
        done = sum(t.state in (state.COMPLETE, state.PRUNED) for t in ours)
        if done:
            print(
                f"optuna: {done} trial(s) of this sweep already finished; running "
                f"{max(0, self.n_trials - done)} more (hydra.sweeper.n_trials={self.n_trials})",
                flush=True,
            )
        return done


def _param_overrides(params: dict[str, Any]) -> list[str]:
    """A trial's parameters as overrides (``++algorithm.lr=0.001``)."""
    return [
        f"++{name}={value!r}" if isinstance(value, str) else f"++{name}={value}"
        for name, value in params.items()
    ]


def _results(study: Any, marker: str, pruner: Any) -> dict[str, Any]:
    """What ``optimization_results.yaml`` holds: counts of this sweep's trials, the best."""
    import optuna

    state = optuna.trial.TrialState
    ours = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(SWEEP_ATTR) == marker]
    completed = [t for t in ours if t.state == state.COMPLETE]
    results: dict[str, Any] = {
        "name": "optuna",
        "n_trials": len(ours),
        "n_completed": len(completed),
        "n_pruned": sum(t.state == state.PRUNED for t in ours),
        "n_failed": sum(t.state == state.FAIL for t in ours),
        "pruner": describe_pruner(pruner),
    }
    if completed:
        best = (
            max(completed, key=lambda t: t.value)
            if study.direction.name == "MAXIMIZE"
            else min(completed, key=lambda t: t.value)
        )
        results |= {"best_params": best.params, "best_value": best.value, "best_trial": best.number}
    return results
