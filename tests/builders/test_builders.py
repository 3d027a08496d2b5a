"""Builders as the seed documents them, including their error cases."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agilerl.arena.models import (
    MANIFEST_REGISTRY,
    AlgorithmSpec,
    DQNSpec,
    LLMAlgorithmSpec,
    PPOSpec,
    SingleAgentAlgorithmSpec,
)
from agilerl.builders import (
    AlgorithmBuilder,
    AlgorithmBuildRuntime,
    LLMBuilder,
    MultiAgentBuilder,
    SingleAgentBuilder,
    select_builder,
)

OBS = gym.spaces.Box(-1, 1, (4,))
ACT = gym.spaces.Discrete(2)


class MyPPOSpec(PPOSpec):
    """A user's subclass: builds its parent's algorithm."""


@pytest.mark.parametrize(
    ("name", "builder"),
    [
        ("PPO", SingleAgentBuilder),
        ("DQN", SingleAgentBuilder),
        ("CQN", SingleAgentBuilder),
        ("NeuralUCB", SingleAgentBuilder),
        ("IPPO", MultiAgentBuilder),
        ("MADDPG", MultiAgentBuilder),
        ("DPO", LLMBuilder),
    ],
)
def test_select_builder_by_paradigm(name: str, builder: type) -> None:
    spec_cls = MANIFEST_REGISTRY.get(name)
    assert select_builder(spec_cls.model_construct()) is builder


def test_select_builder_rejects_non_specs() -> None:
    with pytest.raises(TypeError, match="not an algorithm spec"):
        select_builder({"name": "PPO"})
    with pytest.raises(TypeError):
        select_builder(AlgorithmSpec())


def test_algo_class_follows_the_naming_convention_and_mro() -> None:
    from agilerl.algorithms import PPO

    assert AlgorithmBuilder.algo_class(PPOSpec()) is PPO
    assert AlgorithmBuilder.algo_class(MyPPOSpec()) is PPO
    assert AlgorithmBuilder.algo_class(MANIFEST_REGISTRY.create("RecurrentPPO")) is PPO
    with pytest.raises(AttributeError, match="No algorithm class"):
        AlgorithmBuilder.algo_class(SingleAgentAlgorithmSpec())


def test_build_ppo_forwards_spec_fields() -> None:
    spec = PPOSpec(lr=0.002, batch_size=32, learn_step=128, num_envs=4)
    agent = SingleAgentBuilder.build(spec, OBS, ACT, runtime=AlgorithmBuildRuntime(index=3))
    assert type(agent).__name__ == "PPO"
    assert (agent.lr, agent.batch_size, agent.learn_step, agent.index) == (0.002, 32, 128, 3)
    sub = SingleAgentBuilder.build(MyPPOSpec(), OBS, ACT, runtime=AlgorithmBuildRuntime(index=0))
    assert type(sub).__name__ == "PPO"


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        ((None, ACT, 0), "observation_space"),
        ((OBS, None, 0), "action_space"),
        ((OBS, ACT, None), "runtime.index"),
    ],
)
def test_build_requires_spaces_and_index(args: tuple, missing: str) -> None:
    obs, act, index = args
    with pytest.raises(ValueError, match=missing):
        SingleAgentBuilder.build(PPOSpec(), obs, act, runtime=AlgorithmBuildRuntime(index=index))


def test_llm_builder_needs_tokenizer_and_llm_spec() -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        LLMBuilder.build(MANIFEST_REGISTRY.create("DPO"))
    with pytest.raises(TypeError):
        LLMBuilder.build(PPOSpec(), tokenizer=object())
    assert issubclass(MANIFEST_REGISTRY.get("SFT"), LLMAlgorithmSpec)


def test_agent_reads_its_hyperparameters_from_the_spec() -> None:
    spec = PPOSpec(lr=0.01, net_config={"latent_dim": 16})
    agent = SingleAgentBuilder.build(spec, OBS, ACT, runtime=AlgorithmBuildRuntime(index=3))
    assert agent.spec is spec and agent.index == 3
    assert agent.lr == 0.01 and agent.batch_size == PPOSpec().batch_size
    assert agent.actor.encoder.latent_dim == 16
    assert agent.optimizer.param_groups[0]["lr"] == 0.01


def test_pre_built_networks_are_used_as_given() -> None:
    from agilerl.algorithms import DDPG, DQN, PPO
    from agilerl.networks.actors import StochasticActor
    from agilerl.networks.deterministic import ContinuousQNetwork, DeterministicActor
    from agilerl.networks.q_networks import QNetwork
    from agilerl.networks.value import ValueNetwork

    runtime = AlgorithmBuildRuntime(index=0)
    actor, critic = StochasticActor(OBS, ACT), ValueNetwork(OBS)
    ppo = SingleAgentBuilder.build(
        PPOSpec(), OBS, ACT, runtime=runtime, actor_network=actor, critic_network=critic
    )
    assert isinstance(ppo, PPO) and ppo.actor is actor and ppo.critic is critic
    q = QNetwork(OBS, ACT)
    dqn = SingleAgentBuilder.build(DQNSpec(), OBS, ACT, runtime=runtime, actor_network=q)
    assert isinstance(dqn, DQN) and dqn.actor is q and dqn.actor_target is not q
    box = gym.spaces.Box(-1, 1, (2,))
    d_actor, d_critic = DeterministicActor(OBS, box), ContinuousQNetwork(OBS, box)
    ddpg = SingleAgentBuilder.build(
        MANIFEST_REGISTRY.create("DDPG"),
        OBS,
        box,
        runtime=runtime,
        actor_network=d_actor,
        critic_network=d_critic,
    )
    assert isinstance(ddpg, DDPG) and ddpg.actor is d_actor and ddpg.critic is d_critic


def test_keyword_overrides_are_validated_through_the_spec() -> None:
    from agilerl.algorithms import DQN

    agent = DQN(DQNSpec(), OBS, ACT, lr=0.5)
    assert agent.spec.lr == 0.5 and agent.optimizer.param_groups[0]["lr"] == 0.5
    with pytest.raises(ValueError, match="tau"):
        DQN(DQNSpec(), OBS, ACT, tau=5.0)
    with pytest.raises(ValueError, match="gamma"):
        agent.gamma = 2.0
    agent.lr = 0.01
    assert agent.spec.lr == 0.01 and agent.optimizer.param_groups[0]["lr"] == 0.01


def test_resume_and_load_weights_are_exclusive(tmp_path) -> None:
    agent = SingleAgentBuilder.build(PPOSpec(), OBS, ACT, runtime=AlgorithmBuildRuntime(index=0))
    path = tmp_path / "a.pt"
    agent.save_checkpoint(path)
    runtime = AlgorithmBuildRuntime(
        index=0, resume_from_checkpoint=str(path), load_weights_from=str(path)
    )
    with pytest.raises(ValueError, match="only one"):
        SingleAgentBuilder.build(PPOSpec(), OBS, ACT, runtime=runtime)
    with pytest.warns(UserWarning, match="checkpoint wins"):
        resumed = SingleAgentBuilder.build(
            PPOSpec(lr=0.5),
            OBS,
            ACT,
            runtime=AlgorithmBuildRuntime(index=2, resume_from_checkpoint=str(path)),
        )
    assert resumed.lr == agent.lr and resumed.index == 2
    loaded = SingleAgentBuilder.build(
        PPOSpec(lr=0.5),
        OBS,
        ACT,
        runtime=AlgorithmBuildRuntime(index=1, load_weights_from=str(path)),
    )
    assert loaded.lr == 0.5
