"""Masked PPO learns connect four against the random opponent, through train.py's conf groups.

The run is the tuned preset (``conf/tuned/ppo_connect_four.yaml``) with a smaller
budget; its checkpoint then plays :data:`EVAL_EPISODES` greedy games (``agilerl
evaluate``'s path). The bar, :data:`THRESHOLD` (wins minus losses a game), sits well
above uniformly random legal play, measured here on the same env. The env raises on
an illegal move, so every run below also shows that no masked action was taken.
A frozen copy of the trained agent then serves as the opponent of a second run.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from agilerl.arena.models.env import GymEnvSpec
from agilerl.envs.gym import make_single_env
from agilerl.evaluate import evaluate_checkpoint, resolve_agent_file

CONF = Path(__file__).resolve().parents[2] / "conf"
BUDGET = 30_720
"""Env steps of the learning run (30 rollouts of the preset's 1,024)."""
THRESHOLD = 0.5
"""Wins minus losses a game the trained greedy policy must average (random play: ~0)."""
EVAL_EPISODES = 50
RANDOM_EPISODES = 300


@pytest.fixture(scope="module")
def random_score() -> float:
    """Mean return of uniformly random legal moves against the env's random opponent."""
    section = yaml.safe_load((CONF / "env" / "connect_four.yaml").read_text())
    env = make_single_env(GymEnvSpec(**{**section, "num_envs": 1}))
    rng = np.random.default_rng(0)
    returns = []
    for episode in range(RANDOM_EPISODES):
        obs, _ = env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            legal = np.flatnonzero(obs["action_mask"])
            obs, reward, terminated, truncated, _ = env.step(rng.choice(legal))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def test_the_threshold_sits_well_above_random_play(random_score: float) -> None:
    assert abs(random_score) < 0.2 and random_score + 0.3 < THRESHOLD, random_score


def test_a_frozen_agent_is_an_opponent(train_composed, tmp_path: Path) -> None:
    """A run's checkpoint plays the other seat of the next run (tiny budgets)."""
    first, second = tmp_path / "first", tmp_path / "second"
    small = ("training.max_steps=1024", "training.evo_steps=512", "algorithm.learn_step=512")
    train_composed(first, "algorithm=ppo", "env=connect_four", *small, seed=0)
    train_composed(
        second,
        "algorithm=ppo",
        "env=connect_four",
        f"environment.env_config.opponent={first}",
        *small,
        seed=1,
    )
    assert evaluate_checkpoint(second, episodes=2, seed=5).mean in (-1.0, -0.5, 0.0, 0.5, 1.0)


@pytest.mark.parametrize("algorithm", ["dqn", "ppo"])
def test_a_masked_run_repeats_with_its_seed(train_composed, tmp_path: Path, algorithm: str) -> None:
    small = ("training.max_steps=1024", "training.evo_steps=512")
    own = ("algorithm.learn_step=512",) if algorithm == "ppo" else ("training.learning_delay=64",)
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        train_composed(run, f"algorithm={algorithm}", "env=connect_four", *small, *own, seed=3)
    first, second = (torch.load(resolve_agent_file(r, 0), weights_only=True) for r in runs)
    for name, weights in first["networks"].items():
        for key, value in weights.items():
            assert torch.equal(value, second["networks"][name][key]), (name, key)


@pytest.mark.slow
def test_ppo_learns_connect_four_against_random(
    train_composed, tmp_path: Path, random_score: float
) -> None:
    started = time.perf_counter()
    train_composed(
        tmp_path, "algorithm=ppo", "env=connect_four", f"training.max_steps={BUDGET}", seed=0
    )
    seconds = time.perf_counter() - started
    result = evaluate_checkpoint(tmp_path, episodes=EVAL_EPISODES, seed=10_000)
    report = (
        f"ppo: {result.mean:.2f} wins minus losses a game after {BUDGET:,} steps in "
        f"{seconds:.0f} s (random play: {random_score:.2f})"
    )
    print(report)
    assert result.mean >= THRESHOLD > random_score, report
