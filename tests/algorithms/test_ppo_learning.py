"""PPO learns: CartPole-v1 (fast, seed 0; slow, seeds 0-2) and Pendulum-v1 (slow).

A small local loop (collect -> learn -> greedy evaluation every 5k env steps
over 10 episodes) stands in for the framework's training loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from agilerl.algorithms.ppo import PPO
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.training.collect import collect_rollouts

SAME_STEP = {"autoreset_mode": AutoresetMode.SAME_STEP}
EVAL_EVERY = 5_000
EVAL_EPISODES = 10

# rl-zoo3's CartPole-v1 PPO settings with a separate 64x64 tanh actor and critic.
CARTPOLE = {
    "num_envs": 8,
    "learn_step": 256,
    "batch_size": 256,
    "update_epochs": 20,
    "gamma": 0.98,
    "gae_lambda": 0.8,
    "lr": 1e-3,
    "lr_schedule": {"kind": "linear", "end": 0.0},
    "clip_coef": 0.2,
    "ent_coef": 0.0,
    "share_encoders": False,
    "net_config": {
        "latent_dim": 64,
        "encoder_config": {
            "hidden_size": [64],
            "activation": "Tanh",
            "output_activation": "Tanh",
            "layer_norm": False,
        },
        "head_config": {
            "hidden_size": [],
            "min_hidden_layers": 0,
            "activation": "Tanh",
            "layer_norm": False,
        },
    },
}

# rl-zoo3's Pendulum-v1 PPO settings (4 envs, n_steps 1024, gamma 0.9, 10 epochs).
PENDULUM = {
    "num_envs": 4,
    "learn_step": 4096,
    "batch_size": 64,
    "update_epochs": 10,
    "gamma": 0.9,
    "gae_lambda": 0.95,
    "lr": 1e-3,
    "clip_coef": 0.2,
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "share_encoders": False,
    "net_config": {
        "latent_dim": 64,
        "encoder_config": {
            "hidden_size": [64],
            "activation": "Tanh",
            "output_activation": "Tanh",
            "layer_norm": False,
        },
        "head_config": {
            "hidden_size": [],
            "min_hidden_layers": 0,
            "activation": "Tanh",
            "layer_norm": False,
        },
    },
}


@dataclass
class RunResult:
    """Outcome of :func:`train_until`."""

    solved_at: int | None
    evaluations: list[tuple[int, float]] = field(default_factory=list)
    seconds: float = 0.0


def train_until(
    env_id: str, settings: dict, seed: int, threshold: float, max_steps: int
) -> RunResult:
    """Train PPO until the greedy 10-episode mean reaches ``threshold`` or ``max_steps``."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    num_envs = settings["num_envs"]
    env = gym.make_vec(env_id, num_envs, vectorization_mode="sync", vector_kwargs=SAME_STEP)
    eval_env = gym.make_vec(
        env_id, EVAL_EPISODES, vectorization_mode="sync", vector_kwargs=SAME_STEP
    )
    agent = PPO(
        PPOSpec(**settings),
        env.single_observation_space,
        env.single_action_space,
        total_steps=max_steps,
    )
    buffer = agent.create_rollout_buffer()
    obs, _ = env.reset(seed=seed)
    result = RunResult(solved_at=None)
    next_eval = EVAL_EVERY
    start = time.perf_counter()
    try:
        while agent.steps < max_steps:
            obs, _, _ = collect_rollouts(agent, env, buffer, obs)
            agent.learn(buffer)
            if agent.steps >= next_eval:
                next_eval += EVAL_EVERY
                score = agent.test(eval_env, seed=seed + 10_000 + agent.steps)
                result.evaluations.append((agent.steps, score))
                if score >= threshold:
                    result.solved_at = agent.steps
                    break
    finally:
        env.close()
        eval_env.close()
    result.seconds = time.perf_counter() - start
    return result


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_cartpole_seed0_solves_within_100k_steps() -> None:
    result = train_until("CartPole-v1", CARTPOLE, seed=0, threshold=475.0, max_steps=100_000)
    print(f"CartPole seed 0: solved at {result.solved_at} in {result.seconds:.1f}s")
    assert result.solved_at is not None, result.evaluations


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cartpole_solves_for_seeds(seed: int) -> None:
    result = train_until("CartPole-v1", CARTPOLE, seed=seed, threshold=475.0, max_steps=100_000)
    print(f"CartPole seed {seed}: solved at {result.solved_at} in {result.seconds:.1f}s")
    assert result.solved_at is not None, result.evaluations


@pytest.mark.slow
def test_pendulum_reaches_minus_400_within_200k_steps() -> None:
    result = train_until("Pendulum-v1", PENDULUM, seed=0, threshold=-400.0, max_steps=200_000)
    print(f"Pendulum seed 0: reached -400 at {result.solved_at} in {result.seconds:.1f}s")
    assert result.solved_at is not None, result.evaluations
