"""Action masks in IPPO, MADDPG and MATD3: the vector env carries Dict observations, acting,
exploration, evaluation and targets read the mask, and no masked action is ever taken."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agilerl.algorithms import IPPO, MADDPG, MATD3
from agilerl.arena.models.algorithms.ippo import IPPOSpec
from agilerl.arena.models.algorithms.maddpg import MADDPGSpec
from agilerl.arena.models.algorithms.matd3 import MATD3Spec
from agilerl.arena.models.training import TrainingSpec
from agilerl.components.memory import estimate_buffer_bytes
from agilerl.envs.pettingzoo import PettingZooVectorEnv
from agilerl.training.train_multi_agent import (
    EpisodeTracker,
    _collect_ippo,
    make_replay_buffer,
    train_multi_agent_off_policy,
    train_multi_agent_on_policy,
)
from tests.algorithms.masked_envs import N_ACTIONS
from tests.algorithms_ma.masked_parallel_env import RandomMaskParallelEnv

AGENTS = {
    "ippo": lambda o, a: IPPO(IPPOSpec(learn_step=36, batch_size=512, update_epochs=1), o, a),
    "maddpg": lambda o, a: MADDPG(MADDPGSpec(batch_size=16), o, a),
    "matd3": lambda o, a: MATD3(MATD3Spec(batch_size=16), o, a),
}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)


def _venv(seed: int | None = None, num_envs: int | None = None) -> PettingZooVectorEnv:
    return PettingZooVectorEnv([RandomMaskParallelEnv] * (num_envs or 3))


def _legal(actions: dict[str, np.ndarray], obs: dict[str, dict[str, np.ndarray]]) -> bool:
    return all(
        np.all(obs[a]["action_mask"][np.arange(len(act)), act] == 1) for a, act in actions.items()
    )


def test_vector_env_stacks_dict_observations() -> None:
    env = _venv()
    obs, _ = env.reset(seed=0)
    assert obs["a_0"]["observation"].shape == (3, N_ACTIONS)
    assert obs["a_0"]["action_mask"].shape == (3, N_ACTIONS)
    actions = {a: obs[a]["action_mask"].argmax(-1) for a in env.agents}
    for _ in range(13):  # past an episode end: final observations are dicts too
        obs, _, _, _, info = env.step(actions)
        actions = {a: obs[a]["action_mask"].argmax(-1) for a in env.agents}
    assert info["final_obs"][0] is None or "action_mask" in info["final_obs"][0]["a_0"]


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_acting_greedy_and_exploring_is_legal(name: str) -> None:
    env = _venv()
    agent = AGENTS[name](env.observation_spaces, env.action_spaces)
    obs, _ = env.reset(seed=1)
    for _ in range(20):
        for greedy in (True, False):
            assert _legal(agent.act(obs, greedy=greedy), obs)
        obs = env.step(agent.act(obs))[0]


@pytest.mark.parametrize("name", ["maddpg", "matd3"])
def test_off_policy_training_never_takes_a_masked_action(name: str) -> None:
    env = _venv()
    agent = AGENTS[name](env.observation_spaces, env.action_spaces)
    result = train_multi_agent_off_policy(
        [agent],
        env,
        training=TrainingSpec(max_steps=300, evo_steps=150),
        memory_size=500,
        env_factory=_venv,
    )
    assert agent.num_updates > 0 and np.isfinite(result.fitnesses).all()


def test_ippo_training_never_takes_a_masked_action() -> None:
    env = _venv()
    agent = AGENTS["ippo"](env.observation_spaces, env.action_spaces)
    result = train_multi_agent_on_policy(
        [agent], env, training=TrainingSpec(max_steps=216, evo_steps=108), env_factory=_venv
    )
    assert agent.num_updates > 0 and np.isfinite(result.fitnesses).all()


def test_ippo_learns_from_the_masked_distribution() -> None:
    """The rollout keeps the masks; the first minibatch's ratio is 1 (approx KL 0)."""
    env = _venv()
    agent = AGENTS["ippo"](env.observation_spaces, env.action_spaces)
    obs, _ = env.reset(seed=2)
    rollout, _, _ = _collect_ippo(agent, env, obs, EpisodeTracker(env.agents, env.num_envs))
    assert rollout["mask"]["a_0"].shape == (12, 3, N_ACTIONS)
    assert abs(agent.learn(rollout)["approx_kl"]) < 1e-6


