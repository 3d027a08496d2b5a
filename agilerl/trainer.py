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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agilerl.arena.models.algorithms import AlgorithmSpec
from agilerl.arena.models.env import EnvSpecBase
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.arena.models.training import TrainingSpec
from agilerl.builders import select_builder
from agilerl.extras import require
from agilerl.launch.options import LoggerOptions
from agilerl.launch.preflight import preflight
from agilerl.launch.presets import layered, merge_tuned_network, preset_sections
from agilerl.launch.run_names import run_name
from agilerl.logging.loggers import FanOut, MetricSink, TensorBoardSink, WandbSink
from agilerl.logging.progress import TrainingProgress
from agilerl.logging.run_dir import RunDirectory
from agilerl.logging.run_end import render_run_end
from agilerl.networks.fastgrad import gradient_mode
from agilerl.strategies import PopulationRuntime, select_strategy, with_run_defaults
from agilerl.training import distributed_run
from agilerl.training.checkpointing import CheckpointManager, ResumeState, set_rng_state
from agilerl.training.input_fingerprints import check_inputs, record_inputs
from agilerl.training.numerics import denormals_flushed
from agilerl.training.population_loop import FINAL_STATUSES
from agilerl.training.results import LoopResult
from agilerl.training.resume_check import prepare_resume
from agilerl.training.run_context import RunContext, finite_or_none
from agilerl.training.run_lock import mark_run_dir


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


