"""LocalTrainer: the Python API that runs a validated manifest on this machine.

    trainer = LocalTrainer(algorithm="PPO", environment="CartPole-v1",
                           training={"max_steps": 50_000, "target_score": 475})
    population, fitnesses = trainer.train()

or from a manifest file: ``LocalTrainer.from_manifest("run.yaml").train()``.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import socket
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agilerl.arena.models.algorithms import AlgorithmSpec, MultiAgentAlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.arena.models.training import ReplayBufferSpec, TrainingSpec
from agilerl.builders import AlgorithmBuildRuntime, select_builder
from agilerl.launch.options import LoggerOptions
from agilerl.launch.preflight import preflight
from agilerl.launch.run_names import run_name
from agilerl.logging.loggers import FanOut, MetricSink, TensorBoardSink, WandbSink
from agilerl.logging.progress import TrainingProgress
from agilerl.logging.run_dir import RunDirectory
from agilerl.strategies import select_strategy
from agilerl.training.checkpointing import CheckpointManager, set_rng_state
from agilerl.training.resume_check import prepare_resume
from agilerl.training.run_context import RunContext, finite_or_none
from agilerl.training.run_lock import claim_run_dir, mark_run_dir


def _algorithm_section(algorithm: str | dict[str, Any] | AlgorithmSpec) -> Any:
    if isinstance(algorithm, str):
        return {"name": algorithm}
    if isinstance(algorithm, AlgorithmSpec):
        return {"name": algorithm.name, **algorithm.model_dump(exclude_unset=True)}
    return algorithm


def _environment_section(environment: str | dict[str, Any] | EnvSpecBase) -> Any:
    if isinstance(environment, str):
        return {"name": environment}
    if isinstance(environment, EnvSpecBase):
        return {"env_type": str(environment.env_type), **environment.model_dump(exclude_unset=True)}
    return environment


def _section(value: Any) -> Any:
    return value.model_dump(exclude_unset=True) if hasattr(value, "model_dump") else value


class LocalTrainer:
    """Trains a manifest's population on this machine and fills a run directory.

    Args:
        algorithm: Registry name, ``algorithm`` mapping or spec.
        environment: Gymnasium id / PettingZoo module, ``environment`` mapping or spec.
        training: ``training`` mapping or :class:`TrainingSpec`.
        network: ``network`` mapping or spec.
        replay_buffer: ``replay_buffer`` mapping or spec.
        mutation: ``mutation`` mapping or spec.
        tournament_selection: ``tournament_selection`` mapping or spec.
        seed: Seeds envs, torch, numpy and Python's ``random`` (``None``: 0 for a new
            run, the stored seed when resuming).
        device: Torch device (checked now: ``cuda`` needs a visible GPU).
        run_dir: Run directory; default ``runs/<date>/<time>_<algorithm>_<env>_<token>``.
        resume: Continue from ``run_dir``'s ``checkpoints/latest``.
        trust_code: Allow manifest fields that run code (env entrypoints,
            ``module:Id`` names, wrapper paths, rubric files).
        logger: Where metrics go besides local files.
        torch_threads: torch threads (1 is fastest for small networks on CPU; 0 keeps torch's).
        verbose: Show the live progress display.

    Raises:
        ConfigError: If the sections do not form a valid manifest.
    """

    def __init__(
        self,
        algorithm: str | dict[str, Any] | AlgorithmSpec,
        environment: str | dict[str, Any] | EnvSpecBase,
        training: dict[str, Any] | TrainingSpec | None = None,
        *,
        network: Any = None,
        replay_buffer: Any = None,
        mutation: Any = None,
        tournament_selection: Any = None,
        seed: int | None = None,
        device: str = "cpu",
        run_dir: str | Path | None = None,
        resume: bool = False,
        logger: LoggerOptions | dict[str, Any] | None = None,
        torch_threads: int = 1,
        verbose: bool = True,
        trust_code: bool = False,
    ) -> None:
        data = {
            "algorithm": _algorithm_section(algorithm),
            "environment": _environment_section(environment),
            "network": _section(network),
            "training": _section(training),
            "replay_buffer": _section(replay_buffer),
            "mutation": _section(mutation),
            "tournament_selection": _section(tournament_selection),
        }
        manifest = TrainingManifest.from_dict({k: v for k, v in data.items() if v is not None})
        self._init(
            manifest,
            seed=seed,
            device=device,
            run_dir=run_dir,
            resume=resume,
            logger=logger,
            torch_threads=torch_threads,
            verbose=verbose,
            trust_code=trust_code,
        )

    def _init(self, manifest: TrainingManifest, **options: Any) -> None:
        preflight(manifest, device=options["device"], trust_code=options["trust_code"])
        self.manifest = manifest
        self.spec = manifest.algorithm_with_network()
        self.builder = select_builder(self.spec)
        self.strategy = select_strategy(self.spec)
        self.seed: int | None = options["seed"]
        self.device: str = options["device"]
        self.resume: bool = options["resume"]
        self.torch_threads: int = options["torch_threads"]
        self.verbose: bool = options["verbose"]
        logger = options["logger"]
        self.logger = (
            logger if isinstance(logger, LoggerOptions) else LoggerOptions(**(logger or {}))
        )
        run_dir = options["run_dir"]
        if run_dir is None:
            stamp = dt.datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
            env = getattr(manifest.environment, "name", "env").replace("/", "_")
            run_dir = Path("runs") / f"{stamp}_{run_name(manifest.algorithm.name, env)}"
        self.run_dir = Path(run_dir)

    @classmethod
    def from_manifest(
        cls, manifest: str | Path | dict[str, Any] | TrainingManifest, **options: Any
    ) -> LocalTrainer:
        """Build a trainer from a manifest file, mapping or validated manifest.

        Args:
            manifest: A YAML/JSON path, a mapping, or a :class:`TrainingManifest`.
            **options: The keyword-only options of :class:`LocalTrainer`.
        """
        if isinstance(manifest, str | Path):
            manifest = TrainingManifest.from_file(manifest)
        elif not isinstance(manifest, TrainingManifest):
            manifest = TrainingManifest.from_dict(manifest)
        defaults = {
            "seed": None,
            "device": "cpu",
            "run_dir": None,
            "resume": False,
            "logger": None,
            "torch_threads": 1,
            "verbose": True,
            "trust_code": False,
        }
        unknown = set(options) - set(defaults)
        if unknown:
            raise TypeError(f"unknown LocalTrainer options: {', '.join(sorted(unknown))}")
        trainer = cls.__new__(cls)
        trainer._init(manifest, **{**defaults, **options})
        return trainer

    # --- running ------------------------------------------------------------------
    def _seed_everything(self) -> None:
        if self.torch_threads:
            torch.set_num_threads(self.torch_threads)
        random.seed(self.seed)
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)

    def _make_env_factory(self) -> Any:
        from agilerl.envs.gym import make_vector_env

        env_spec = self.manifest.environment
        if isinstance(self.spec, MultiAgentAlgorithmSpec) or not hasattr(env_spec, "sync"):
            raise ConfigError(
                f"training {self.spec.name} on a {env_spec.env_type} environment is not "
                "available in this version yet; the manifest is valid"
            )

        def factory(seed: int | None = None, num_envs: int | None = None) -> Any:
            return make_vector_env(env_spec, num_envs, seed=seed)

        return factory

    def _build_population(self, env: Any) -> list[Any]:
        from agilerl.envs.gym import action_space_kind

        kind = action_space_kind(env.single_action_space)
        if kind not in self.spec.action_space_kinds:
            raise ConfigError(
                f"environment.name: {self.spec.name} cannot act in "
                f"{getattr(self.manifest.environment, 'name', 'this env')}: it needs a "
                f"{' or '.join(sorted(self.spec.action_space_kinds))} action space, the env "
                f"has {env.single_action_space}"
            )
        population = []
        for index in range(self.manifest.training.pop_size):
            torch.manual_seed(self.seed * 1000 + index)
            population.append(
                self.builder.build(
                    self.spec,
                    env.single_observation_space,
                    env.single_action_space,
                    runtime=AlgorithmBuildRuntime(
                        index=index,
                        device=self.device,
                        total_steps=self.manifest.training.max_steps,
                    ),
                )
            )
        return population

    def _evolution_operators(self, resume_state: dict[str, Any] | None) -> tuple[Any, Any]:
        """Tournament selection and mutations from the manifest (defaults when omitted)."""
        from agilerl.arena.models.hpo import MutationSpec, TournamentSelectionSpec
        from agilerl.hpo import Mutations, TournamentSelection

        mutation_spec = self.manifest.mutation or MutationSpec()
        selection = self.manifest.tournament_selection or TournamentSelectionSpec()
        tournament = TournamentSelection(
            selection.tournament_size,
            selection.elitism,
            self.manifest.training.pop_size,
            rng=np.random.default_rng(mutation_spec.rand_seed),
        )
        mutation = Mutations.from_spec(
            mutation_spec, self.spec, rng_seed=mutation_spec.rand_seed + 1
        )
        operators = (resume_state or {}).get("operators")
        if operators:
            tournament.load_state_dict(operators["tournament"])
            mutation.load_state_dict(operators["mutation"])
        return tournament, mutation

    def _memories(self, env: Any) -> tuple[Any, Any]:
        """Replay memory for off-policy, offline and bandit specs (else ``None``).

        The population shares one memory unless ``training.experience_sharing``
        is false, which gives every agent its own.
        """
        spec = self.spec
        if not (spec.off_policy or spec.offline or spec.bandit):
            return None, None
        from agilerl.components.memory import InsufficientMemoryError
        from agilerl.models.training import init_buffer, init_n_step_buffer

        buffer_spec = self.manifest.replay_buffer
        if buffer_spec is None:
            warnings.warn(
                f"{spec.name} has no replay_buffer section: using max_size "
                f"{ReplayBufferSpec().max_size} (choose one with replay_buffer=standard)",
                UserWarning,
                stacklevel=3,
            )
            buffer_spec = ReplayBufferSpec()
        copies = (
            1
            if self.manifest.training.experience_sharing is not False
            else (self.manifest.training.pop_size)
        )
        spaces = {
            "observation_space": env.single_observation_space,
            "action_space": env.single_action_space,
        }
        try:
            # Seeded sampling generators: the same seed gives the same run (issue 10, case 27).
            seeds = [(self.seed or 0) * 1000 + 500 + copy for copy in range(copies)]
            mains = [init_buffer(buffer_spec, spec, self.device, seed=s, **spaces) for s in seeds]
            n_steps = [
                init_n_step_buffer(buffer_spec, spec, self.device, seed=s, **spaces) for s in seeds
            ]
        except InsufficientMemoryError as exc:
            raise ConfigError(f"replay_buffer.max_size: {exc}") from None
        if copies == 1:
            return mains[0], n_steps[0]
        return mains, (n_steps if n_steps[0] is not None else None)

    def _sinks(self, run_dir: RunDirectory, wandb_id: str | None) -> list[MetricSink]:
        sinks: list[MetricSink] = []
        if self.logger.tensorboard:
            sinks.append(TensorBoardSink(run_dir.tb_dir))
        if self.logger.kind == "wandb":
            sinks.append(
                WandbSink(
                    run_dir=run_dir.path,
                    config=self.manifest.to_dict(),
                    name=run_dir.path.name,
                    project=self.logger.project,
                    entity=self.logger.entity,
                    mode=self.logger.mode,
                    tags=self.logger.tags,
                    run_id=wandb_id,
                )
            )
        return sinks

    def train(self) -> tuple[list[Any], list[float]]:
        """Train the population until max_steps, target_score or max_wall_seconds.

        The run directory is claimed first (refused if it is not a run of ours or
        another process holds it), and every resume check runs before a file is written.

        Returns:
            The population and each agent's last fitness.

        Raises:
            ConfigError: For user mistakes found at run time (unknown env id,
                incompatible action space, unusable checkpoint, diverged training).
            KeyboardInterrupt: After Ctrl-C, once the checkpoint and summary are written.
        """
        with claim_run_dir(self.run_dir):
            return self._train_claimed()

    def _train_claimed(self) -> tuple[list[Any], list[float]]:
        try:
            loop = self.strategy.get_training_loop(self.spec)
        except NotImplementedError:
            raise ConfigError(
                f"training {self.spec.name} ({type(self.strategy).__name__}) is not available in "
                "this version yet; the manifest is valid (dry_run=true checks it)"
            ) from None
        training = self.manifest.training
        checkpoints = CheckpointManager(
            self.run_dir / "checkpoints", keep_last_only=training.overwrite_checkpoints
        )
        agent_states, resume_state, self.seed = prepare_resume(
            self.run_dir, checkpoints, self.manifest, self.resume, self.seed
        )
        self._seed_everything()
        run_dir = RunDirectory(self.run_dir)
        mark_run_dir(run_dir.path)
        run_dir.truncate_metrics(int(resume_state["total_steps"]) if resume_state else -1)
        run_dir.write_manifest(self.manifest.to_dict())

        factory = self._make_env_factory()
        env = factory(seed=self.seed)
        population = self._build_population(env)
        if agent_states is not None:
            if len(agent_states) != len(population):
                raise ConfigError(
                    f"checkpoint holds {len(agent_states)} agents but training.pop_size is "
                    f"{len(population)}"
                )
            for agent, state in zip(population, agent_states, strict=True):
                agent.load_state_dict(state)
            set_rng_state(resume_state["rng"])

        context = RunContext(
            run_dir=run_dir,
            checkpoints=checkpoints,
            seed=self.seed,
            max_wall_seconds=training.max_wall_seconds,
            resume_state=resume_state,
            elapsed_before=float(resume_state["wall_seconds"]) if resume_state else 0.0,
        )
        context.extra_state["seed"] = self.seed
        context.sinks = FanOut(self._sinks(run_dir, (resume_state or {}).get("wandb_id")))
        wandb_ids = [s.run_id for s in context.sinks.sinks if isinstance(s, WandbSink)]
        context.extra_state["wandb_id"] = wandb_ids[0] if wandb_ids else None
        context.progress = TrainingProgress(
            training.max_steps * training.pop_size,
            f"{self.spec.name} {getattr(self.manifest.environment, 'name', '')}",
            enabled=self.verbose,
        )
        memory, n_step_memory = self._memories(env)
        kwargs = self.strategy.get_trainer_kwargs(
            self.spec,
            training=training,
            env_spec=self.manifest.environment,
            memory=memory,
            n_step_memory=n_step_memory,
        )
        if memory is not None:
            buffer_spec = self.manifest.replay_buffer or ReplayBufferSpec()
            kwargs["save_memory"] = buffer_spec.store_in_checkpoint
        if training.hpo:
            tournament, mutation = self._evolution_operators(resume_state)
            kwargs.update(tournament=tournament, mutation=mutation)
            context.operators_provider = lambda: {
                "tournament": tournament.state_dict(),
                "mutation": mutation.state_dict(),
            }
        summary: dict[str, Any] = {"status": "failed"}
        context.install_signal_handlers()
        try:
            population, fitnesses = loop(
                population,
                env,
                max_steps=training.max_steps,
                evo_steps=training.evo_steps,
                env_factory=factory,
                run=context,
                **kwargs,
            )
            summary = context.extra_state.get("summary", {})
        except FloatingPointError as exc:
            summary = {**context.extra_state.get("summary", {}), "status": "failed"}
            raise ConfigError(
                f"training diverged: {exc}. The last good checkpoint is kept in "
                f"{run_dir.checkpoints_dir}; lower algorithm.lr or max_grad_norm and resume"
            ) from None
        finally:
            context.restore_signal_handlers()
            env.close()
            context.progress.close()
            context.sinks.close()
            self._write_summary(run_dir, summary, context)
        context.forward_stop_signal()
        return population, fitnesses

    def _write_summary(
        self, run_dir: RunDirectory, summary: dict[str, Any], context: RunContext
    ) -> None:
        total = int(summary.get("total_steps", 0))
        wall = context.elapsed()
        latest = context.checkpoints.latest_dir() if context.checkpoints else None
        run_dir.write_summary(
            {
                "algorithm": self.spec.name,
                "env": getattr(self.manifest.environment, "name", None),
                "total_steps": total,
                "wall_seconds": round(wall, 3),
                "steps_per_second": round(total / wall, 1) if wall > 0 else None,
                "best_fitness": finite_or_none(summary.get("best_fitness")),
                "final_fitness": finite_or_none(summary.get("final_fitness")),
                "solved_at_step": summary.get("solved_at_step"),
                "pop_size": self.manifest.training.pop_size,
                "seed": self.seed,
                "status": summary.get("status", "failed"),
                "checkpoint": str(latest) if latest else None,
                "run_dir": str(run_dir.path),
                "host": {
                    "hostname": socket.gethostname(),
                    "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                },
            }
        )
        run_dir.plot_population()
        run_dir.plot_learning_curve(
            f"{self.spec.name} on {getattr(self.manifest.environment, 'name', '')}",
            self.manifest.training.target_score,
        )
