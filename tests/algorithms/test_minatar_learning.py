"""DQN and PPO learn MinAtar Breakout in CPU-minutes, through train.py's conf groups.

Each run is the tuned preset (``conf/tuned/{dqn,ppo}_minatar_breakout.yaml``) with a
smaller budget; the trained agent's checkpoint is then played greedily for
:data:`EVAL_EPISODES` games. The bar, :data:`THRESHOLD` points a game, is held well above
the score of uniformly random play, measured here on the same env pipeline.

Needs the ``atari`` extra (left out of a ``.[dev]``-only run: ``tests/optional_extras.py``).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from agilerl.arena.models.env import GymEnvSpec
from agilerl.envs.gym import make_single_env
from agilerl.evaluate import evaluate_checkpoint

CONF = Path(__file__).resolve().parents[2] / "conf"
SEEDS = (0, 1, 2)
BUDGET = {"dqn": 40_000, "ppo": 40_960}
"""Env steps per run: at least 20 s per seed on two free CPU cores (see the report below)."""
THRESHOLD = 3.0
"""Points a game the trained greedy policy must average (random play: ~0.5)."""
EVAL_EPISODES = 20
RANDOM_EPISODES = 300


@pytest.fixture(scope="module")
def random_score() -> float:
    """Mean points a game of a uniformly random policy on the env group's pipeline."""
    section = yaml.safe_load((CONF / "env" / "minatar_breakout.yaml").read_text())
    env = make_single_env(GymEnvSpec(**{**section, "num_envs": 1}))
    env.action_space.seed(0)
    returns = []
    try:
        for episode in range(RANDOM_EPISODES):
            env.reset(seed=episode)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns))


def test_the_threshold_sits_well_above_random_play(random_score: float) -> None:
    assert random_score > 0.0 and 3 * random_score <= THRESHOLD, random_score


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("algorithm", sorted(BUDGET))
def test_learns_minatar_breakout(
    train_composed, tmp_path: Path, random_score: float, algorithm: str, seed: int
) -> None:
    started = time.perf_counter()
    train_composed(
        tmp_path,
        f"algorithm={algorithm}",
        "env=minatar_breakout",
        f"training.max_steps={BUDGET[algorithm]}",
        seed=seed,
    )
    seconds = time.perf_counter() - started
    result = evaluate_checkpoint(tmp_path, episodes=EVAL_EPISODES, seed=10_000)
    report = (
        f"{algorithm} seed {seed}: {result.mean:.2f} points a game after "
        f"{BUDGET[algorithm]:,} steps in {seconds:.0f} s (random play: {random_score:.2f})"
    )
    print(report)
    assert result.mean >= THRESHOLD > random_score, report
