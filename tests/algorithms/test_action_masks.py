"""Action masks in DQN, Rainbow DQN and (recurrent) PPO: acting, exploration, evaluation,
targets and log-probabilities read the mask; no masked action is ever taken."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms import DQN, PPO, RainbowDQN
from agilerl.algorithms.core.off_policy import Batch
from agilerl.algorithms.dqn import dqn_loss
from agilerl.arena.models.algorithms.dqn import DQNSpec
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.arena.models.algorithms.rainbow_dqn import RainbowDQNSpec
from agilerl.arena.models.training import TrainingSpec
from agilerl.components.replay_buffer import ReplayBuffer
from agilerl.training.collect import collect_rollouts
from agilerl.training.collect_recurrent import collect_recurrent_rollouts
from agilerl.training.train_off_policy import train_off_policy
from agilerl.training.train_on_policy import train_on_policy
from tests.algorithms.masked_envs import N_ACTIONS, RandomMaskEnv, vector_env

NET = {
    "latent_dim": 16,
    "encoder_config": {"hidden_size": [16], "layer_norm": False},
    "head_config": {"hidden_size": [16], "layer_norm": False},
}
OBS = RandomMaskEnv().observation_space
ACTIONS = spaces.Discrete(N_ACTIONS)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)


def _masked_batch(n: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = rng.random((n, N_ACTIONS)) < 0.4
    mask[np.arange(n), rng.integers(N_ACTIONS, size=n)] = True
    return {
        "observation": rng.uniform(-1, 1, (n, N_ACTIONS)).astype(np.float32),
        "action_mask": mask.astype(np.int8),
    }


def _legal(actions: np.ndarray, obs: dict[str, np.ndarray]) -> bool:
    return bool(np.all(obs["action_mask"][np.arange(len(actions)), actions] == 1))


def _ppo(recurrent: bool = False, **kwargs: object) -> PPO:
    spec = PPOSpec(learn_step=64, batch_size=64, num_envs=4, recurrent=recurrent, **kwargs)
    net = None if recurrent else NET
    return PPO(spec, OBS, ACTIONS, net_config=net)


AGENTS = {
    "dqn": lambda: DQN(DQNSpec(batch_size=16), OBS, ACTIONS, net_config=NET),
    "rainbow": lambda: RainbowDQN(RainbowDQNSpec(batch_size=16), OBS, ACTIONS, net_config=NET),
    "ppo": _ppo,
    "recurrent_ppo": lambda: _ppo(recurrent=True),
}


# --- acting ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_every_action_is_legal_greedy_and_sampled(name: str) -> None:
    agent = AGENTS[name]()
    for seed in range(5):
        obs = _masked_batch(seed=seed)
        for greedy in (True, False):
            assert _legal(agent.act(obs, greedy=greedy), obs)
        tensors = {k: torch.as_tensor(v) for k, v in obs.items()}
        assert _legal(agent.act(tensors, greedy=True), obs)


@pytest.mark.parametrize("epsilon", [1.0, 0.5])
def test_dqn_exploration_draws_uniformly_among_legal_actions(epsilon: float) -> None:
    agent = AGENTS["dqn"]()
    obs = _masked_batch(1)
    taken = np.array([agent.get_action(obs, epsilon=epsilon)[0] for _ in range(2000)])
    legal = np.flatnonzero(obs["action_mask"][0])
    assert set(taken) <= set(legal)
    if epsilon == 1.0:
        share = np.bincount(taken, minlength=N_ACTIONS)[legal] / len(taken)
        assert np.all(np.abs(share - 1 / len(legal)) < 0.05)


def test_masks_keep_runs_reproducible() -> None:
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        agent = AGENTS["dqn"]()
        obs = _masked_batch(seed=1)
        runs.append([agent.get_action(obs, epsilon=0.5) for _ in range(5)])
    assert all(np.array_equal(a, b) for a, b in zip(*runs, strict=True))


def test_unmasked_observations_are_refused_by_a_masked_agent() -> None:
    with pytest.raises(ValueError, match="without an action_mask"):
        AGENTS["ppo"]().act(np.zeros((2, N_ACTIONS), np.float32))


def test_a_mask_needs_discrete_actions_of_its_width() -> None:
    with pytest.raises(ValueError, match="5 entries but there are 4 actions"):
        DQN(DQNSpec(), OBS, spaces.Discrete(4), net_config=NET)
    with pytest.raises(ValueError, match="only Discrete actions"):
        PPO(PPOSpec(), OBS, spaces.Box(-1, 1, (N_ACTIONS,)), net_config=NET)


# --- targets and log-probabilities ----------------------------------------------------------
def test_dqn_target_maximises_over_legal_next_actions_only() -> None:
    q = torch.tensor([[10.0, 1.0, 2.0], [0.0, 3.0, 7.0]])
    next_mask = torch.tensor([[False, True, True], [True, True, False]])
    batch = Batch(
        obs=torch.zeros(2, 1),
        action=torch.zeros(2, dtype=torch.int64),
        reward=torch.zeros(2),
        next_obs=torch.zeros(2, 1),
        discount=torch.ones(2),
        next_mask=next_mask,
    )
    for double in (False, True):
        _, td, q_taken = dqn_loss(lambda _: q, lambda _: q, batch, double=double)
        target = q_taken - td
        assert target.tolist() == [2.0, 3.0]
    _, td, q_taken = dqn_loss(lambda _: q, lambda _: q, batch._replace(next_mask=None))
    assert (q_taken - td).tolist() == [10.0, 7.0]


def test_rainbow_target_reads_the_legal_next_action() -> None:
    agent = AGENTS["rainbow"]()
    obs, nxt = _masked_batch(8, seed=1), _masked_batch(8, seed=2)
    only = np.zeros_like(nxt["action_mask"])
    only[:, 3] = 1  # the one legal next action
    batch = {
        "obs": obs,
        "action": np.zeros(8, np.int64),
        "reward": np.ones(8, np.float32),
        "next_obs": {"observation": nxt["observation"], "action_mask": only},
        "done": np.zeros(8, np.float32),
    }
    b = agent._prepare(batch)
    assert b.next_mask[:, 3].all() and b.next_mask.sum() == 8
    from agilerl.networks.fastgrad import GradTape

    loss = agent._elementwise_loss(b, GradTape())[0]
    with torch.no_grad():  # the target built by hand from action 3's distribution
        from agilerl.networks.q_networks import project_distribution

        logits = agent.actor_target.logits(b.next_obs)[:, 3]
        target = project_distribution(
            torch.softmax(logits, -1), b.reward, b.discount, agent.support
        )
        log_p = torch.log_softmax(agent.actor.logits(b.obs)[:, 0], -1)
        assert torch.allclose(loss, -(target * log_p).sum(-1), atol=1e-5)


@pytest.mark.parametrize("recurrent", [False, True])
def test_ppo_stores_masks_and_learns_from_the_masked_distribution(recurrent: bool) -> None:
    """The first minibatch's ratio is exactly 1 when learning reads the stored masks (the
    log-probabilities of acting and learning come from the same masked policy)."""
    agent = _ppo(recurrent, update_epochs=1)
    env = vector_env(4)
    buffer = agent.create_rollout_buffer()
    collect = collect_recurrent_rollouts if recurrent else collect_rollouts
    obs, _ = env.reset(seed=0)
    collect(agent, env, buffer, obs)
    assert buffer.observations["action_mask"].sum() > 0
    stats = agent.learn(buffer)
    assert abs(stats["approx_kl"]) < 1e-6
    log_prob, entropy, _ = agent.evaluate_actions(_masked_batch(16), torch.zeros(16))
    assert torch.isfinite(entropy).all() and torch.isfinite(log_prob).all()


# --- no masked action in training, exploration or evaluation --------------------------------
def _factory(info_mask: bool):
    def make(seed: int | None = None, num_envs: int | None = None):
        return vector_env(num_envs or 4, info_mask, seed or 0)

    return make


@pytest.mark.parametrize("info_mask", [False, True], ids=["observation", "info"])
@pytest.mark.parametrize("name", ["dqn", "rainbow"])
def test_off_policy_training_never_takes_a_masked_action(name: str, info_mask: bool) -> None:
    """The env raises on a masked action: explore (epsilon 1 -> 0.5), learn, evaluate."""
    env = _factory(info_mask)()
    agent = AGENTS[name]()
    memory = ReplayBuffer(500, observation_space=env.single_observation_space, action_space=ACTIONS)
    result = train_off_policy(
        [agent], env, memory=memory, env_factory=_factory(info_mask),
        training=TrainingSpec(
            max_steps=240, evo_steps=120, eval_steps=12, eps_start=1.0, eps_end=0.5,
            eps_decay=0.99,
        ),
    )  # fmt: skip
    assert agent.num_updates > 0 and np.isfinite(result.fitnesses).all()


@pytest.mark.parametrize("info_mask", [False, True], ids=["observation", "info"])
@pytest.mark.parametrize("recurrent", [False, True], ids=["ppo", "recurrent_ppo"])
def test_on_policy_training_never_takes_a_masked_action(recurrent: bool, info_mask: bool) -> None:
    env = _factory(info_mask)()
    agent = _ppo(recurrent)
    result = train_on_policy(
        [agent],
        env,
        training=TrainingSpec(max_steps=256, evo_steps=128, eval_steps=12),
        env_factory=_factory(info_mask),
    )
    assert agent.num_updates > 0 and np.isfinite(result.fitnesses).all()


def test_a_masked_agent_round_trips_through_a_checkpoint(tmp_path) -> None:
    agent = AGENTS["dqn"]()
    path = tmp_path / "agent.pt"
    agent.save_checkpoint(path)
    loaded = DQN.load(path)
    obs = _masked_batch(seed=4)
    assert loaded.observation_space == OBS
    assert np.array_equal(loaded.act(obs, greedy=True), agent.act(obs, greedy=True))


def test_masked_populations_decline_stacking_with_a_reason() -> None:
    from agilerl.training.batched_off_policy import batched_off_policy_reason
    from agilerl.training.batched_on_policy import batched_on_policy_reason

    population = [AGENTS["dqn"](), AGENTS["dqn"]()]
    env, factory = vector_env(2), _factory(False)
    reason = batched_off_policy_reason(population, env, None, None, factory)
    assert "action masks" in reason
    assert "action masks" in batched_on_policy_reason([_ppo(), _ppo()], env, factory)


def test_algorithms_that_cannot_mask_refuse_masked_observations() -> None:
    from agilerl.algorithms import SAC
    from agilerl.arena.models.algorithms.sac import SACSpec

    with pytest.raises(ValueError, match="SAC does not take action masks"):
        SAC(SACSpec(), OBS, spaces.Box(-1, 1, (2,)), net_config=NET)