def test_replay_buffer_keeps_masks_and_targets_use_them() -> None:
    env = _venv()
    agent = AGENTS["matd3"](env.observation_spaces, env.action_spaces)
    memory = make_replay_buffer(agent, 100, seed=0)
    obs, _ = env.reset(seed=0)
    parts = {a: v["observation"] for a, v in obs.items()}
    masks = {a: v["action_mask"] for a, v in obs.items()}
    memory.add(
        obs=parts, action=agent.act(obs), reward={a: np.zeros(3) for a in obs},
        next_obs=parts, done={a: np.zeros(3) for a in obs},
        action_mask=masks, next_action_mask=masks,
    )  # fmt: skip
    batch = memory.sample(8)
    assert batch["next_action_mask"]["a_0"].dtype == torch.bool
    targets = agent._next_target_actions(
        {a: v for a, v in batch["next_obs"].items()}, batch["next_action_mask"]
    )
    for a, onehot in targets.items():
        assert bool((batch["next_action_mask"][a] | (onehot == 0)).all())
    agent.learn(batch)
    needed = estimate_buffer_bytes(10, env.observation_spaces, env.action_spaces)
    assert needed > 0


def test_a_masked_multi_agent_round_trips_through_a_checkpoint(tmp_path) -> None:
    env = _venv()
    agent = AGENTS["ippo"](env.observation_spaces, env.action_spaces)
    agent.save_checkpoint(tmp_path / "agent.pt")
    loaded = IPPO.load(tmp_path / "agent.pt")
    obs, _ = env.reset(seed=3)
    assert loaded.observation_spaces == env.observation_spaces
    expected = agent.act(obs, greedy=True)
    for a, action in loaded.act(obs, greedy=True).items():
        assert np.array_equal(action, expected[a])


def test_greedy_evaluation_of_a_saved_masked_agent_plays_legal_moves() -> None:
    from agilerl.arena.models.env import PettingZooEnvSpec
    from agilerl.evaluate_multi_agent import run_multi_agent_episodes

    env = _venv()
    agent = AGENTS["maddpg"](env.observation_spaces, env.action_spaces)
    spec = PettingZooEnvSpec(name="tests.algorithms_ma.masked_parallel_env")
    summed, per_agent = run_multi_agent_episodes(agent, spec, episodes=2, seed=0)
    assert len(summed) == 2 and set(per_agent) == {"a_0", "b_0"}


@pytest.mark.parametrize("name", ["ippo", "matd3"])
def test_info_masks_move_into_the_observations(name: str) -> None:
    """``environment.action_mask: info``: the vector env's copies carry ``infos`` masks."""
    from agilerl.arena.models.env import PettingZooEnvSpec
    from agilerl.envs.pettingzoo import ParallelEnvFactory

    spec = PettingZooEnvSpec(
        name="tests.algorithms_ma.masked_parallel_env",
        config={"info_mask": True},
        action_mask="info",
    )

    def venv(seed: int | None = None, num_envs: int | None = None) -> PettingZooVectorEnv:
        return PettingZooVectorEnv([ParallelEnvFactory.of(spec)] * (num_envs or 3))

    env = venv()
    assert set(env.observation_spaces["a_0"].spaces) == {"observation", "action_mask"}
    agent = AGENTS[name](env.observation_spaces, env.action_spaces)
    if name == "ippo":
        training = TrainingSpec(max_steps=108, evo_steps=108)
        train_multi_agent_on_policy([agent], env, training=training, env_factory=venv)
    else:
        train_multi_agent_off_policy(
            [agent],
            env,
            training=TrainingSpec(max_steps=150, evo_steps=150),
            memory_size=300,
            env_factory=venv,
        )
    assert agent.num_updates > 0
