"""Replay-buffer benchmark: memory of a 1M buffer, PER sample+update latency, throughput.

Prints

* the memory of a 1M-transition buffer (8-dim ``float32`` observations,
  ``Discrete`` actions) against the raw bytes of its fields, measured three
  ways: tensor ``nbytes``, ``tracemalloc`` peak and RSS growth while filling;
* PER ``sample(256) + update_priorities`` latency on 1M entries (median over
  many repetitions), and the segment-tree part alone;
* plain buffer ``add`` / ``sample`` throughput, and n-step ``add`` throughput.

Usage::

    python scripts/bench/buffers.py [--size 1000000] [--reps 2000]
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import torch
from gymnasium import spaces

from agilerl.components.replay_buffer import (
    MultiStepReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
)

OBS_DIM = 8
OBS_SPACE = spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
ACT_SPACE = spaces.Discrete(4)


def rss_bytes() -> int:
    """Resident set size of this process."""
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def raw_field_bytes(size: int) -> tuple[int, int]:
    """Raw bytes of obs+next_obs+action+reward+done, and of the extra truncated flag."""
    obs = size * OBS_DIM * 4
    return 2 * obs + size * 8 + size * 4 + size * 1, size * 1


def fill(buffer: ReplayBuffer, size: int, chunk: int, rng: np.random.Generator) -> float:
    """Add ``size`` random transitions in batches of ``chunk``; returns seconds taken."""
    obs = rng.standard_normal((chunk, OBS_DIM)).astype(np.float32)
    action = rng.integers(0, 4, chunk)
    reward = rng.standard_normal(chunk).astype(np.float32)
    done = rng.random(chunk) < 0.01
    start = time.perf_counter()
    for _ in range(size // chunk):
        buffer.add(obs, action, reward, obs, done)
    return time.perf_counter() - start


def time_us(fn: Callable[[], object], reps: int, warmup: int = 50) -> tuple[float, float]:
    """Median and 10th percentile of ``fn``'s wall time in microseconds.

    The 10th percentile shows the cost on a quiet core; the median includes
    interference from other processes.
    """
    for _ in range(warmup):
        fn()
    times = np.empty(reps)
    for i in range(reps):
        start = time.perf_counter_ns()
        fn()
        times[i] = time.perf_counter_ns() - start
    return float(np.median(times)) / 1e3, float(np.percentile(times, 10)) / 1e3


def median_us(fn: Callable[[], object], reps: int) -> float:
    """Median wall time of ``fn`` in microseconds."""
    return time_us(fn, reps)[0]


def fmt(times: tuple[float, float]) -> str:
    return f"median {times[0]:7.1f} us (p10 {times[1]:6.1f} us)"


def bench_memory(size: int, rng: np.random.Generator) -> None:
    raw, truncated = raw_field_bytes(size)
    print(f"== memory: {size:,} transitions, obs float32[{OBS_DIM}], Discrete actions ==")
    print(f"raw bytes of obs+next_obs+action+reward+done: {raw / 2**20:8.1f} MiB")
    for cls in (ReplayBuffer, PrioritizedReplayBuffer):
        gc.collect()
        rss_before = rss_bytes()
        tracemalloc.start()
        buffer = cls(size, observation_space=OBS_SPACE, action_space=ACT_SPACE)
        seconds = fill(buffer, size, 1000, rng)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss = rss_bytes() - rss_before
        print(
            f"{cls.__name__:>24}: nbytes {buffer.nbytes / 2**20:7.1f} MiB "
            f"(x{buffer.nbytes / raw:.3f} raw; x{buffer.nbytes / (raw + truncated):.3f} "
            f"counting the truncated flag) | tracemalloc peak x{peak / raw:.3f} | "
            f"RSS growth x{rss / raw:.3f} | filled in {seconds:.2f}s"
        )
        del buffer
    print()


def bench_per(size: int, reps: int, rng: np.random.Generator) -> None:
    buffer = PrioritizedReplayBuffer(size, alpha=0.6, seed=0)
    buffer.add(
        rng.standard_normal((size, OBS_DIM)).astype(np.float32),
        rng.integers(0, 4, size),
        rng.standard_normal(size).astype(np.float32),
        rng.standard_normal((size, OBS_DIM)).astype(np.float32),
        np.zeros(size, bool),
    )
    buffer.update_priorities(np.arange(size), rng.random(size) + 1e-3)
    batch_size = 256
    priorities = torch.rand(batch_size) + 1e-6

    def sample_update() -> None:
        batch = buffer.sample(batch_size, beta=0.4)
        buffer.update_priorities(batch["idxs"], priorities)

    sum_tree, min_tree = buffer.sum_tree, buffer.min_tree
    total = sum_tree.total()

    def tree_ops() -> None:
        points = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        idxs = sum_tree.find_prefixsum_idx(points)
        values = priorities.numpy() ** 0.6
        sum_tree.update(idxs, values)
        min_tree.update(idxs, values)

    def search_only() -> None:
        sum_tree.find_prefixsum_idx(rng.random(batch_size) * total)

    def update_only() -> None:
        idxs = rng.integers(0, size, batch_size)
        sum_tree.update(idxs, 1.0)
        min_tree.update(idxs, 1.0)

    print(f"== PER, {size:,} entries, batch {batch_size}, median of {reps} ==")
    print(f"sample + update_priorities (full API): {fmt(time_us(sample_update, reps))}")
    print(f"tree ops only (search + sum/min update): {fmt(time_us(tree_ops, reps))}")
    print(f"  prefix-sum search:                     {fmt(time_us(search_only, reps))}")
    print(f"  sum+min batch update:                  {fmt(time_us(update_only, reps))}")
    print()


def bench_throughput(rng: np.random.Generator, reps: int) -> None:
    size = 100_000
    print("== plain buffer throughput (8-dim float32 obs) ==")
    for num_envs in (1, 16, 256):
        buffer = ReplayBuffer(size, observation_space=OBS_SPACE, action_space=ACT_SPACE)
        obs = rng.standard_normal((num_envs, OBS_DIM)).astype(np.float32)
        act, rew, done = rng.integers(0, 4, num_envs), np.ones(num_envs), np.zeros(num_envs)
        us = median_us(lambda: buffer.add(obs, act, rew, obs, done), reps)  # noqa: B023
        print(
            f"add, {num_envs:>3} envs/call: {us:7.1f} us/call = "
            f"{num_envs / us * 1e6:12,.0f} transitions/s"
        )
    buffer.add(
        rng.standard_normal((size, OBS_DIM)).astype(np.float32),
        np.zeros(size, np.int64),
        np.ones(size),
        rng.standard_normal((size, OBS_DIM)).astype(np.float32),
        np.zeros(size),
    )
    for batch_size in (64, 256, 1024):
        us = median_us(lambda: buffer.sample(batch_size), reps)  # noqa: B023
        print(
            f"sample batch {batch_size:>4}: {us:7.1f} us/call = "
            f"{batch_size / us * 1e6:12,.0f} transitions/s"
        )
    nstep = MultiStepReplayBuffer(size, n_step=3, gamma=0.99)
    num_envs = 16
    obs = rng.standard_normal((num_envs, OBS_DIM)).astype(np.float32)
    act, rew = rng.integers(0, 4, num_envs), np.ones(num_envs)
    done = np.zeros(num_envs, bool)
    us = median_us(lambda: nstep.add(obs, act, rew, obs, done, done), reps)
    print(f"n-step (n=3) add, 16 envs/call: {us:7.1f} us/call = {16 / us * 1e6:12,.0f} steps/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="Buffer size.")
    parser.add_argument("--reps", type=int, default=2000, help="Timing repetitions.")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    bench_memory(args.size, rng)
    bench_per(args.size, args.reps, rng)
    bench_throughput(rng, args.reps)
    print(f"\ntotal {time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
