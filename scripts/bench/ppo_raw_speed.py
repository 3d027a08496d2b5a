"""Micro benchmark: env-steps/s of agilerl's PPO collect+learn loop on CartPole-v1.

Settings follow rl-zoo3's CartPole PPO (8 envs, 32 steps per env, batch 256,
20 epochs, separate 64x64 tanh actor and critic) with one torch thread. With
``--sb3`` it also times Stable-Baselines3's PPO on the same settings,
alternating the two in chunks of env steps so machine-speed drift affects
both alike.

Usage::

    python scripts/bench/ppo_raw_speed.py --steps 40000 [--chunk 5120] [--sb3]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode

from agilerl.algorithms.ppo import PPO
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.training.collect import collect_rollouts

NET_CONFIG = {
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
}


class AgileRLRunner:
    """agilerl PPO collect+learn loop that can be advanced in chunks of env steps."""

    def __init__(self, total_steps: int, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.env = gym.make_vec(
            "CartPole-v1",
            8,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        )
        self.agent = PPO(
            PPOSpec(),
            self.env.single_observation_space,
            self.env.single_action_space,
            net_config=NET_CONFIG,
            num_envs=8,
            learn_step=256,
            batch_size=256,
            update_epochs=20,
            gamma=0.98,
            gae_lambda=0.8,
            lr=1e-3,
            lr_schedule={"kind": "linear", "end": 0.0},
            total_steps=total_steps,
            clip_coef=0.2,
            ent_coef=0.0,
            share_encoders=False,
        )
        self.buffer = self.agent.create_rollout_buffer()
        self.obs, _ = self.env.reset(seed=seed)
        self.collect_time = self.learn_time = 0.0
        self.steps = 0

    def run(self, steps: int) -> None:
        """Advance by at least ``steps`` env steps (whole rollouts)."""
        target = self.agent.steps + steps
        while self.agent.steps < target:
            t0 = time.perf_counter()
            self.obs, _, _ = collect_rollouts(self.agent, self.env, self.buffer, self.obs)
            t1 = time.perf_counter()
            self.agent.learn(self.buffer)
            t2 = time.perf_counter()
            self.collect_time += t1 - t0
            self.learn_time += t2 - t1
        self.steps = self.agent.steps

    def figures(self) -> dict[str, float]:
        """Steps/s overall, for collection only and for learning only."""
        return {
            "total": self.steps / (self.collect_time + self.learn_time),
            "collect_only": self.steps / self.collect_time,
            "learn_only": self.steps / self.learn_time,
        }


class SB3Runner:
    """Stable-Baselines3 PPO on the same settings (needs the ``bench`` extra)."""

    def __init__(self, seed: int = 0) -> None:
        from stable_baselines3 import PPO as SB3PPO
        from stable_baselines3.common.env_util import make_vec_env

        env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
        self.model = SB3PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=1e-3,
            clip_range=0.2,
            seed=seed,
            device="cpu",
            verbose=0,
        )
        self.time = 0.0
        self.steps = 0

    def run(self, steps: int) -> None:
        """Advance by ``steps`` env steps."""
        t0 = time.perf_counter()
        self.model.learn(steps, reset_num_timesteps=self.steps == 0)
        self.time += time.perf_counter() - t0
        self.steps = self.model.num_timesteps

    def steps_per_second(self) -> float:
        """Steps/s of collect+learn."""
        return self.steps / self.time


def main() -> None:
    """Run the benchmark, alternating chunks between the implementations."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40_000, help="env steps per implementation")
    parser.add_argument("--chunk", type=int, default=5_120, help="env steps per alternation")
    parser.add_argument("--sb3", action="store_true", help="also time Stable-Baselines3")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ours = AgileRLRunner(args.steps)
    theirs = SB3Runner() if args.sb3 else None
    ours.run(512)  # warm-up, excluded from timing
    ours.collect_time = ours.learn_time = 0.0
    start = ours.agent.steps
    done = 0
    while done < args.steps:
        ours.run(args.chunk)
        if theirs is not None:
            theirs.run(args.chunk)
        done += args.chunk
    ours.steps -= start
    figures = ours.figures()
    print("agilerl steps/s: " + ", ".join(f"{k}={v:,.0f}" for k, v in figures.items()))
    if theirs is not None:
        sb3 = theirs.steps_per_second()
        print(f"sb3 steps/s: total={sb3:,.0f}; ratio={figures['total'] / sb3:.2f}x")


if __name__ == "__main__":
    main()
