"""The rollout loop: run directory, evaluation, exact resume, HPO, multi-turn envs, refusals."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.arena.models.training import TrainingSpec
from agilerl.builders.llm import LLMBuilder, population_on_one_base
from agilerl.launch.compose import split_config
from agilerl.llm.rollout_env import load_rollout_env
from agilerl.training.llm.train_llm_rollout import train_llm_rollout

pytestmark = pytest.mark.llm
REPO = Path(__file__).resolve().parents[2]


def test_loop_writes_rewards_samples_and_resumes_exactly(
    make_rollout_spec, digit_env, left_tokenizer, tmp_path: Path
) -> None:
    spec = make_rollout_spec("GRPO", group_size=4, batch_size=2, max_output_tokens=8)
    straight = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    result = train_llm_rollout(
        [straight],
        digit_env,
        training=TrainingSpec(max_steps=4, evaluation_interval=2),
        run_dir=tmp_path / "a",
    )
    assert result.status == "completed" and result.total_steps == 4
    rewards = list(csv.DictReader((tmp_path / "a" / "rewards.csv").open()))
    assert [int(r["step"]) for r in rewards] == [1, 2, 3, 4]
    metrics = list(csv.DictReader((tmp_path / "a" / "metrics.csv").open()))
    assert len(metrics) == 2 and {"mean_reward", "pass_rate", "fitness"} <= set(metrics[0])
    shown = (tmp_path / "a" / "samples" / "step_000004_agent_0.jsonl").read_text().splitlines()
    assert len(shown) == len(digit_env.test) and "completion" in json.loads(shown[0])

    first = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    part = train_llm_rollout(
        [first],
        digit_env,
        training=TrainingSpec(max_steps=4, evaluation_interval=2),
        run_dir=tmp_path / "b",
        stop_after=2,
    )
    assert part.status == "interrupted" and part.total_steps == 2
    second = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout(
        [second],
        digit_env,
        training=TrainingSpec(max_steps=4, evaluation_interval=2),
        run_dir=tmp_path / "b",
        resume=True,
    )
    resumed = list(csv.DictReader((tmp_path / "b" / "rewards.csv").open()))
    assert [r["reward"] for r in resumed] == [r["reward"] for r in rewards]
    a, b = straight.trainable_state(), second.trainable_state()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_stop_during_generation_drops_the_round_and_resumes_exactly(
    make_rollout_spec, digit_env, left_tokenizer, tmp_path: Path
) -> None:
    """The stop arrives while round 3 is generated: generation ends at the next token,
    nothing is learnt from the round, and the resumed run equals an uninterrupted one."""
    spec = make_rollout_spec("GRPO", group_size=4, batch_size=2, max_output_tokens=8)
    straight = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout(
        [straight], digit_env, training=TrainingSpec(max_steps=4), run_dir=tmp_path / "a"
    )
    rewards = list(csv.DictReader((tmp_path / "a" / "rewards.csv").open()))

    from agilerl.llm import generation

    original, calls = generation._generate_chunk, []

    def signalled(model, tokenizer, prompts, settings):  # the signal lands mid-generation
        calls.append(len(calls))
        if len(calls) == 3:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGTERM)
        return original(model, tokenizer, prompts, settings)

    from agilerl.training.llm.members import llm_run_context

    first = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    run = llm_run_context([first], None, tmp_path / "b", False)
    run.install_signal_handlers()  # as the trainer does: SIGTERM asks the loop to stop
    generation._generate_chunk = signalled
    try:
        part = train_llm_rollout([first], digit_env, training=TrainingSpec(max_steps=4), run=run)
    finally:
        generation._generate_chunk = original
        run.restore_signal_handlers()
    assert part.status == "interrupted" and part.total_steps == 2  # round 3 was dropped
    assert len(list(csv.DictReader((tmp_path / "b" / "rewards.csv").open()))) == 2
    second = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout(
        [second], digit_env, training=TrainingSpec(max_steps=4), run_dir=tmp_path / "b", resume=True
    )
    resumed = list(csv.DictReader((tmp_path / "b" / "rewards.csv").open()))
    assert [r["reward"] for r in resumed] == [r["reward"] for r in rewards]
    a, b = straight.trainable_state(), second.trainable_state()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_hpo_evolves_lr_beta_and_group_size(make_rollout_spec, digit_env, left_tokenizer) -> None:
    spec = make_rollout_spec("GRPO", group_size=4, batch_size=2, max_output_tokens=4, beta=0.001)
    population = population_on_one_base(spec, left_tokenizer, 3)
    train_llm_rollout(
        population,
        digit_env,
        training=TrainingSpec(max_steps=4, evaluation_interval=1),
        **_operators(spec, 3, 1.0),
    )
    seen = {(a.spec.lr, a.spec.beta, a.spec.group_size) for a in population}
    assert len(seen) > 1
    assert all(isinstance(a.spec.group_size, int) and a.spec.group_size >= 2 for a in population)


def _operators(spec, size: int, rl_hp_mut: float) -> dict[str, Any]:
    """The trainer's evolution operators for a manifest whose mutations are only rl_hp/no_mut."""
    from agilerl.arena.models.hpo import MutationSpec
    from agilerl.hpo import Mutations, TournamentSelection

    weights = {"no_mut": 1.0 - rl_hp_mut, "arch_mut": 0.0, "params_mut": 0.0}
    mutation = MutationSpec(probabilities={**weights, "rl_hp_mut": rl_hp_mut})
    return {
        "tournament": TournamentSelection(2, True, size, rng=np.random.default_rng(0)),
        "mutation": Mutations.from_spec(mutation, spec, rng_seed=1),
    }


