"""CQN vs d3rlpy's DiscreteCQL on the same CartPole dataset and the same gradient steps.

d3rlpy 2.8.1 pins ``gymnasium==1.0.0``, so it runs in its own virtualenv,
which this script creates on first use (``--venv``, default
``.bench_venvs/d3rlpy``; never part of CI). Both learners read the same HDF5
MDP file recorded by ``scripts/make_offline_dataset.py`` (scripted policy,
``--epsilon`` random actions), and both are evaluated greedily on
``--episodes`` CartPole episodes every ``--every`` gradient steps. Our MDP
layout is d3rlpy's: ``terminals`` are true terminations and
``episode_terminals & ~terminals`` are its ``timeouts``.

Usage::

    python scripts/bench/cqn_vs_d3rlpy.py [--steps 5000] [--epsilon 0.5] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

D3RLPY_PACKAGES = ["torch==2.13.0", "d3rlpy==2.8.1", "gymnasium==1.0.0", "h5py"]

WORKER = r"""
import json, sys, time
import h5py, numpy as np, gymnasium as gym, d3rlpy, torch
torch.set_num_threads(1)
path = sys.argv[1]
steps, every, episodes, seed, batch = (int(a) for a in sys.argv[2:7])
lr = float(sys.argv[7])
with h5py.File(path, "r") as f:
    obs, act, rew = f["observations"][()], f["actions"][()], f["rewards"][()]
    term, ends = f["terminals"][()].astype(bool), f["episode_terminals"][()].astype(bool)
dataset = d3rlpy.dataset.MDPDataset(obs, act.reshape(-1, 1), rew, term, ends & ~term,
                                    action_space=d3rlpy.constants.ActionSpace.DISCRETE)
d3rlpy.seed(seed)
cql = d3rlpy.algos.DiscreteCQLConfig(batch_size=batch, learning_rate=lr).create(device="cpu:0")
env = gym.make("CartPole-v1")
scores, start = [], time.perf_counter()
fitter = cql.fitter(dataset, n_steps=steps, n_steps_per_epoch=every, show_progress=False,
                    save_interval=10**9, logger_adapter=d3rlpy.logging.NoopAdapterFactory())
for epoch, _ in fitter:
    returns = []
    for i in range(episodes):
        o, _ = env.reset(seed=10_000 + i)
        done, total = False, 0.0
        while not done:
            o, r, te, tr, _ = env.step(int(cql.predict(o[None])[0]))
            total += r
            done = te or tr
        returns.append(total)
    scores.append(float(np.mean(returns)))
print(json.dumps({"scores": scores, "seconds": time.perf_counter() - start}))
"""


def run_ours(path: Path, steps: int, every: int, episodes: int, seed: int, batch: int,
             lr: float) -> dict:  # fmt: skip
    import gymnasium as gym
    import torch

    from agilerl.algorithms.cqn import CQN
    from agilerl.arena.models.algorithms.cqn import CQNSpec
    from agilerl.arena.models.training import TrainingSpec
    from agilerl.components.replay_buffer import ReplayBuffer
    from agilerl.envs.offline import load_mdp_file
    from agilerl.training.run_context import RunContext
    from agilerl.training.train_offline import train_offline

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    env = gym.make_vec("CartPole-v1", num_envs=min(episodes, 16), vectorization_mode="sync")
    spec = CQNSpec(batch_size=batch, lr=lr, tau=1e-3, double=True)
    agent = CQN(spec, env.single_observation_space, env.single_action_space)
    memory = ReplayBuffer(200_000, observation_space=env.single_observation_space,
                          action_space=env.single_action_space, seed=seed)  # fmt: skip
    start = time.perf_counter()
    training = TrainingSpec(max_steps=steps, evo_steps=every, eval_loop=episodes)
    train_offline([agent], env, "CartPole-v1", "CQN", training=training, memory=memory,
                  dataset=load_mdp_file(path), run=RunContext.ephemeral(seed))  # fmt: skip
    env.close()
    return {"scores": list(agent.fitness), "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5_000)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=0.5)
    parser.add_argument("--dataset-steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--venv", type=Path, default=REPO / ".bench_venvs" / "d3rlpy")
    args = parser.parse_args()

    from make_offline_dataset import make_dataset
    from peer_venv import ensure_venv

    python = ensure_venv(args.venv, D3RLPY_PACKAGES)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cartpole.h5"
        make_dataset(steps=args.dataset_steps, epsilon=args.epsilon, seed=0, out=path)
        worker = Path(tmp) / "worker.py"
        worker.write_text(WORKER)
        results: dict[str, list[dict]] = {"agilerl CQN": [], "d3rlpy DiscreteCQL": []}
        for seed in args.seeds:
            common = [args.steps, args.every, args.episodes, seed, args.batch_size, args.lr]
            results["agilerl CQN"].append(run_ours(path, *common))
            out = subprocess.run([str(python), str(worker), str(path), *map(str, common)],
                                 check=True, capture_output=True, text=True)  # fmt: skip
            results["d3rlpy DiscreteCQL"].append(json.loads(out.stdout.strip().splitlines()[-1]))
    checkpoints = [args.every * (i + 1) for i in range(args.steps // args.every)]
    print(f"CartPole-v1, eps={args.epsilon} dataset, batch {args.batch_size}, lr {args.lr}, "
          f"{args.episodes} greedy episodes per evaluation, seeds {args.seeds}")  # fmt: skip
    print(f"{'learner':22s} " + " ".join(f"{s:>7d}" for s in checkpoints) + f" {'seconds':>9s}")
    for name, runs in results.items():
        scores = [sum(r["scores"][i] for r in runs) / len(runs) for i in range(len(checkpoints))]
        seconds = sum(r["seconds"] for r in runs) / len(runs)
        print(f"{name:22s} " + " ".join(f"{s:7.1f}" for s in scores) + f" {seconds:9.1f}")
    ours = sum(r["seconds"] for r in results["agilerl CQN"])
    theirs = sum(r["seconds"] for r in results["d3rlpy DiscreteCQL"])
    print(f"wall-time ratio d3rlpy / agilerl (training + evaluation): {theirs / ours:.2f}")


if __name__ == "__main__":
    main()
