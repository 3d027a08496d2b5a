"""The rollout LLM loop (GRPO, LLM REINFORCE, LLM PPO) on the population engine.

One loop for every rollout regime; single-turn reasoning is ``max_turns=1``.
A *step* is one round: ``batch_size`` prompts, ``group_size`` episodes each,
one :meth:`learn` call (GRPO's dynamic sampling may first generate extra
rounds of other prompts to replace groups that all scored alike). Every
``evaluation_interval`` rounds each member completes the held-out prompts
greedily (``eval_greedy``) and reports the mean reward and pass rate (reward
at least ``max_reward``); the mean reward is its fitness. Evolution,
checkpoints and ``metrics.csv`` are the engine's
(:func:`~agilerl.training.engine.run_population`). The run directory also
gets ``rewards.csv`` (the training reward of every member's every round) and
``samples/step_<n>_agent_<i>.jsonl`` (held-out completions of each evaluation).

A member's prompts follow from its round count, and every checkpoint holds
each member's trainable tensors, optimizer state and the RNG states, so a
resumed run generates and learns exactly as the uninterrupted one would have.

Under ``torchrun`` (a process group is initialised, see
:mod:`agilerl.llm.distributed`) one agent trains data-parallel: each process
rolls out its share of every batch and of the held-out prompts (seeded by
rank), updates are combined across processes, the processes agree on when
to stop, and only rank 0 writes the run directory. An FSDP-sharded agent's
state is gathered whole for rank 0's checkpoints, in the same format as a
one-process run's (``agent_0.pt``; the ``adapter_<i>`` export folders are
not written for a sharded agent).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from agilerl.arena.models.errors import RunFailure
from agilerl.arena.models.training import CheckpointExportSpec, TrainingSpec
from agilerl.llm import distributed
from agilerl.llm.generation import stop_generation_when
from agilerl.llm.rollout import Sample, collect
from agilerl.llm.rollout_env import RolloutEnv
from agilerl.logging.run_dir import CsvTable
from agilerl.training.checkpointing import rng_state, set_rng_state
from agilerl.training.engine import run_population
from agilerl.training.llm.members import EVALUATION_INTERVAL, LLMMembers, llm_run_context
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.results import LoopResult, mean_metrics
from agilerl.training.run_context import RunContext

NO_SIGNAL_ROUNDS = 5
"""Rounds in a row without reward variance in any group before the run says so."""
REFILL_SEED_STRIDE = 1_000_003
"""Seed offset of each extra prompt stream of dynamic sampling (GRPO's
``dynamic_sampling_max_rounds``): extra round ``k`` of round ``r`` takes the ``r``-th
batch of the order seeded ``seed + k * REFILL_SEED_STRIDE``."""


def evaluate_agent(
    agent: Any, env: RolloutEnv, rows: list[dict[str, Any]], *, greedy: bool = True
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Mean reward and pass rate of one completion per held-out row.

    Returns:
        ``(metrics, samples)``: the metrics and one ``{prompt, completion, reward}`` per row.
    """
    samples = agent.rollout(env, rows, greedy=greedy, group_size=1)
    rewards = [s.reward for s in samples]
    passed = [r >= env.max_reward - 1e-9 for r in rewards]
    metrics = {
        "mean_reward": sum(rewards) / len(rewards),
        "pass_rate": sum(passed) / len(passed),
        "completion_tokens": sum(s.num_actions for s in samples) / len(samples),
    }
    shown = [
        {"row": dict(row), "completion": s.text, "reward": s.reward}
        for row, s in zip(rows, samples, strict=True)
    ]
    return metrics, shown


