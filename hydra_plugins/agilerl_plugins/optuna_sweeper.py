"""A Bayesian sweeper on current Optuna (ask/tell), maximising each job's returned fitness.

    python train.py -m hydra/sweeper=optuna algorithm=dqn env=cartpole
    python train.py -m hydra/sweeper=optuna hydra/launcher=slurm_cpu hydra.sweeper.n_trials=40

Trials are launched in batches of ``n_jobs`` through the chosen launcher, so
they run in parallel on SLURM. A trial whose job fails is told to Optuna as
failed. The best trial goes to ``optimization_results.yaml`` at the sweep root.
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
        try:
            self.space = self._search_space(arguments)
        except ConfigError as error:
            print(error.render(), file=sys.stderr)
            sys.exit(EXIT_USER_ERROR)
        study = optuna.create_study(
            direction=self.direction,
            sampler=optuna.samplers.TPESampler(seed=self.seed),
            study_name=self.study_name,
            storage=self.storage,
            load_if_exists=self.storage is not None,
        )
        distributions = {name: _distribution(p) for name, p in self.space.items()}
        done = 0
        while done < self.n_trials:
            trials = [
                study.ask(distributions) for _ in range(min(self.n_jobs, self.n_trials - done))
            ]
            batch = [
                [
                    *arguments,
                    *(
                        f"++{name}={value!r}" if isinstance(value, str) else f"++{name}={value}"
                        for name, value in trial.params.items()
                    ),
                ]
                for trial in trials
            ]
            returns = self.launcher.launch(batch, initial_job_idx=done)
            for trial, ret in zip(trials, returns, strict=True):
                value = ret._return_value if ret.status == JobStatus.COMPLETED else None
                if isinstance(value, int | float) and math.isfinite(value):
                    study.tell(trial, float(value))
                else:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
            done += len(trials)
        completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        results: dict[str, Any] = {
            "name": "optuna",
            "n_trials": len(study.trials),
            "n_completed": len(completed),
        }
        if completed:
            results |= {"best_params": study.best_params, "best_value": study.best_value}
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(results), sweep_dir / "optimization_results.yaml")
        return results