def _with_presets(data: dict[str, Any]) -> dict[str, Any]:
    """The given sections on top of the env group and tuned preset ``train.py`` composes."""
    algorithm, environment = data["algorithm"], data["environment"]
    if not isinstance(algorithm, dict) or not isinstance(environment, dict):
        return data
    base = preset_sections(str(algorithm.get("name", "")), environment)
    sections = dict(data)
    for name, preset in base.items():
        if name == "network":
            sections[name] = merge_tuned_network(preset, data.get(name))
        else:
            sections[name] = layered(preset, data.get(name))
    return sections


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
        device: Torch device.
        run_dir: Run directory; default ``runs/<date>/<time>_<algorithm>_<env>_<token>``.
        resume: Continue from ``run_dir``'s ``checkpoints/latest``.
        trust_code: Allow manifest fields that run code (env entrypoints,
            ``module:Id`` names, wrapper paths, rubric files).
        logger: Where metrics go besides local files.
        torch_threads: torch threads (1 is fastest for small networks on CPU; 0 keeps torch's).
        flush_denormal: Flush subnormal floats to zero in CPU arithmetic while training
            (:func:`agilerl.training.numerics.denormals_flushed`): no value above
            ~1.2e-38 changes, and optimizer steps over long-idle weights stay fast.
        verbose: Show the live progress display.
        accept_changed_inputs: Resume even though an input file (base model, dataset,
            reward file) changed since the run started (``inputs.json``).
        on_evaluation: Called after each evaluation with the step (per member) and the
            run's best fitness so far; returning ``True`` stops the run early with status
            ``pruned`` (e.g. ``trial.report`` then ``trial.should_prune()`` of an Optuna
            trial). Not called in a multi-process run.
        presets: Layer the sections on the env's conf group and the pair's tuned preset
            (``conf/env/``, ``conf/tuned/``), as ``train.py algorithm=<a> env=<e>`` does,
            so both train the same manifest; ``False`` starts from the specs' defaults
            (``train.py env=custom``). :meth:`from_manifest` never adds presets.

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
        flush_denormal: bool = True,
        verbose: bool = True,
        trust_code: bool = False,
        accept_changed_inputs: bool = False,
        on_evaluation: Callable[[int, float], bool] | None = None,
        presets: bool = True,
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
        if presets:
            data = _with_presets(data)
        manifest = TrainingManifest.from_dict({k: v for k, v in data.items() if v is not None})
        self._init(
            manifest,
            seed=seed,
            device=device,
            run_dir=run_dir,
            resume=resume,
            logger=logger,
            torch_threads=torch_threads,
            flush_denormal=flush_denormal,
            verbose=verbose,
            trust_code=trust_code,
            accept_changed_inputs=accept_changed_inputs,
            on_evaluation=on_evaluation,
        )

    def _init(self, manifest: TrainingManifest, **options: Any) -> None:
        manifest = with_run_defaults(manifest)
        if not options["resume"] or options["seed"] is not None:
            # (a resume without a seed keeps the stored run's, checked in prepare_resume)
            manifest, options["seed"] = seeded_manifest(manifest, options["seed"])
        preflight(
            manifest,
            device=options["device"],
            trust_code=options["trust_code"],
            paradigm_checks=False,  # in run(), after the extras: building needs no files yet
        )
        self.manifest = manifest
        self.spec = manifest.algorithm_with_network()
        self.builder = select_builder(self.spec)
        self.strategy = select_strategy(self.spec)
        self.seed: int | None = options["seed"]
        self.device: str = options["device"]
        self.resume: bool = options["resume"]
        self.torch_threads: int = options["torch_threads"]
        self.flush_denormal: bool = options["flush_denormal"]
        self.verbose: bool = options["verbose"]
        self.accept_changed_inputs: bool = options["accept_changed_inputs"]
        self.on_evaluation: Callable[[int, float], bool] | None = options["on_evaluation"]
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
            "flush_denormal": True,
            "verbose": True,
            "trust_code": False,
            "accept_changed_inputs": False,
            "on_evaluation": None,
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

    def _evolution_operators(self, resume_state: ResumeState | None) -> tuple[Any, Any]:
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
            keep_incumbents=selection.keep_incumbents,
        )
        mutation = Mutations.from_spec(
            mutation_spec, self.spec, rng_seed=mutation_spec.rand_seed + 1
        )
        operators = resume_state.operators if resume_state else None
        if operators:
            tournament.load_state_dict(operators["tournament"])
            mutation.load_state_dict(operators["mutation"])
        return tournament, mutation

    def _sinks(self, run_dir: RunDirectory, wandb_id: str | None) -> list[MetricSink]:
        sinks: list[MetricSink] = []
        if self.logger.tensorboard:
            sinks.append(TensorBoardSink(run_dir.tb_dir))
        if self.logger.kind == "wandb":
            sinks.append(
                WandbSink(
                    run_dir=run_dir.path,
                    config=self.manifest.to_dict(),
                    name=self.manifest.training.name or run_dir.path.name,
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

        Returns:
            The population and each agent's last fitness.

        Raises:
            ConfigError: For user mistakes found at run time (unknown env id,
                incompatible action space, unusable checkpoint, diverged training,
                a paradigm that cannot train here).
        """
        result = self.run()
        return result.population, result.fitnesses

    def run(self) -> LoopResult:
        """Like :meth:`train`, returning the loop's typed result (also in ``summary.json``).

        The strategy of the spec's paradigm makes the envs, builds the
        population, names the loop and its arguments; this method holds the
        run directory, seeding, resume, logging and evolution around them. The
        run directory is claimed first (refused if it is not a run of ours or
        another process holds it), and every resume check runs before a file
        is written.

        Started as several processes (``torchrun``, ``srun``; see
        :mod:`agilerl.training.distributed_run`), the processes join one group,
        rank 0's run directory is everyone's, and only rank 0 claims and
        writes it; a paradigm whose strategy does not train multi-process is refused.

        Raises:
            KeyboardInterrupt: After Ctrl-C, once the checkpoint and summary are written.
        """
        reason = self.strategy.unavailable_reason(self.spec)  # before anything is written
        if reason is not None:
            raise ConfigError(
                f"algorithm.name: training {self.spec.name} is not possible here: {reason}; "
                "the manifest is valid (dry_run=true checks it)"
            )
        if self.logger.kind == "wandb":
            require("wandb", "logger=wandb", "logger")
        self.strategy.check(self.manifest)  # e.g. the dataset or model files it reads
        label = f"{self.spec.name} ({self.strategy.paradigm or 'this paradigm'})"
        distributed_run.check_supported(label, self.strategy.multi_process)
        distributed_run.join(self.device)
        self.device = distributed_run.local_device(self.device)
        self.run_dir = Path(distributed_run.broadcast(str(self.run_dir)))
        with (
            distributed_run.claim(self.run_dir),
            denormals_flushed(self.flush_denormal),
            gradient_mode(self.manifest.training.fast_grad),
        ):
            return self._run_claimed()

    def _run_claimed(self) -> LoopResult:
        loop = self.strategy.get_training_loop(self.spec)
        training = self.manifest.training
        checkpoints = CheckpointManager(
            self.run_dir / "checkpoints",
            keep_last_only=training.overwrite_checkpoints,
            optimizer=training.checkpoint_optimizer,
        )
        resume_state: ResumeState | None
        agent_states, resume_state, self.seed = prepare_resume(
            self.run_dir, checkpoints, self.manifest, self.resume, self.seed
        )
        if resume_state is not None:
            check_inputs(self.run_dir, self.manifest, accept_changed=self.accept_changed_inputs)
        self._seed_everything()  # alike on every process: the same model everywhere
        distributed_run.barrier()  # every process has read the resume state before rank 0 writes
        main = distributed_run.process_info().is_main
        run_dir: RunDirectory | None = None
        if main:
            run_dir = RunDirectory(self.run_dir)
            mark_run_dir(run_dir.path)
            run_dir.truncate_metrics(resume_state.total_steps if resume_state else -1)
            run_dir.write_manifest(self.manifest.to_dict())
            if resume_state is None or self.accept_changed_inputs:
                record_inputs(run_dir.path, self.manifest)

        envs = self.strategy.make_envs(self.manifest, seed=self.seed)
        report = getattr(envs.env, "data_report", None)
        self.data_report: dict[str, int] | None = report() if callable(report) else None
        try:
            population = self.strategy.build_population(
                self.spec,
                self.builder,
                envs,
                PopulationRuntime(
                    pop_size=training.pop_size,
                    seed=self.seed,
                    device=self.device,
                    total_steps=training.max_steps,
                    rollout_mode=training.rollout_mode,
                ),
            )
            if agent_states is not None:
                self._restore(population, agent_states, resume_state)
            kwargs = self.strategy.loop_kwargs(self.spec, self.manifest, envs, device=self.device)
        except BaseException:
            envs.close()
            raise
        context = RunContext(
            run_dir=run_dir,
            checkpoints=checkpoints if main else None,
            seed=self.seed,
            max_wall_seconds=training.max_wall_seconds,
            resume_state=resume_state,
            elapsed_before=resume_state.wall_seconds if resume_state else 0.0,
            training=training,
            on_evaluation=self.on_evaluation,
        )
        context.sinks = FanOut(
            self._sinks(run_dir, resume_state.wandb_id if resume_state else None)
            if run_dir is not None
            else []
        )
        wandb_ids = [s.run_id for s in context.sinks.sinks if isinstance(s, WandbSink)]
        context.wandb_id = wandb_ids[0] if wandb_ids else None
        context.progress = TrainingProgress(
            training.max_steps * training.pop_size,
            training.name or f"{self.spec.name} {getattr(self.manifest.environment, 'name', '')}",
            enabled=self.verbose and main,
            unit=self.strategy.step_unit,
            fitness_name=self.strategy.fitness_name,
        )
        left_out = self.data_report or {}
        if left_out.get("dropped_too_long") or left_out.get("truncated_to_fit"):
            context.progress.notice(
                f"{left_out.get('dropped_too_long', 0)} rows left out and "
                f"{left_out.get('truncated_to_fit', 0)} cut to fit "
                f"network.max_context_length (summary.json 'data'); raise it to keep them"
            )
        if training.hpo:
            tournament, mutation = self._evolution_operators(resume_state)
            kwargs.update(tournament=tournament, mutation=mutation)
            context.operators_provider = lambda: {
                "tournament": tournament.state_dict(),
                "mutation": mutation.state_dict(),
            }
        result: Any = None
        context.install_signal_handlers()
        try:
            result = loop(
                population,
                envs.env,
                env_factory=envs.factory,
                run=context,
                **kwargs,
            )
            if not isinstance(result, LoopResult):
                raise TypeError(
                    f"{getattr(loop, '__name__', loop)} returned {type(result).__name__}; "
                    "a training loop returns a LoopResult"
                )
        except FloatingPointError as exc:
            raise ConfigError(
                f"training diverged: {exc}. The last good checkpoint is kept in "
                f"{checkpoints.directory}; {divergence_hint(self.spec)} and resume"
            ) from None
        finally:
            context.restore_signal_handlers()
            envs.close()
            context.progress.close()
            context.sinks.close()
            finished = result if isinstance(result, LoopResult) else _failed(context)
            if _already_ended(finished, resume_state, self.run_dir):
                if self.verbose and main:
                    print(
                        f"{self.run_dir}: this run had already ended ({finished.status} at "
                        f"{self.strategy.step_unit[0]} {finished.total_steps:,}); nothing was "
                        "trained and its "
                        "summary.json is unchanged. Raise training.max_steps (or "
                        "training.target_score) to continue it.",
                        flush=True,
                    )
            elif run_dir is not None:
                self._write_summary(run_dir, finished, context)
        context.forward_stop_signal()
        return result

    def _restore(
        self,
        population: list[Any],
        agent_states: list[dict[str, Any]],
        resume_state: ResumeState | None,
    ) -> None:
        if len(agent_states) != len(population):
            raise ConfigError(
                f"checkpoint holds {len(agent_states)} agents but training.pop_size is "
                f"{len(population)}"
            )
        for agent, state in zip(population, agent_states, strict=True):
            agent.load_state_dict(state)
        if resume_state is not None and resume_state.rng is not None:
            set_rng_state(resume_state.rng)

    def _plot_labels(self) -> dict[str, str]:
        """Axis labels in the paradigm's units and the settings subtitle of the plot."""
        strategy = self.strategy
        steps = strategy.step_unit[1]
        if self.manifest.training.pop_size > 1:
            steps += " (population total)"
        fitness = strategy.fitness_name
        if fitness == "fitness":  # RL: the greedy evaluation return
            fitness = "evaluation return"
        return {
            "x_label": steps,
            "y_label": fitness,
            "subtitle": plot_settings(self.manifest, self.seed, strategy.evaluates_episodes),
        }

    def _write_summary(
        self, run_dir: RunDirectory, result: LoopResult, context: RunContext
    ) -> None:
        total = result.total_steps
        wall = context.elapsed()
        latest = context.checkpoints.latest_dir() if context.checkpoints else None
        record = {
            "name": self.manifest.training.name,
            "algorithm": self.spec.name,
            "env": getattr(self.manifest.environment, "name", None),
            "total_steps": total,
            "wall_seconds": round(wall, 3),
            "steps_per_second": round(total / wall, 1) if wall > 0 else None,
            "best_fitness": finite_or_none(result.best_fitness),
            "final_fitness": finite_or_none(result.final_fitness),
            "final_fitness_std": finite_or_none(result.final_fitness_std),
            "eval_episodes": result.eval_episodes,
            "solved_at_step": result.solved_at_step,
            "pop_size": self.manifest.training.pop_size,
            "seed": self.seed,
            "status": result.status,
            "data": getattr(self, "data_report", None),
            "checkpoint": str(latest) if latest else None,
            "run_dir": str(run_dir.path),
            "host": {
                "hostname": socket.gethostname(),
                "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            },
        }
        run_dir.write_summary(record)
        run_dir.plot_population()
        run_dir.plot_learning_curve(
            f"{self.spec.name} on {getattr(self.manifest.environment, 'name', '')}",
            self.manifest.training.target_score,
            **self._plot_labels(),
        )
        if self.verbose:
            print(
                render_run_end(
                    record,
                    max_steps=self.manifest.training.max_steps,
                    target=self.manifest.training.target_score,
                    unit=self.strategy.step_unit,
                    fitness_name=self.strategy.fitness_name,
                ),
                flush=True,
            )


def plot_settings(manifest: TrainingManifest, seed: int | None, evaluates_episodes: bool) -> str:
    """The settings that shape a learning curve, for its subtitle."""
    training, spec = manifest.training, manifest.algorithm
    parts = [f"seed {seed if seed is not None else 0}", f"population {training.pop_size}"]
    lr = getattr(spec, "lr", None)
    if lr is not None:
        parts.append(f"lr {lr:g}")
    if evaluates_episodes:
        episodes = training.eval_loop
        parts.append(f"{episodes} eval episode{'s' if episodes != 1 else ''}")
    num_envs = getattr(manifest.environment, "num_envs", None)
    if num_envs is not None and evaluates_episodes:
        parts.append(f"{num_envs} envs")
    return " · ".join(parts)


def seeded_manifest(
    manifest: TrainingManifest, seed: int | None
) -> tuple[TrainingManifest, int | None]:
    """The manifest and seed of a new run, agreeing where the algorithm has its own ``seed``.

    LLM specs carry ``seed`` (data order, sampling, adapter init). A run seed given
    explicitly (``seed=``, ``LocalTrainer(seed=...)``) sets it, so ``-m seed=0,1,2`` runs
    differ, and the written ``manifest.yaml`` records it; without one, the spec's seed is
    the run's.
    """
    algorithm = manifest.algorithm
    if "seed" not in type(algorithm).model_fields:
        return manifest, seed
    if seed is None or seed == algorithm.seed:
        return manifest, algorithm.seed
    data = manifest.to_dict()
    data["algorithm"]["seed"] = seed
    return TrainingManifest.from_dict(data), seed


def _already_ended(result: LoopResult, resume_state: ResumeState | None, run_dir: Path) -> bool:
    """A resumed run that trained nothing because it had ended (budget spent, target met)
    and whose ``summary.json`` already says so (a run killed after its last checkpoint but
    before its summary still gets one)."""
    if (
        resume_state is None
        or result.status not in FINAL_STATUSES
        or result.total_steps != resume_state.total_steps
    ):
        return False
    import json

    try:
        recorded = json.loads((Path(run_dir) / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return False
    return recorded in FINAL_STATUSES


def _failed(context: RunContext) -> LoopResult:
    """The result of a run that raised: its counters as of the last evaluation."""
    last = context.last_result
    if last is None:
        return LoopResult([], [], status="failed")
    return replace(last, status="failed")


def divergence_hint(spec: AlgorithmSpec) -> str:
    """What to lower after a divergence, naming only fields ``spec`` has."""
    fields = type(spec).model_fields
    rates = [f for f in ("lr", "lr_actor", "lr_critic") if f in fields]
    knobs = [f"algorithm.{f}" for f in rates]
    if "max_grad_norm" in fields:
        knobs.append("algorithm.max_grad_norm")
    return f"lower {' or '.join(knobs)}" if knobs else "lower the learning rate"
