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
    # the loop takes the trainer's call: population, env and these keywords
    params = inspect.signature(loop).parameters
    assert list(params)[:2] == ["population", "env"]
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    for keyword in ("max_steps", "evo_steps", "env_factory", "run", "tournament", "mutation"):
        assert keyword in params or accepts_any, (name, keyword)


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
    env = GymEnvSpec(name="CartPole-v1")
    training = TrainingSpec(target_score=475, eval_loop=3)
    on = select_strategy(PPOSpec()).get_trainer_kwargs(PPOSpec(), training=training, env_spec=env)
    assert on["env_name"] == "CartPole-v1" and on["target"] == 475 and "memory" not in on
    off = select_strategy(DQNSpec()).get_trainer_kwargs(
        DQNSpec(), training=training, env_spec=env, memory="mem"
    )
    assert off["memory"] == "mem" and off["learning_delay"] == 0
    assert "eps_start" not in off and "n_step_memory" not in off
    with_eps = select_strategy(DQNSpec()).get_trainer_kwargs(
        DQNSpec(), training=TrainingSpec(eps_start=1.0), env_spec=env, n_step_memory="n"
    )
    assert with_eps["eps_start"] == 1.0 and with_eps["n_step_memory"] == "n"
    bandit = MANIFEST_REGISTRY.create("NeuralUCB")
    assert (
        select_strategy(bandit).get_trainer_kwargs(bandit, training=TrainingSpec(), env_spec=env)[
            "episode_steps"
        ]
        == 500
    )
    maddpg = MANIFEST_REGISTRY.create("MADDPG")
    pz = PettingZooEnvSpec(name="mpe2.simple_spread_v3")
    kwargs = select_strategy(maddpg).get_trainer_kwargs(
        maddpg, training=TrainingSpec(sum_scores=False), env_spec=pz
    )
    assert kwargs["sum_scores"] is False


def test_llm_kwargs() -> None:
    dpo = MANIFEST_REGISTRY.create("DPO")
    env = LLMEnvSpec(env_type="dataset", objective="preference", dataset="d.jsonl")
    kwargs = select_strategy(dpo).get_trainer_kwargs(
        dpo, training=TrainingSpec(num_epochs=2, evo_epochs=1), env_spec=env
    )
    assert kwargs["num_epochs"] == 2 and kwargs["evaluation_interval"] == 10
    assert kwargs["evo_epochs"] == 1
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
    assert "num_epochs" not in kwargs and kwargs["max_reward"] == 2.0
