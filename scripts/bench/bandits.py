"""Cumulative regret of NeuralUCB, NeuralTS, LinUCB and random pulls on scikit-learn tables.

Every learner sees the same rows (the bandit's sampler is seeded per seed);
the neural agents run through :func:`agilerl.training.train_bandits.train_bandits`
with the conf defaults (Adam, batch 64, one update every 2 pulls, gamma 1, lamb 1).

Usage::

    python scripts/bench/bandits.py [--steps 2000] [--datasets iris wine digits] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "algorithms_offline"))

from bandit_baselines import LinUCB, cumulative_regret  # noqa: E402

from agilerl.algorithms.neural_ts import NeuralTS  # noqa: E402
from agilerl.algorithms.neural_ucb import NeuralUCB  # noqa: E402
from agilerl.arena.models.algorithms.neural_ts import NeuralTSSpec  # noqa: E402
from agilerl.arena.models.algorithms.neural_ucb import NeuralUCBSpec  # noqa: E402
from agilerl.arena.models.env import BanditEnvSpec  # noqa: E402
from agilerl.arena.models.training import TrainingSpec  # noqa: E402
from agilerl.components.replay_buffer import ReplayBuffer  # noqa: E402
from agilerl.envs.bandits import make_bandit_env  # noqa: E402
from agilerl.training.run_context import RunContext  # noqa: E402
from agilerl.training.train_bandits import train_bandits  # noqa: E402


def neural(cls, spec, env, steps: int, seed: int) -> float:
    torch.manual_seed(seed)
    agent = cls(spec, env.observation_space, env.action_space)
    memory = ReplayBuffer(steps, observation_space=env.observation_space,
                          action_space=env.action_space, seed=seed)  # fmt: skip
    run = RunContext.ephemeral(seed)
    training = TrainingSpec(max_steps=steps, evo_steps=steps)
    train_bandits([agent], env, "", "", training=training, memory=memory, run=run)
    return run.extra_state["member_trainer"]["regret"][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2_000)
    parser.add_argument("--datasets", nargs="+", default=["iris", "wine", "digits"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"cumulative regret after {args.steps} pulls, mean over seeds {args.seeds}")
    print(f"{'dataset':10s} {'NeuralUCB':>10s} {'NeuralTS':>10s} {'LinUCB':>10s} {'random':>10s}")
    for name in args.datasets:
        rows = {"NeuralUCB": [], "NeuralTS": [], "LinUCB": [], "random": []}
        start = time.perf_counter()
        for seed in args.seeds:
            env = make_bandit_env(BanditEnvSpec(dataset=name), seed=seed)
            rows["NeuralUCB"].append(neural(NeuralUCB, NeuralUCBSpec(), env.copy(seed), args.steps,
                                            seed))  # fmt: skip
            rows["NeuralTS"].append(neural(NeuralTS, NeuralTSSpec(), env.copy(seed), args.steps,
                                           seed))  # fmt: skip
            linear = LinUCB(env.observation_space.shape[0])
            rows["LinUCB"].append(cumulative_regret(env.copy(seed), args.steps, linear, seed))
            rows["random"].append(cumulative_regret(env.copy(seed), args.steps, None, seed))
        cells = " ".join(f"{np.mean(v):10.1f}" for v in rows.values())
        print(f"{name:10s} {cells}   ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
