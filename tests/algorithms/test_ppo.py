"""PPO and the algorithm base: acting, learning, cloning, checkpoints, collection."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from agilerl.algorithms import PPO, EvolvableAlgorithm
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.networks.fastgrad import GradTape
from agilerl.training.collect import collect_rollouts

SAME_STEP = {"autoreset_mode": AutoresetMode.SAME_STEP}
VEC_OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
SMALL_NET = {
    "latent_dim": 16,
    "encoder_config": {"hidden_size": [16], "activation": "Tanh", "layer_norm": False},
    "head_config": {"hidden_size": [16], "activation": "Tanh", "layer_norm": False},
}


@pytest.fixture(autouse=True)
def _seed() -> Iterator[None]:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _cartpole(num_envs: int = 4, **kwargs: object) -> gym.vector.VectorEnv:
    return gym.make_vec(
        "CartPole-v1", num_envs, vectorization_mode="sync", vector_kwargs={**SAME_STEP, **kwargs}
    )


def _agent(env: gym.vector.VectorEnv, **kwargs: object) -> PPO:
    settings = {"net_config": SMALL_NET, "learn_step": 64, "batch_size": 32, "update_epochs": 2}
    settings.update(kwargs)
    return PPO(
        PPOSpec(),
        env.single_observation_space,
        env.single_action_space,
        num_envs=env.num_envs,
        **settings,
    )


def _weights_equal(a: PPO, b: PPO) -> bool:
    sa, sb = a.actor.state_dict(), b.actor.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa)


class CounterEnv(gym.Env):
    """Observation counts steps; never terminates (TimeLimit truncates it)."""

    observation_space = spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([float(self.t)], np.float32), 1.0, False, False, {}


# --- construction and acting ----------------------------------------------------------
@pytest.mark.parametrize(
    "action_space",
    [
        spaces.Discrete(3),
        spaces.MultiDiscrete([2, 3]),
        spaces.Box(-1.0, 1.0, (2,), np.float32),
        spaces.MultiBinary(2),
    ],
    ids=["discrete", "multidiscrete", "box", "multibinary"],
)
@pytest.mark.parametrize("share", [True, False])
def test_get_action_shapes_and_bounds(action_space: spaces.Space, share: bool) -> None:
    agent = PPO(PPOSpec(), VEC_OBS, action_space, net_config=SMALL_NET, share_encoders=share)
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32)
    action, log_prob, value = agent.get_action(obs)
    assert log_prob.shape == (5,) and value.shape == (5,)
    assert all(action_space.contains(a) for a in action)
    step = agent.policy_step(obs)
    with torch.no_grad():
        obs_t = torch.from_numpy(obs)
        lp, _, v = agent.evaluate_actions(obs_t, torch.as_tensor(step.action))
    np.testing.assert_allclose(step.log_prob, lp.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(step.value, v.numpy(), rtol=1e-4, atol=1e-5)


def test_greedy_actions_are_deterministic() -> None:
    agent = PPO(PPOSpec(), VEC_OBS, spaces.Discrete(4), net_config=SMALL_NET)
    obs = np.random.default_rng(1).uniform(-1, 1, (16, 4)).astype(np.float32)
    first = agent.get_action(obs, greedy=True)[0]
    assert all(np.array_equal(first, agent.get_action(obs, greedy=True)[0]) for _ in range(3))


def test_unsupported_spaces_and_settings_raise() -> None:
    with pytest.raises(ValueError, match="Tuple"):
        PPO(PPOSpec(), VEC_OBS, spaces.Tuple([spaces.Discrete(2)]))
    with pytest.raises(ValueError, match="total_steps"):
        PPO(PPOSpec(), VEC_OBS, spaces.Discrete(2), lr_schedule={"kind": "linear", "end": 0.0})
    with pytest.raises(ValueError, match="not_a_setting"):
        PPO(PPOSpec(), VEC_OBS, spaces.Discrete(2), not_a_setting=1)


def test_spec_defaults() -> None:
    agent = PPO(PPOSpec(), VEC_OBS, spaces.Discrete(2))
    assert (agent.lr, agent.learn_step, agent.ent_coef, agent.update_epochs) == (3e-4, 2048, 0, 10)
    assert not agent.share_encoders and agent.normalize_advantages
    assert agent.value_clip_coef is None and agent.adam_eps == 1e-5
    assert agent.critic.encoder is not agent.actor.encoder
    assert agent.net_config["latent_dim"] == 64


def test_learn_step_is_split_over_envs() -> None:
    agent = PPO(PPOSpec(), VEC_OBS, spaces.Discrete(2), learn_step=100, num_envs=8)
    assert agent.steps_per_env == 13
    buffer = agent.create_rollout_buffer()
    assert (buffer.capacity_per_env, buffer.num_envs) == (13, 8)


# --- collection ---------------------------------------------------------------------
def test_collect_rejects_next_step_autoreset() -> None:
    env = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    agent = _agent(env)
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="SAME_STEP"):
        collect_rollouts(agent, env, agent.create_rollout_buffer(), obs)


def test_collect_bootstraps_truncation_from_final_obs() -> None:
    env = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(CounterEnv(), 3) for _ in range(2)], **SAME_STEP
    )
    agent = PPO(
        PPOSpec(),
        env.single_observation_space,
        env.single_action_space,
        net_config=SMALL_NET,
        num_envs=2,
        learn_step=14,
        gamma=0.9,
    )
    buffer = agent.create_rollout_buffer()
    obs, _ = env.reset(seed=0)
    obs, returns, lengths = collect_rollouts(agent, env, buffer, obs)
    assert returns == [3.0] * 4 and lengths == [3] * 4
    assert agent.steps == 14
    truncated = buffer.truncated.numpy()
    assert truncated[2].all() and truncated[5].all() and truncated.sum() == 4
    assert not buffer.terminated.numpy().any()
    expected_boot = agent.get_value(np.array([[3.0]], np.float32))[0]
    np.testing.assert_allclose(buffer.bootstrap_values[2].numpy(), expected_boot, rtol=1e-5)
    # stored obs after a truncation is the reset obs of the next episode
    np.testing.assert_allclose(buffer.observations[3].numpy(), 0.0)
    # the episode in progress continues in the next call
    obs, returns, _ = collect_rollouts(agent, env, buffer, obs)
    assert returns == [3.0] * 4


def test_collect_and_learn_on_dict_observations() -> None:
    class DictEnv(CounterEnv):
        observation_space = spaces.Dict(
            {
                "img": spaces.Box(0, 255, (8, 8, 1), np.uint8),
                "pos": spaces.Box(-1, 1, (2,), np.float32),
            }
        )
        action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

        def _obs(self):
            return {
                "img": np.full((8, 8, 1), self.t, np.uint8),
                "pos": np.full(2, self.t / 10, np.float32),
            }

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self._obs(), {}

        def step(self, action):
            self.t += 1
            return self._obs(), float(-np.square(action).sum()), self.t >= 4, False, {}

    env = gym.vector.SyncVectorEnv([DictEnv for _ in range(3)], **SAME_STEP)
    net = {
        "encoder_config": {
            "cnn_config": {
                "channel_size": [4],
                "kernel_size": [3],
                "stride_size": [2],
                "min_channel_size": 4,
            }
        }
    }
    agent = PPO(
        PPOSpec(),
        env.single_observation_space,
        env.single_action_space,
        net_config=net,
        num_envs=3,
        learn_step=24,
        batch_size=8,
        update_epochs=4,
    )
    buffer = agent.create_rollout_buffer()
    obs, _ = env.reset(seed=0)
    obs, returns, _ = collect_rollouts(agent, env, buffer, obs)
    assert len(returns) == 6
    losses = agent.learn(buffer)
    assert all(math.isfinite(v) for v in losses.values())
    assert losses["updates"] == 4 * 3


# --- learning -----------------------------------------------------------------------
def _rollout(agent: PPO, env: gym.vector.VectorEnv):
    buffer = agent.create_rollout_buffer()
    obs, _ = env.reset(seed=0)
    collect_rollouts(agent, env, buffer, obs)
    return buffer


def test_learn_updates_weights_and_reports_losses() -> None:
    env = _cartpole()
    agent = _agent(env)
    before = {k: v.clone() for k, v in agent.actor.state_dict().items()}
    losses = agent.learn(_rollout(agent, env))
    assert set(losses) >= {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"}
    assert losses["updates"] == 4 and agent.num_updates == 4
    assert all(math.isfinite(v) for v in losses.values())
    assert any(not torch.equal(before[k], v) for k, v in agent.actor.state_dict().items())


@pytest.mark.parametrize(
    ("env_id", "value_clip", "ent_coef"),
    [("CartPole-v1", None, 0.01), ("CartPole-v1", 0.05, 0.0), ("Pendulum-v1", 0.05, 0.02)],
)
def test_loss_is_the_clipped_surrogate(
    env_id: str, value_clip: float | None, ent_coef: float
) -> None:
    env = gym.make_vec(env_id, 4, vectorization_mode="sync", vector_kwargs=SAME_STEP)
    agent = _agent(env, value_clip_coef=value_clip, ent_coef=ent_coef, lr=3e-2, clip_coef=0.1)
    buffer = _rollout(agent, env)
    for _ in range(2):  # move the policy so that ratios differ from 1 and some clip
        agent.learn(buffer)
    batch = next(buffer.get_minibatches(10_000))
    adv = batch["advantages"]
    neg_adv = -(adv - adv.mean()) / (adv.std() + 1e-8)

    params, value = agent._forward_all(batch["observations"])
    log_prob, entropy = agent.actor.evaluate(params, batch["actions"])
    ratio = (log_prob - batch["log_probs"]).exp()
    clip = agent.clip_coef
    policy_loss = torch.max(neg_adv * ratio, neg_adv * ratio.clamp(1 - clip, 1 + clip)).mean()
    if value_clip is None:
        value_loss = (value - batch["returns"]).square().mean()
    else:
        old = batch["values"]
        clipped = old + (value - old).clamp(-value_clip, value_clip)
        value_loss = torch.max(
            (value - batch["returns"]).square(), (clipped - batch["returns"]).square()
        ).mean()
    loss = policy_loss + agent.vf_coef * value_loss - ent_coef * entropy.mean()
    agent.optimizer.zero_grad()
    loss.backward()
    reference = agent.optimizer.flat_grad.clone()

    tape = GradTape()
    ours, stats = agent._loss(batch, tape, diagnose=True)
    agent.optimizer.zero_grad()
    tape.backward(ours)
    assert ours.item() == pytest.approx(loss.item(), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(agent.optimizer.flat_grad, reference, rtol=1e-4, atol=1e-6)
    assert stats[0] == pytest.approx(policy_loss.item(), rel=1e-5, abs=1e-7)
    assert stats[1] == pytest.approx(value_loss.item(), rel=1e-5)
    assert stats[2] == pytest.approx(entropy.mean().item(), rel=1e-5)
    assert 0.0 < stats[4] < 1.0  # some samples were clipped


def test_target_kl_stops_early() -> None:
    env = _cartpole()
    agent = _agent(env, target_kl=1e-12, lr=1e-2, update_epochs=10)
    losses = agent.learn(_rollout(agent, env))
    assert losses["updates"] < 20
    assert losses["epochs"] < 10


def test_value_clipping_path_runs() -> None:
    env = _cartpole()
    agent = _agent(env, value_clip_coef=0.2)
    assert math.isfinite(agent.learn(_rollout(agent, env))["value_loss"])


def test_nan_guard_names_the_loss() -> None:
    env = _cartpole()
    agent = _agent(env)
    buffer = _rollout(agent, env)
    buffer.returns.fill_(float("nan"))
    before = agent.optimizer.flat.clone()
    with pytest.raises(FloatingPointError, match=r"value_loss .*gradient update 1 \(env step 64"):
        agent.learn(buffer)
    assert torch.equal(before, agent.optimizer.flat)  # nothing applied


def test_linear_lr_schedule() -> None:
    env = _cartpole()
    agent = _agent(env, lr=1e-3, lr_schedule={"kind": "linear", "end": 0.0}, total_steps=1000)
    assert agent.current_lr(0) == pytest.approx(1e-3)
    assert agent.current_lr(250) == pytest.approx(7.5e-4)
    assert agent.current_lr(5000) == pytest.approx(0.0)
    buffer = _rollout(agent, env)  # agent.steps == 64
    losses = agent.learn(buffer)
    assert losses["lr"] == pytest.approx(1e-3 * (1 - 64 / 1000))
    assert agent.optimizer.lr == pytest.approx(losses["lr"])
    assert agent.lr == pytest.approx(1e-3)


def test_test_runs_loop_episodes_per_env_and_records_fitness() -> None:
    env = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(CounterEnv(), 5) for _ in range(3)], **SAME_STEP
    )
    agent = PPO(
        PPOSpec(), env.single_observation_space, env.single_action_space, net_config=SMALL_NET
    )
    assert agent.test(env, loop=2) == pytest.approx(5.0)
    assert agent.test(env, max_steps=2) == pytest.approx(2.0)
    assert agent.fitness == [pytest.approx(5.0), pytest.approx(2.0)]
    next_step_env = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(CounterEnv(), 5) for _ in range(2)]
    )
    assert agent.test(next_step_env, loop=3) == pytest.approx(5.0)


# --- clone / state / checkpoints ----------------------------------------------------------
def _trained_agent() -> tuple[PPO, gym.vector.VectorEnv]:
    env = _cartpole()
    agent = _agent(env)
    agent.learn(_rollout(agent, env))
    agent.fitness = [1.0, 2.0]
    agent.scores = [3.0]
    agent.mut = "lr"
    return agent, env


def test_clone_keeps_shared_encoder_shared() -> None:
    env = _cartpole()
    clone = _agent(env, share_encoders=True).clone()
    assert clone.critic.encoder is clone.actor.encoder
    separate = _agent(env, share_encoders=False).clone()
    assert separate.critic.encoder is not separate.actor.encoder


def test_state_dict_round_trip_weights_only() -> None:
    agent, env = _trained_agent()
    buffer = io.BytesIO()
    torch.save(agent.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    other = _agent(env, lr=0.123, batch_size=8)
    other.load_state_dict(state)
    assert other.lr == agent.lr and other.batch_size == agent.batch_size
    assert other.optimizer.lr == pytest.approx(agent.optimizer.lr)
    assert other.fitness == agent.fitness and other.scores == agent.scores
    assert other.mut == "lr" and other.steps == agent.steps
    obs = np.random.default_rng(0).uniform(-0.1, 0.1, (32, 4)).astype(np.float32)
    assert np.array_equal(agent.get_action(obs, True)[0], other.get_action(obs, True)[0])
    torch.manual_seed(5)
    sampled = agent.get_action(obs)
    torch.manual_seed(5)
    sampled_other = other.get_action(obs)
    for a, b in zip(sampled, sampled_other, strict=True):
        np.testing.assert_array_equal(a, b)


def test_load_state_dict_rebuilds_changed_architecture() -> None:
    env = _cartpole()
    agent = _agent(env)
    bigger = dict(SMALL_NET, head_config={"hidden_size": [32, 8], "layer_norm": False})
    other = _agent(env, net_config=bigger)
    agent.load_state_dict(other.state_dict())
    assert agent.actor.head.hidden_size == [32, 8]
    assert _weights_equal(agent, other)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupted_checkpoint_raises_value_error_naming_file(tmp_path: Path, damage: str) -> None:
    agent, _ = _trained_agent()
    path = tmp_path / "broken.pt"
    agent.save_checkpoint(path)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        # corrupt a byte inside the largest stored tensor (silently loadable by torch)
        weight = agent.optimizer.exp_avg.numpy().tobytes()
        offset = bytes(data).find(weight[:64])
        assert offset > 0
        data[offset + 40] ^= 0xFF
    elif damage == "garbage":
        data = bytearray(b"not a checkpoint at all" * 10)
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"broken\.pt"):
        PPO.load(path)
    with pytest.raises(ValueError, match=r"broken\.pt"):
        agent.load_checkpoint(path)


def test_checkpoint_of_other_algorithm_rejected(tmp_path: Path) -> None:
    agent, _ = _trained_agent()
    path = tmp_path / "a.pt"
    agent.save_checkpoint(path)

    class OtherAlgo(EvolvableAlgorithm):
        pass

    with pytest.raises(ValueError, match=r"a\.pt"):
        OtherAlgo.load(path)


def test_hp_names_are_attributes() -> None:
    agent = PPO(PPOSpec(), VEC_OBS, spaces.Discrete(2))
    assert {"lr", "batch_size", "learn_step"} <= set(agent.hp_names)
    for name in agent.hp_names:
        assert name in PPOSpec.model_fields
        assert getattr(agent, name) == getattr(agent.spec, name)
    agent.set_lr(0.01)
    assert agent.optimizer.lr == 0.01
