"""Strategies: dispatch on paradigm flags, loops per paradigm, trainer kwargs."""

from __future__ import annotations

import inspect
from typing import ClassVar

import pytest

from agilerl.arena.models import (
    MANIFEST_REGISTRY,
    DQNSpec,
    GymEnvSpec,
    LLMAlgorithmSpec,
    LLMEnvSpec,
    PettingZooEnvSpec,
    PPOSpec,
    TrainingSpec,
)
from agilerl.strategies import (
    BanditStrategy,
    LLMDatasetStrategy,
    LLMRolloutStrategy,
    MultiAgentOffPolicyStrategy,
    MultiAgentOnPolicyStrategy,
    OfflineStrategy,
    SingleAgentOffPolicyStrategy,
    SingleAgentOnPolicyStrategy,
    TrainingStrategy,
    select_strategy,
)

EXPECTED = {
    "PPO": SingleAgentOnPolicyStrategy,
    "RecurrentPPO": SingleAgentOnPolicyStrategy,
    "DQN": SingleAgentOffPolicyStrategy,
    "RainbowDQN": SingleAgentOffPolicyStrategy,
    "DDPG": SingleAgentOffPolicyStrategy,
    "TD3": SingleAgentOffPolicyStrategy,
    "CQN": OfflineStrategy,
    "NeuralTS": BanditStrategy,
    "NeuralUCB": BanditStrategy,
    "IPPO": MultiAgentOnPolicyStrategy,
    "MADDPG": MultiAgentOffPolicyStrategy,
    "MATD3": MultiAgentOffPolicyStrategy,
    "GRPO": LLMRolloutStrategy,
    "GSPO": LLMRolloutStrategy,
    "CISPO": LLMRolloutStrategy,
    "LLMPPO": LLMRolloutStrategy,
    "LLMREINFORCE": LLMRolloutStrategy,
    "DPO": LLMDatasetStrategy,
    "SFT": LLMDatasetStrategy,
}
LOOPS = {
    SingleAgentOnPolicyStrategy: "train_on_policy_population",
    SingleAgentOffPolicyStrategy: "train_off_policy_population",
    OfflineStrategy: "train_offline",
    BanditStrategy: "train_bandits",
    MultiAgentOnPolicyStrategy: "train_multi_agent_on_policy",
    MultiAgentOffPolicyStrategy: "train_multi_agent_off_policy",
    LLMRolloutStrategy: "train_llm_rollout",
    LLMDatasetStrategy: "train_llm_dataset",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_registered_spec_has_its_strategy_and_loop(name: str) -> None:
    strategy = select_strategy(MANIFEST_REGISTRY.get(name).model_construct())
    assert type(strategy) is EXPECTED[name]
    loop = strategy.get_training_loop(MANIFEST_REGISTRY.get(name).model_construct())
    assert loop.__name__ == LOOPS[type(strategy)] == strategy.loop_name
    # the loop takes the trainer's call: population, env and these keywords; the training
    # spec whole, never its settings flattened
    params = inspect.signature(loop).parameters
    assert list(params)[:2] == ["population", "env"]
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), name
    for keyword in ("training", "env_factory", "run", "tournament", "mutation"):
        assert keyword in params, (name, keyword)
    assert not set(params) & set(TrainingSpec.model_fields), (name, set(params))


def test_on_policy_loop_resolves_to_a_function() -> None:
    from agilerl.training.population_loops import train_on_policy_population

    loop = select_strategy(PPOSpec()).get_training_loop(PPOSpec())
    assert loop is train_on_policy_population


def test_flag_override_in_a_subclass_moves_strategy() -> None:
    class OffPPOSpec(PPOSpec):
        off_policy: ClassVar[bool] = True

    class MyDQNSpec(DQNSpec):
        pass

    assert isinstance(select_strategy(OffPPOSpec()), SingleAgentOffPolicyStrategy)
    assert isinstance(select_strategy(MyDQNSpec()), SingleAgentOffPolicyStrategy)


