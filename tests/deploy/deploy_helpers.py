"""Tiny trained runs (a second or less each) and env observations for the deploy tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

TINY_NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16]},
    # full-size outputs, so that continuous actions reach (and get clipped at) the bounds
    "head_config": {"hidden_size": [16], "output_vanish": False},
}
PPO = {"name": "PPO", "learn_step": 128, "batch_size": 64, "update_epochs": 1}
RUNS: dict[str, tuple[dict[str, Any], str]] = {
    "PPO discrete": (PPO, "CartPole-v1"),
    "PPO continuous": (PPO, "Pendulum-v1"),
    "DQN": ({"name": "DQN", "batch_size": 32}, "CartPole-v1"),
    "Rainbow DQN": ({"name": "Rainbow DQN", "batch_size": 32}, "CartPole-v1"),
    "SAC": ({"name": "SAC", "batch_size": 32}, "Pendulum-v1"),
    "TD3": ({"name": "TD3", "batch_size": 32}, "Pendulum-v1"),
    "DDPG": ({"name": "DDPG", "batch_size": 32}, "Pendulum-v1"),
}
"""Run name -> (algorithm section, gymnasium id)."""


def train_tiny(run_dir: Path, name: str, **training: Any) -> Path:
    """Train ``RUNS[name]`` for 256 env steps into ``run_dir`` (learning starts at step 64)."""
    from agilerl.trainer import LocalTrainer

    algorithm, env = RUNS[name]
    off_policy = algorithm["name"] != "PPO"
    LocalTrainer(
        algorithm,
        {"name": env, "num_envs": 2},
        {
            "max_steps": 256,
            "evo_steps": 256,
            "eval_loop": 1,
            "eval_steps": 50,
            **({"learning_delay": 64} if off_policy else {}),
            **training,
        },
        network=TINY_NET,
        replay_buffer={"max_size": 1000} if off_policy else None,
        run_dir=run_dir,
        verbose=False,
        logger={"tensorboard": False},
    ).train()
    return run_dir


def env_observations(env: Any, count: int, seed: int = 0) -> np.ndarray:
    """``count`` observations of ``env`` under random actions (episodes restart as they end)."""
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    seen = []
    for _ in range(count):
        seen.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    return np.stack(seen)