class RolloutMembers(LLMMembers):
    """GRPO/REINFORCE/LLM PPO members: roll out a round of prompts, then learn from it.

    Args:
        env: The rollout env (train and held-out rows).
        held_out: This process's share of the held-out rows.
        batch_size: Prompts per round (the population's first member's).
        seed: Seed of the prompt order.
        greedy: Greedy decoding for evaluation.
        run_dir: Where ``rewards.csv`` and ``samples/`` go (``None``: nowhere).
        export: Exports beside each checkpoint.
        stop_after: See :class:`LLMMembers`.
        weight_sync_interval: Sampling rounds a member's vLLM engine may serve one
            version of its adapter (see :meth:`VLLMGenerator.serve`); HF ``generate``
            always uses the live weights.
    """

    def __init__(
        self,
        env: RolloutEnv,
        held_out: list[dict[str, Any]],
        *,
        batch_size: int,
        seed: int,
        greedy: bool,
        run_dir: Path | None,
        export: CheckpointExportSpec | None,
        stop_after: int | None,
        weight_sync_interval: int = 1,
    ) -> None:
        super().__init__(export, stop_after)
        self.env, self.held_out, self.batch_size, self.seed = env, held_out, batch_size, seed
        self.greedy, self.run_dir = greedy, run_dir
        self.weight_sync_interval = weight_sync_interval
        self.generators: list[Any] = []
        """The population's vLLM engines, stopped when the run ends."""
        self.asynchronous = False
        """Generate the next round while learning (engines in processes of their own)."""
        self.pending: dict[int, _Ahead] = {}
        """Slot -> a round generated (or owed) ahead of a stop or an engine failure."""
        self.stopped_early: set[int] = set()
        """Slots whose last :meth:`train` stopped before the evaluation (a stop, a failure)."""
        self.served: dict[int, dict[str, Any]] = {}
        """Slot -> the adapter a resumed member is served (see :meth:`state_dict`)."""
        self.rewards = CsvTable(run_dir / "rewards.csv") if run_dir is not None else None
        self.flat_rounds: dict[int, int] = {}
        """Slot -> rounds in a row whose groups all scored alike (see :meth:`watch_signal`)."""

    def forget_rounds_after(self, population: list[Any]) -> None:
        """Drop ``rewards.csv`` rows of rounds past each member's checkpointed count."""
        if self.rewards is None or not self.rewards.rows:
            return
        done = {slot: agent.batches for slot, agent in enumerate(population)}
        self.rewards.keep(lambda row: int(row["step"]) <= done.get(int(row["agent"]), -1))

    def train(self, slot: int, agent: Any, until: int, loop: PopulationLoop) -> dict[str, Any]:
        """Roll out and learn round after round until ``until`` rounds (or a stop).

        With asynchronous engines the next round of the generation is generated
        in a background thread while this one is learnt from (see
        :mod:`agilerl.llm.async_engines`); a stop keeps the prefetched round for
        the checkpoint, and an engine failure the round it owed. With HF
        ``generate``, a stop signal ends the round's generation at the next token and
        the round is dropped (so a checkpoint waits for one decoding step, not a round).
        """
        stats = []
        agent.weight_sync_interval = self.weight_sync_interval
        if slot in self.served:
            agent.generator.restore_served(agent, self.served.pop(slot))
        self.stopped_early.discard(slot)
        ahead: _Ahead | None = self.pending.pop(slot, None)
        if ahead is not None:
            ahead.slot, ahead.agent = slot, agent
        while agent.batches < until and not self.stopping(loop):
            round_ = agent.batches
            started = time.perf_counter()
            if not self.asynchronous:
                before = rng_state() if agent.generator is None else None
                with stop_generation_when(lambda: loop.run.stop_requested is not None):
                    samples, version = self.generate(slot, agent, round_)
                if before is not None and self.stopping(loop):
                    # A stop during generation drops the round: nothing was learnt from it,
                    # and with the RNG as it was, a resumed run generates it again exactly.
                    set_rng_state(before)
                    break
            else:
                if ahead is None or ahead.round != round_:
                    ahead = _Ahead.settle(self, slot, agent, round_)
                samples, version = self.await_round(slot, ahead)
            rolled = time.perf_counter()
            ahead = None
            if self.asynchronous and round_ + 1 < until:
                ahead = _Ahead.settle(self, slot, agent, round_ + 1).start()
            record = self.learn(agent, samples, version, rolled - started)
            self.watch_signal(slot, agent, record, loop)
            stats.append(record)
            loop.advance(1)
            if self.rewards is not None:
                self.rewards.append([{"step": agent.batches, "agent": slot, **record}])
            loop.run.sinks.log(
                {f"agent_{agent.index}/train_{k}": float(v) for k, v in record.items()},
                loop.total_steps,
            )
        if agent.batches < until:
            self.stopped_early.add(slot)
        if ahead is not None:
            self.await_round(slot, ahead)  # finished, so a checkpoint now carries it
            self.pending[slot] = ahead
        return {f"train_{k}": v for k, v in mean_metrics(stats).items()}

    def watch_signal(
        self, slot: int, agent: Any, record: dict[str, float], loop: PopulationLoop
    ) -> None:
        """Warn (once per member) after :data:`NO_SIGNAL_ROUNDS` rounds in a row in which
        every group's completions scored alike: their advantages are all zero, so nothing
        is learnt."""
        if record.get("frac_reward_zero_std", 0.0) < 1.0:
            self.flat_rounds[slot] = 0
            return
        self.flat_rounds[slot] = self.flat_rounds.get(slot, 0) + 1
        if self.flat_rounds[slot] == NO_SIGNAL_ROUNDS and loop.run.progress is not None:
            loop.run.progress.notice(
                f"agent {agent.index}: for {NO_SIGNAL_ROUNDS} rounds every group's completions "
                f"scored the same (reward {record.get('reward', float('nan')):.3g}, "
                "frac_reward_zero_std 1.0), so no update learns anything. Give the reward "
                "partial credit, raise algorithm.group_size or algorithm.temperature, or start "
                "from a model that solves some prompts (experiment=grpo_digits learns from "
                "scratch)"
            )

    def await_round(self, slot: int, ahead: _Ahead) -> tuple[list[Sample], int]:
        """``ahead``'s samples; if its engine failed, the round is kept as owed (a resumed
        run generates it with the same adapter) and the failure passed on."""
        try:
            return ahead.result()
        except RunFailure:
            self.pending[slot] = ahead.owed()
            self.stopped_early.add(slot)
            raise

    def rows(self, round_: int, extra: int = 0) -> list[dict[str, Any]]:
        """This process's prompts of round ``round_`` (``extra`` > 0: of that extra round of
        dynamic sampling, from a prompt order of its own)."""
        seed = self.seed + extra * REFILL_SEED_STRIDE
        return distributed.shard(self.env.batch(round_, self.batch_size, seed))

    def generate(self, slot: int, agent: Any, round_: int) -> tuple[list[Sample], int | None]:
        """Round ``round_``'s samples and the weight version that generated them (colocated:
        :meth:`rollout`, which publishes a due adapter; dynamic sampling may add rounds)."""
        samples = agent.rollout(self.env, self.rows(round_))
        samples = agent.fill_groups(
            samples, lambda k: agent.rollout(self.env, self.rows(round_, k))
        )
        generator = agent.generator
        return samples, None if generator is None else generator.versions.get(slot, 0)

    def collect(self, slot: int, agent: Any, round_: int) -> list[Sample]:
        """Generate round ``round_`` with the served adapter (thread-safe: no model use)."""
        generator = agent.generator
        generator.begin(slot, round_)

        def play(extra: int) -> list[Sample]:
            return collect(
                agent.actor, agent.tokenizer, self.env, self.rows(round_, extra),
                group_size=agent.group_size, settings=agent.sampling(), generator=generator,
            )  # fmt: skip

        return agent.fill_groups(play(0), play)

    def learn(
        self, agent: Any, samples: list[Sample], version: int | None, rollout_seconds: float
    ) -> dict[str, float]:
        """Learn from one round's samples; the update's metrics with timings.

        Besides the update's metrics: seconds spent waiting for the rollout
        (``rollout_seconds``: all of the generation when colocated, what was not
        overlapped with the previous update when asynchronous) and learning
        (``learn_seconds``), generated tokens per second of waiting, and with
        vLLM the weight version that generated the samples and its staleness
        (optimizer steps behind the live weights when the update starts).
        """
        extra: dict[str, float] = {}
        if version is not None:
            extra = {
                "weight_version": float(version),
                "staleness": float(agent.num_updates - version),
            }
        if self.asynchronous:
            agent.prepare_rollout(samples)
        started = time.perf_counter()
        metrics = agent.learn(samples)
        tokens = sum(s.num_actions for s in samples)
        return {
            **metrics,
            **extra,
            "rollout_seconds": rollout_seconds,
            "learn_seconds": time.perf_counter() - started,
            "tokens_per_second": tokens / max(rollout_seconds, 1e-9),
        }

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint mid-generation needs to resume exactly, as plain data: rounds
        generated (or owed) ahead of a stop, and the adapters members that stopped early
        were served (they may lag the live weights: a resumed member samples with them
        until its next sync)."""
        served = {}
        for generator in self.generators:
            for slot in self.stopped_early & set(generator.adapters):
                served[slot] = generator.served_state(slot)
        return {
            "pending": {slot: ahead.state() for slot, ahead in self.pending.items()},
            "served": served,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (applied as each member resumes training)."""
        self.pending = {
            int(slot): _Ahead.restore(self, item) for slot, item in state.get("pending", {}).items()
        }
        self.served = {int(slot): item for slot, item in state.get("served", {}).items()}

    def evaluate(self, population: list[Any], generation: int) -> list[tuple[float, dict]]:
        """Each member's held-out mean reward (its fitness) and pass rate; samples to disk."""
        scored = []
        for slot, agent in enumerate(population):
            metrics, shown = evaluate_agent(agent, self.env, self.held_out, greedy=self.greedy)
            metrics = distributed.reduce_metrics(metrics, ())
            agent.fitness.append(metrics["mean_reward"])
            scored.append((metrics["mean_reward"], metrics))
            if self.run_dir is not None:
                where = self.run_dir / "samples" / f"step_{agent.batches:06d}_agent_{slot}.jsonl"
                where.parent.mkdir(parents=True, exist_ok=True)
                where.write_text("".join(json.dumps(r, default=str) + "\n" for r in shown))
        return scored

    def exports(self, population: list[Any]) -> bool:
        """Adapter folders need whole tensors; a sharded agent's ``agent_0.pt`` holds them."""
        return not distributed.is_sharded(population[0].actor)

    def close(self) -> None:
        """Stop the population's vLLM engine, if it has one."""
        for generator in self.generators:
            generator.close()