def test_a_grpo_population_on_no_mut_changes_no_hyperparameter(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    """mutation.probabilities all on no_mut: the loop evolves (copies winners), mutates nothing."""
    spec = make_rollout_spec("GRPO", group_size=4, batch_size=2, max_output_tokens=4, beta=0.001)
    population = population_on_one_base(spec, left_tokenizer, 3)
    train_llm_rollout(
        population,
        digit_env,
        training=TrainingSpec(max_steps=3, evaluation_interval=1),
        **_operators(spec, 3, 0.0),
    )
    assert all(agent.spec == spec for agent in population)


def test_a_multi_turn_entrypoint_env_appends_observations(
    make_rollout_spec, left_tokenizer, monkeypatch
) -> None:
    from agilerl.arena.models.env import LLMEnvSpec

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    env_spec = LLMEnvSpec(
        env_type="rollout",
        entrypoint="multiturn_env:GuessTwice",
        env_config={"bonus": 1.0},
        max_turns=2,
    )
    with pytest.raises(ConfigError, match="trust_code"):
        load_rollout_env(env_spec, left_tokenizer, max_model_len=256)
    env = load_rollout_env(env_spec, left_tokenizer, max_model_len=256, trust_code=True)
    agent = LLMBuilder.build(
        make_rollout_spec("GRPO", group_size=2, max_output_tokens=6), tokenizer=left_tokenizer
    )
    samples = agent.rollout(env, env.batch(0, 2, 0))
    assert len(samples) == 4 and all(s.reward >= 1.0 for s in samples)  # two turns, bonus at end
    text = left_tokenizer.decode(samples[0].ids)
    assert "Again, another number." in text
    # Generated tokens come in two runs: the observation between them is not an action.
    mask = samples[0].action_mask
    runs = sum(1 for i in range(1, len(mask)) if mask[i] and not mask[i - 1])
    assert runs == 2
    assert torch.isfinite(torch.tensor(agent.learn(samples)["loss"]))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            ["training.rollout_mode=async", "training.rollout_engines_per_agent=1"],
            r"training.rollout_mode=async runs vLLM engines .* algorithm.use_vllm=true",
        ),
        (
            ["algorithm.use_vllm=true", "training.rollout_version_stamp=publish"],
            r"training.rollout_version_stamp=publish: .* stamp the same",
        ),
        (
            ["training.env_resource_ratio=0.5"],
            r"training.env_resource_ratio: only asynchronous rollout engines read it",
        ),
        (
            ["training.rollout_batch_size=2", "training.rollout_engines_per_agent=1"],
            r"training.rollout_batch_size, training.rollout_engines_per_agent: only async",
        ),
        (["training.weight_sync_interval=2"], r"training.weight_sync_interval: only vLLM"),
        (
            ["+algorithm.vllm_config={gpu_memory_utilization: 0.5}"],
            r"algorithm.vllm_config: only vLLM .* algorithm.use_vllm=true",
        ),
        (
            ["algorithm.use_vllm=true", "network.lora_config=null"],
            r"set network.lora_config",
        ),
        (
            ["algorithm.use_vllm=true", "+network.lora_config.modules_to_save=[lm_head]"],
            r"network.lora_config.modules_to_save=\['lm_head'\]: vLLM serves LoRA",
        ),
        (
            ["algorithm.use_vllm=true", "training.weight_sync_backend=nccl"],
            r"training.weight_sync_backend=nccl needs full-weight syncing",
        ),
        (
            [
                "algorithm.use_vllm=true",
                "+algorithm.vllm_config={sleep_mode: true, sleep_mode_level: 2}",
            ],
            r"algorithm.vllm_config.sleep_mode_level=2 discards the base weights",
        ),
        (
            [
                "algorithm.use_vllm=true",
                "+algorithm.vllm_config={sleep_mode: true}",
                "training.rollout_mode=async",
                "training.rollout_engines_per_agent=1",
            ],
            r"asynchronous engines .* never sleep",
        ),
    ],
)
def test_rollout_engine_settings_that_cannot_act_are_refused(
    compose, tiny_model_dir, overrides: list[str], match: str
) -> None:
    from agilerl.strategies.llm import check_rollout_engine

    cfg = compose(
        "experiment=grpo_countdown",
        f"network.pretrained_model_name_or_path={tiny_model_dir}",
        *overrides,
    )
    manifest = TrainingManifest.from_dict(split_config(cfg)[0])
    # local=False: the refusals that hold on any machine (vLLM itself need not be installed)
    with pytest.raises(ConfigError, match=match):
        check_rollout_engine(manifest.algorithm, manifest.training, local=False)


