"""Offline dataset load time: our vectorised loader vs a row-by-row loader, 100k transitions.

Records a CartPole dataset (scripted policy, 50% random actions) as a Minari
dataset and as an HDF5 MDP file, then times, into a 100k replay buffer:

* ``ours (minari)``: :func:`agilerl.envs.offline.load_minari` + one ``add``;
* ``ours (hdf5)``: :func:`agilerl.envs.offline.load_mdp_file` + one ``add``;
* ``row by row (minari)``: iterate the episodes and add one transition per
  call, converting each field to a tensor first, as the public
  implementation's ``minari_to_agile_buffer`` does (it was measured at
  ~280 rows/s on this machine kind, ~5-6 minutes for 100k rows). The
  row-by-row time is extrapolated from ``--rows`` rows.

Usage::

    python scripts/bench/offline_load.py [--steps 100000] [--rows 5000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from make_offline_dataset import make_dataset

from agilerl.components.replay_buffer import ReplayBuffer
from agilerl.envs.offline import load_mdp_file, load_minari

DATASET_ID = "cartpole/bench-load-v0"


def _buffer(size: int) -> ReplayBuffer:
    env = gym.make("CartPole-v1")
    return ReplayBuffer(
        size, observation_space=env.observation_space, action_space=env.action_space
    )


def row_by_row(dataset_id: str, memory: ReplayBuffer, limit: int) -> int:
    """Add transitions one at a time (tensor conversion per field); returns rows added."""
    import minari

    rows = 0
    for episode in minari.load_dataset(dataset_id).iterate_episodes():
        for t in range(len(episode.rewards)):
            memory.add(
                torch.as_tensor(episode.observations[t]),
                torch.as_tensor(episode.actions[t]),
                torch.as_tensor(episode.rewards[t]),
                torch.as_tensor(episode.observations[t + 1]),
                torch.as_tensor(episode.terminations[t]),
                torch.as_tensor(episode.truncations[t]),
                is_vectorised=False,
            )
            rows += 1
            if rows >= limit:
                return rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=5_000, help="rows timed row by row")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MINARI_DATASETS_PATH"] = str(Path(tmp) / "minari")
        path = Path(tmp) / "d.h5"
        start = time.perf_counter()
        make_dataset(steps=args.steps, epsilon=0.5, seed=0, out=path, minari_id=DATASET_ID)
        print(f"recorded {args.steps} transitions in {time.perf_counter() - start:.1f} s")
        timings = {}
        for name, load in (("minari", lambda: load_minari(DATASET_ID)),
                           ("hdf5", lambda: load_mdp_file(path))):  # fmt: skip
            memory = _buffer(args.steps)
            start = time.perf_counter()
            load().fill(memory)
            timings[f"ours ({name})"] = time.perf_counter() - start
            assert len(memory) == args.steps
        memory = _buffer(args.steps)
        start = time.perf_counter()
        rows = row_by_row(DATASET_ID, memory, args.rows)
        per_row = (time.perf_counter() - start) / rows
        timings["row by row (minari, extrapolated)"] = per_row * args.steps
    print(f"{'loader':38s} {'seconds':>9s} {'rows/s':>12s}")
    for name, seconds in timings.items():
        print(f"{name:38s} {seconds:9.3f} {args.steps / seconds:12,.0f}")
    base = timings["row by row (minari, extrapolated)"]
    for name in ("ours (minari)", "ours (hdf5)"):
        print(f"speed-up {name} vs row by row: {base / timings[name]:.0f}x")
    public = args.steps / 280.0
    minari_x, hdf5_x = public / timings["ours (minari)"], public / timings["ours (hdf5)"]
    print(
        f"vs the public implementation (~280 rows/s measured): {minari_x:.0f}x (minari), "
        f"{hdf5_x:.0f}x (hdf5)"
    )


if __name__ == "__main__":
    main()