def test_errors() -> None:
    with pytest.raises(TypeError):
        select_strategy(object())
    with pytest.raises(KeyError, match="No training strategy"):
        select_strategy(LLMAlgorithmSpec())

    class Loopless(TrainingStrategy):
        def get_trainer_kwargs(self, spec, **kwargs):
            return {}

    with pytest.raises(NotImplementedError, match="default_loop"):
        Loopless().get_training_loop(PPOSpec())


def test_trainer_kwargs_per_paradigm() -> None:
    """The loops take the training spec whole, plus only what the spec does not hold."""
    env = GymEnvSpec(name="CartPole-v1")
    training = TrainingSpec(target_score=475, eval_loop=3)
    on = select_strategy(PPOSpec()).get_trainer_kwargs(PPOSpec(), training=training, env_spec=env)
    assert on == {"training": training, "env_name": "CartPole-v1", "algo": "PPO"}
    off = select_strategy(DQNSpec()).get_trainer_kwargs(
        DQNSpec(), training=training, env_spec=env, memory="mem"
    )
    assert off["training"] is training and off["memory"] == "mem" and "n_step_memory" not in off
    with_n_step = select_strategy(DQNSpec()).get_trainer_kwargs(
        DQNSpec(), training=TrainingSpec(eps_start=1.0), env_spec=env, n_step_memory="n"
    )
    assert with_n_step["n_step_memory"] == "n" and with_n_step["training"].eps_start == 1.0
    bandit = MANIFEST_REGISTRY.create("NeuralUCB")
    kwargs = select_strategy(bandit).get_trainer_kwargs(
        bandit, training=TrainingSpec(), env_spec=env, memory="mem"
    )
    assert set(kwargs) == {"training", "env_name", "algo", "memory"}
    maddpg = MANIFEST_REGISTRY.create("MADDPG")
    pz = PettingZooEnvSpec(name="mpe2.simple_spread_v3")
    sums = TrainingSpec(sum_scores=False)
    kwargs = select_strategy(maddpg).get_trainer_kwargs(maddpg, training=sums, env_spec=pz)
    assert kwargs == {"training": sums, "env_name": "mpe2.simple_spread_v3", "algo": "MADDPG"}


def test_llm_kwargs() -> None:
    dpo = MANIFEST_REGISTRY.create("DPO")
    env = LLMEnvSpec(env_type="dataset", objective="preference", dataset="d.jsonl")
    epochs = TrainingSpec(num_epochs=2, evo_epochs=1)
    kwargs = select_strategy(dpo).get_trainer_kwargs(dpo, training=epochs, env_spec=env)
    assert kwargs == {"training": epochs}
    grpo = MANIFEST_REGISTRY.create("GRPO", group_size=2)
    rollout = LLMEnvSpec(
        env_type="rollout",
        dataset="d.jsonl",
        rubric_file_path="r.py",
        prompt_template={"user_0": "q"},
        max_reward=2.0,
    )
    kwargs = select_strategy(grpo).get_trainer_kwargs(
        grpo, training=TrainingSpec(), env_spec=rollout
    )
    assert set(kwargs) == {"training", "max_reward"} and kwargs["max_reward"] == 2.0
    async_training = TrainingSpec(rollout_mode="async", rollout_engines_per_agent=2)
    kwargs = select_strategy(grpo).get_trainer_kwargs(
        grpo, training=async_training, env_spec=rollout
    )
    assert kwargs["engine_layout"].engines == 2 and kwargs["training"] is async_training


def test_no_loop_takes_a_training_setting_flattened() -> None:
    from agilerl.training import batched_off_policy, batched_on_policy, engine

    loops = (
        batched_on_policy.train_on_policy_batched,
        batched_off_policy.train_off_policy_batched,
        engine.run_population,
    )
    for loop in loops:
        params = inspect.signature(loop).parameters
        assert "training" in params, loop.__name__
        assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), loop.__name__
        assert not set(params) & set(TrainingSpec.model_fields), (loop.__name__, set(params))