def test_use_vllm_without_vllm_installed_names_the_install(compose, tiny_model_dir) -> None:
    from agilerl.strategies.llm import check_rollout_engine

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    cfg = compose(
        "experiment=grpo_countdown",
        f"network.pretrained_model_name_or_path={tiny_model_dir}",
        "algorithm.use_vllm=true",
    )
    manifest = TrainingManifest.from_dict(split_config(cfg)[0])
    with pytest.raises(ConfigError, match=r"use_vllm=true needs vLLM: bash scripts/install_vllm"):
        check_rollout_engine(manifest.algorithm, manifest.training)


def test_countdown_env_loads_without_code(left_tokenizer) -> None:
    from agilerl.arena.models.env import LLMEnvSpec

    env_spec = LLMEnvSpec(
        env_type="rollout",
        dataset="data/countdown.jsonl",
        reward="countdown",
        prompt_template={"user_0": "Using {nums}, make {target}."},
    )
    env = load_rollout_env(env_spec, left_tokenizer, max_model_len=128, base_dir=REPO)
    assert len(env.train) == 180 and len(env.test) == 20
    episode = env.make_episode(env.test[0])
    assert episode.step(f"<answer>{env.test[0]['solution']}</answer>")[1] == 1.0
    assert episode.step("<answer>__import__('os')</answer>")[1] == 0.0


@pytest.mark.parametrize(("mode", "expected"), [("colocated", True), ("async", False)])
def test_the_rollout_mode_reaches_the_builder(tiny_model_dir, mode: str, expected: bool) -> None:
    """``training.rollout_mode`` reaches ``LLMBuilder.build`` through the strategy: a colocated
    vLLM engine without a ``vllm_config`` gets the colocated defaults (sleeping through updates
    on CUDA); asynchronous engines, on devices of their own, do not."""
    from agilerl.arena.models.algorithms import GRPOSpec
    from agilerl.builders.llm import COLOCATED_VLLM_DEFAULTS, LLMBuilder
    from agilerl.llm.model import load_tokenizer
    from agilerl.strategies import PopulationRuntime, select_strategy
    from agilerl.strategies.base import EnvSetup

    spec = GRPOSpec(
        pretrained_model_name_or_path=str(tiny_model_dir),
        lora_config={"lora_r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]},
        group_size=2,
        use_vllm=True,
        gradient_checkpointing=False,
    )
    envs = EnvSetup(None, None, load_tokenizer(tiny_model_dir), None)
    runtime = PopulationRuntime(pop_size=2, seed=0, device="cpu", total_steps=1, rollout_mode=mode)
    population = select_strategy(spec).build_population(spec, LLMBuilder, envs, runtime)
    configs = [agent.spec.vllm_config for agent in population]
    if expected:
        wanted = set(COLOCATED_VLLM_DEFAULTS)
        assert [c.model_dump(include=wanted) for c in configs] == [COLOCATED_VLLM_DEFAULTS] * 2
    else:
        assert configs == [None, None]
