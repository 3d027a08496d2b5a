"""Off-policy algorithms learn: DQN and Rainbow DQN on CartPole-v1, DDPG and TD3 on Pendulum-v1.

A small self-contained loop stands in for the framework's training loop:
collect with a ``SyncVectorEnv`` in ``SAME_STEP`` autoreset mode (the final
observation of an episode comes from ``info["final_obs"]``; truncation is not
``done``), store in a numpy replay buffer (with per-env n-step windows for
Rainbow), learn once per ``learn_step`` env steps after ``learning_starts``,
and run a greedy evaluation over 10 episodes every ``eval_every`` env steps.
Each run stops at the first evaluation that reaches the target.

The settings are the tuned presets (3 hidden layers of 64 units without
LayerNorm, so the fast path of ``agilerl.networks.fastgrad`` is used).
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from agilerl.algorithms import DDPG, DQN, TD3, RainbowDQN

NET_64 = {
    "latent_dim": 64,
    "encoder_config": {"hidden_size": [64], "activation": "ReLU", "layer_norm": False},
    "head_config": {"hidden_size": [64], "activation": "ReLU", "layer_norm": False},
}

DQN_CARTPOLE = {
    "lr": 2.3e-3,
    "batch_size": 64,
    "learn_step": 2,
    "gamma": 0.99,
    "tau": 0.05,
    "double": True,
    "net_config": NET_64,
}
RAINBOW_CARTPOLE = {
    "lr": 1e-3,
    "batch_size": 64,
    "learn_step": 2,
    "gamma": 0.99,
    "tau": 0.05,
    "n_step": 3,
    "num_atoms": 51,
    "v_min": 0.0,
    "v_max": 200.0,
    "noise_std": 0.5,
    "net_config": NET_64,
}
TD3_PENDULUM = {
    "lr_actor": 1e-3,
    "lr_critic": 1e-3,
    "batch_size": 128,
    "learn_step": 1,
    "gamma": 0.98,
    "tau": 0.005,
    "policy_freq": 2,
    "O_U_noise": False,
    "expl_noise": 0.1,
    "net_config": NET_64,
}
DDPG_PENDULUM = {**TD3_PENDULUM}


@dataclass
class RunResult:
    """Outcome of one training run."""

    solved_at: int | None
    seconds: float
    steps: int
    history: list[tuple[int, float]] = field(default_factory=list)

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds


class Replay:
    """Uniform numpy replay buffer with optional n-step columns."""

    def __init__(self, size: int, obs_dim: int, action_shape: tuple, action_dtype: Any) -> None:
        self.size, self.ptr, self.full = size, 0, False
        self.cols = {
            "obs": np.zeros((size, obs_dim), np.float32),
            "action": np.zeros((size, *action_shape), action_dtype),
            "reward": np.zeros(size, np.float32),
            "next_obs": np.zeros((size, obs_dim), np.float32),
            "done": np.zeros(size, np.float32),
            "n_reward": np.zeros(size, np.float32),
            "n_next_obs": np.zeros((size, obs_dim), np.float32),
            "n_done": np.zeros(size, np.float32),
            "n_steps": np.zeros(size, np.float32),
        }

    def __len__(self) -> int:
        return self.size if self.full else self.ptr

    def add(self, **rows: np.ndarray) -> None:
        count = len(rows["obs"])
        idx = (self.ptr + np.arange(count)) % self.size
        for key, value in rows.items():
            self.cols[key][idx] = value
        self.full = self.full or self.ptr + count >= self.size
        self.ptr = (self.ptr + count) % self.size

    def sample(self, rng: np.random.Generator, batch_size: int, n_step: bool) -> tuple:
        idx = rng.integers(0, len(self), batch_size)
        c = self.cols
        batch = {k: torch.from_numpy(c[k][idx]) for k in ("obs", "action", "reward", "next_obs")}
        batch["done"] = torch.from_numpy(c["done"][idx])
        if not n_step:
            return batch, None
        n_batch = {
            "obs": batch["obs"],
            "action": batch["action"],
            "reward": torch.from_numpy(c["n_reward"][idx]),
            "next_obs": torch.from_numpy(c["n_next_obs"][idx]),
            "done": torch.from_numpy(c["n_done"][idx]),
            "n_steps": torch.from_numpy(c["n_steps"][idx]),
        }
        return batch, n_batch


class NStepWindows:
    """Per-env windows turning one-step transitions into (one-step, n-step) pairs."""

    def __init__(self, num_envs: int, n: int, gamma: float) -> None:
        self.windows = [collections.deque() for _ in range(num_envs)]
        self.n, self.gamma = n, gamma

    def _emit(self, window: list[tuple]) -> dict[str, Any]:
        obs, action, reward, next_obs, done = window[0]
        ret, discount, k, last = 0.0, 1.0, 0, window[0]
        for item in window:
            ret += discount * item[2]
            discount *= self.gamma
            k += 1
            last = item
            if item[4]:
                break
        n_next, n_done = last[3], last[4]
        return {
            "obs": obs,
            "action": action,
            "reward": reward,
            "next_obs": next_obs,
            "done": float(done),
            "n_reward": ret,
            "n_next_obs": n_next,
            "n_done": float(n_done),
            "n_steps": float(k),
        }

    def step(self, obs, action, reward, next_obs, terminated, truncated) -> list[dict[str, Any]]:
        out = []
        for i, window in enumerate(self.windows):
            window.append((obs[i], action[i], reward[i], next_obs[i], bool(terminated[i])))
            if terminated[i] or truncated[i]:
                while window:
                    out.append(self._emit(list(window)))
                    window.popleft()
            elif len(window) == self.n:
                out.append(self._emit(list(window)))
                window.popleft()
        return out


def train(
    agent: Any,
    env_id: str,
    *,
    max_steps: int,
    target: float,
    seed: int = 0,
    num_envs: int = 1,
    learning_starts: int = 1000,
    buffer_size: int = 100_000,
    eps_end: float = 0.04,
    eps_decay_steps: int = 16_000,
    eval_every: int = 5_000,
    eval_episodes: int = 10,
    n_step: int = 1,
) -> RunResult:
    """Train ``agent`` until a greedy evaluation reaches ``target`` or ``max_steps`` pass."""
    torch.manual_seed(seed)
    same_step = AutoresetMode.SAME_STEP
    env = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * num_envs, autoreset_mode=same_step)
    eval_env = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id)] * eval_episodes, autoreset_mode=same_step
    )
    space = env.single_action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    replay = Replay(
        buffer_size,
        env.single_observation_space.shape[0],
        () if discrete else space.shape,
        np.int64 if discrete else np.float32,
    )
    windows = NStepWindows(num_envs, n_step, agent.gamma) if n_step > 1 else None
    rng = np.random.default_rng(seed)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    result = RunResult(None, 0.0, 0)
    start = time.perf_counter()
    credit = 0.0
    steps = 0
    while steps < max_steps:
        if steps < learning_starts:
            action = env.action_space.sample()
        else:
            eps = max(eps_end, 1.0 - (1.0 - eps_end) * steps / eps_decay_steps)
            action = agent.get_action(obs, epsilon=eps)
        next_obs, reward, terminated, truncated, info = env.step(action)
        ended = terminated | truncated
        real_next = next_obs
        if ended.any():
            real_next = next_obs.copy()
            for i in np.flatnonzero(ended):
                real_next[i] = info["final_obs"][i]
            if hasattr(agent, "reset_noise"):
                agent.reset_noise(np.flatnonzero(ended))
        if windows is None:
            replay.add(obs=obs, action=action, reward=reward, next_obs=real_next, done=terminated)
        else:
            for row in windows.step(obs, action, reward, real_next, terminated, truncated):
                replay.add(**{k: np.asarray(v)[None] for k, v in row.items()})
        obs = next_obs
        steps += num_envs
        agent.steps = steps
        if steps >= learning_starts and len(replay) >= agent.batch_size:
            credit += num_envs / agent.learn_step
            while credit >= 1.0:
                credit -= 1.0
                batch, n_batch = replay.sample(rng, agent.batch_size, windows is not None)
                out = agent.learn(batch, n_step_batch=n_batch)
                assert np.isfinite(out.get("loss", out.get("critic_loss")))
        if steps % eval_every < num_envs:
            score = agent.test(eval_env, seed=seed + 10_000 + steps)
            result.history.append((steps, round(score, 1)))
            if score >= target:
                result.solved_at = steps
                break
    result.seconds = time.perf_counter() - start
    result.steps = steps
    env.close()
    eval_env.close()
    return result


def _report(name: str, result: RunResult) -> None:
    print(
        f"\n{name}: solved_at={result.solved_at} steps={result.steps} "
        f"time={result.seconds:.1f}s sps={result.steps_per_second:.0f} history={result.history}"
    )


def _make(cls: type, env_id: str, settings: dict[str, Any], seed: int, **extra: Any) -> Any:
    torch.manual_seed(seed)
    env = gym.make(env_id)
    return cls(cls.spec_class(**settings), env.observation_space, env.action_space, **extra)


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(1)


@pytest.mark.slow  # ~10-16 s: the default suite stays near 5 min on a slow host
def test_dqn_solves_cartpole() -> None:
    agent = _make(DQN, "CartPole-v1", DQN_CARTPOLE, seed=0)
    result = train(agent, "CartPole-v1", max_steps=100_000, target=475.0, seed=0)
    _report("DQN CartPole seed 0", result)
    assert result.solved_at is not None, result.history


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_dqn_solves_cartpole_other_seeds(seed: int) -> None:
    agent = _make(DQN, "CartPole-v1", DQN_CARTPOLE, seed=seed)
    result = train(agent, "CartPole-v1", max_steps=100_000, target=475.0, seed=seed)
    _report(f"DQN CartPole seed {seed}", result)
    assert result.solved_at is not None, result.history


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_rainbow_dqn_solves_cartpole(seed: int) -> None:
    agent = _make(RainbowDQN, "CartPole-v1", RAINBOW_CARTPOLE, seed=seed)
    result = train(
        agent, "CartPole-v1", max_steps=100_000, target=475.0, seed=seed, n_step=agent.n_step
    )
    _report(f"RainbowDQN CartPole seed {seed}", result)
    assert result.solved_at is not None, result.history


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cls", "settings"), [(TD3, TD3_PENDULUM), (DDPG, DDPG_PENDULUM)], ids=["TD3", "DDPG"]
)
def test_deterministic_policy_solves_pendulum(cls: type, settings: dict[str, Any]) -> None:
    """Chaotic, so over seeds 0-2: at least two reach -200 within 20k steps."""
    solved = {}
    for seed in (0, 1, 2):
        agent = _make(cls, "Pendulum-v1", settings, seed=seed)
        result = train(
            agent, "Pendulum-v1", max_steps=20_000, target=-200.0, seed=seed, eval_every=2_000
        )
        _report(f"{cls.__name__} Pendulum seed {seed}", result)
        solved[seed] = result.solved_at
    assert sum(step is not None for step in solved.values()) >= 2, solved
