"""A Bayesian sweeper on current Optuna (ask/tell), maximising each job's returned fitness.

    python train.py -m hydra/sweeper=optuna algorithm=dqn env=cartpole
    python train.py -m hydra/sweeper=optuna hydra/launcher=slurm_cpu hydra.sweeper.n_trials=40

Trials are launched in batches of ``n_jobs`` through the chosen launcher, so
they run in parallel on SLURM. A trial whose job fails is told to Optuna as
failed. The best trial goes to ``optimization_results.yaml`` at the sweep root.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from agilerl.launch.search_space import (
    CategoricalParam,
    FloatParam,
    IntParam,
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
        raw = OmegaConf.to_container(search_space) if OmegaConf.is_config(search_space) else {}
        self.space = parse_search_space(dict(raw or search_space or {}))
        self.launcher: Any = None
        self.config: DictConfig | None = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        import optuna

        assert self.config is not None
        for argument in arguments:
            if "," in argument.split("=", 1)[-1] and not argument.startswith("hydra"):
                raise ValueError(
                    f"{argument}: the optuna sweeper takes fixed overrides only; "
                    "put ranges in hydra.sweeper.search_space"
                )
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