class _Ahead:
    """One round of an asynchronous run: its served version is settled on the trainer's
    thread, its generation may run in a background thread while the previous round is
    learnt from.

    Args:
        members: The members (their :meth:`RolloutMembers.collect` generates).
        slot: The member's slot.
        agent: The member.
        round_: The round.
        version: Weight version (optimizer steps) of the adapter that generates it.
    """

    def __init__(
        self, members: RolloutMembers | None, slot: int, agent: Any, round_: int, version: int
    ) -> None:
        self.members, self.slot, self.agent = members, slot, agent
        self.round, self.version = round_, version
        self._samples: list[Sample] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def settle(cls, members: RolloutMembers, slot: int, agent: Any, round_: int) -> _Ahead:
        """Publish the adapter if due (:meth:`VLLMGenerator.serve`): ``round_``'s version."""
        agent.generator.serve(agent)
        return cls(members, slot, agent, round_, agent.generator.versions[int(agent.index)])

    def _generate(self) -> None:
        try:
            self._samples = self.members.collect(self.slot, self.agent, self.round)
        except BaseException as exc:  # re-raised on the trainer's thread
            self._error = exc

    def start(self) -> _Ahead:
        """Generate in a background thread."""
        self._thread = threading.Thread(
            target=self._generate, name=f"rollout-{self.slot}-{self.round}"
        )
        self._thread.start()
        return self

    def result(self) -> tuple[list[Sample], int]:
        """The round's samples (generated now if not started) and their weight version."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        elif self._samples is None and self._error is None:
            self._generate()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        assert self._samples is not None
        return self._samples, self.version

    def owed(self) -> _Ahead:
        """This round, not generated: a resumed run generates it with the same adapter."""
        self._samples, self._error, self._thread = None, None, None
        return self

    def state(self) -> dict[str, Any]:
        """Plain data for a checkpoint (samples ``None``: owed)."""
        samples = None if self._samples is None else [asdict(s) for s in self._samples]
        return {"round": self.round, "version": self.version, "samples": samples}

    @classmethod
    def restore(cls, members: RolloutMembers, state: dict[str, Any]) -> _Ahead:
        """:meth:`state` again; an owed round generates when its member resumes."""
        ahead = cls(members, -1, None, int(state["round"]), int(state["version"]))
        if state["samples"] is not None:
            ahead._samples = [Sample(**s) for s in state["samples"]]
        return ahead


EVAL_ROWS = 32
"""Held-out rows per evaluation when ``training.eval_samples_per_task`` is 0."""


@dataclass(frozen=True)
class EngineLayout:
    """The rollout engines of ``rollout_mode: async``, resolved from the training spec.

    Attributes:
        engines: Engine processes (the population's members train one after another
            and share them).
        threads: OpenMP threads per engine process (CPU; ``None``: the engine's default).
    """

    engines: int = 1
    threads: int | None = None


def train_llm_rollout(
    population: list[Any],
    env: RolloutEnv,
    *,
    training: TrainingSpec,
    max_reward: float | None = None,
    engine_layout: EngineLayout | None = None,
    tournament: Any = None,
    mutation: Any = None,
    run: RunContext | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
    stop_after: int | None = None,
    env_factory: Any = None,
) -> LoopResult:
    """Fine-tune a population of rollout agents (GRPO, LLM REINFORCE, LLM PPO).

    Read from ``training``: ``max_steps`` (rounds per agent), ``evaluation_interval``
    (rounds between held-out evaluations, and one at the end; 10 when unset),
    ``checkpoint_steps`` (population rounds between checkpoints, at the first
    evaluation past each multiple; ``None``: after every evaluation),
    ``checkpoint_export``, ``evo_steps`` (rounds between evolutions; ``None``: every
    evaluation), ``eval_samples_per_task`` (held-out rows per evaluation;
    :data:`EVAL_ROWS` when 0), ``eval_greedy``, ``weight_sync_interval`` (rounds
    between weight syncs to a vLLM engine; ``None``: every round),
    ``reuse_prefix_cache_across_syncs`` (faster prefills, but a resumed run samples
    differently), ``rollout_mode`` (``async``: engines in processes of their own,
    :mod:`agilerl.llm.async_engines`, generate the next round while this one is
    learnt from; needs vLLM) and ``rollout_batch_size`` (prompt groups per engine
    request; default: a round split evenly over the engines).

    Args:
        population: Agents (:class:`~agilerl.algorithms.llm_rollout.RolloutLLMAlgorithm`).
        env: The rollout env (train and held-out rows).
        training: The validated training spec.
        max_reward: A completion scoring at least this passes (default: the env's).
        engine_layout: The async rollout engines (default: one engine, or
            ``training.rollout_engines_per_agent`` when it is a number).
        tournament: Selection operator (evolutionary HPO; ``None``: no evolution).
        mutation: Mutation operator, used with ``tournament``.
        run: Run context from the trainer; otherwise one is made for ``run_dir``.
        run_dir: Run directory for metrics and checkpoints when called directly.
        resume: Continue from the newest checkpoint in ``run_dir``.
        stop_after: Stop (as if interrupted, after a checkpoint) once the
            population has taken this many rounds; for tests and preemption drills.
        env_factory: The trainer's env factory; unused (the env holds every split).

    Returns:
        The loop's result (unpacks as ``population, fitnesses``).

    Raises:
        ValueError: If a multi-process run is given more than one agent.
    """
    del env_factory
    if max_reward is not None:
        env.max_reward = float(max_reward)
    context = llm_run_context(population, run, run_dir, resume)
    context.training = training
    rank, world = distributed.rank(), distributed.world_size()
    spec = population[0].spec
    if world > 1:
        if len(population) != 1:
            raise ValueError("data-parallel training runs one agent (pop_size 1)")
        if rank > 0:  # reads the resume state like rank 0, writes nothing
            context.run_dir, context.checkpoints = None, None
        context.stop_agreement = lambda local: distributed.global_sum(float(local)) > 0
        # each process samples its own completions
        torch.manual_seed(spec.seed * 1009 + rank + 100_003 * population[0].batches)
    eval_rows = training.eval_samples_per_task or EVAL_ROWS
    held_out = env.test[:eval_rows]
    held_out = distributed.shard(held_out[: len(held_out) - len(held_out) % world])
    members = RolloutMembers(
        env, held_out, batch_size=spec.batch_size, seed=spec.seed, greedy=training.eval_greedy,
        run_dir=context.run_dir.path if context.run_dir is not None else None,
        export=training.checkpoint_export, stop_after=stop_after,
        weight_sync_interval=training.weight_sync_interval or 1,
    )  # fmt: skip
    if training.rollout_mode == "async":
        from agilerl.llm.async_engines import AsyncVLLMGenerator

        if any(a.generator is None for a in population):
            raise ValueError("rollout_mode async generates with vLLM: set use_vllm")
        layout = engine_layout or _default_layout(training)
        batch = training.rollout_batch_size
        engine = AsyncVLLMGenerator(
            spec,
            engines=layout.engines,
            chunk=batch * population[0].group_size if batch else None,
            threads=layout.threads,
            export_dir=spec.vllm_lora_export_dir,
        )
        for agent in population:
            agent.generator.close()  # the colocated engine never started
            agent.generator = engine
        members.asynchronous = True
    engines = {id(a.generator): a.generator for a in population if a.generator is not None}
    members.generators = list(engines.values())
    for engine in members.generators:
        engine.reuse_prefix_cache = training.reuse_prefix_cache_across_syncs
    members.forget_rounds_after(population)
    return run_population(
        population, members, context, training,
        evaluate_every=training.evaluation_interval or EVALUATION_INTERVAL,
        evolve_every=training.evo_steps, tournament=tournament, mutation=mutation,
        label=f"{spec.name} rollout",
    )  # fmt: skip


def _default_layout(training: TrainingSpec) -> EngineLayout:
    engines = training.rollout_engines_per_agent
    return EngineLayout(engines=engines if isinstance(engines, int) and engines > 0 else 1)
