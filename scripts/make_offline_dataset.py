"""Record an offline dataset from a policy into a Minari dataset or an MDP file (HDF5/.npz).

    # the file conf/env/cartpole_offline.yaml reads (scripted policy, eps 0.5, 100k steps):
    python scripts/make_offline_dataset.py
    # a Minari dataset (under MINARI_DATASETS_PATH):
    python scripts/make_offline_dataset.py --minari-id cartpole/scripted-v0
    # from a saved run's latest checkpoint, 20% random actions:
    python scripts/make_offline_dataset.py --policy runs/<run> --epsilon 0.2 --out d.h5

Policies: ``scripted`` (CartPole: push right when ``theta + 0.5 * theta_dot > 0``,
which balances to 500), ``random``, or a path to a run directory or an
``agent_*.pt`` checkpoint. Each step takes a uniformly random action with
probability ``--epsilon``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agilerl.arena.models.errors import EXIT_USER_ERROR, ConfigError
from agilerl.envs.offline import Episode, write_mdp_file, write_minari

DEFAULT_OUT = "data/cartpole_replay.npz"
"""The file ``conf/env/cartpole_offline.yaml`` reads."""

Policy = Callable[[np.ndarray], int]


def scripted_cartpole(obs: np.ndarray) -> int:
    """Push right when the pole falls right: ``a = 1 if theta + 0.5 * theta_dot > 0``."""
    return int(obs[2] + 0.5 * obs[3] > 0)


def checkpoint_policy(path: str | Path) -> Policy:
    """The greedy policy of a saved agent (a run directory or an ``agent_*.pt`` file)."""
    path = Path(path)
    if path.is_dir():
        pointer = path / "checkpoints" / "latest"
        if not pointer.exists():
            raise ConfigError(f"--policy: {path} has no checkpoints/latest")
        path = path / "checkpoints" / pointer.read_text().strip() / "agent_0.pt"
    if not path.is_file():
        raise ConfigError(f"--policy: {path} does not exist")
    from agilerl.algorithms.core.base import EvolvableAlgorithm

    try:
        agent: Any = EvolvableAlgorithm.load(path, device="cpu")
    except ValueError as exc:
        raise ConfigError(f"--policy: {exc}") from None

    def act(obs: np.ndarray) -> int:
        action = agent.get_action(obs[None], greedy=True)
        action = action[0] if isinstance(action, tuple) else action
        return int(np.asarray(action).reshape(-1)[0])

    return act


def make_policy(name: str, env_id: str) -> Policy | None:
    """``None`` for random, else a function of one observation."""
    if name == "random":
        return None
    if name == "scripted":
        if not env_id.startswith("CartPole"):
            raise ConfigError(f"--policy scripted only knows CartPole, not {env_id}")
        return scripted_cartpole
    return checkpoint_policy(name)


def record(
    env_id: str,
    policy: Policy | None,
    *,
    steps: int,
    epsilon: float,
    seed: int,
) -> list[Episode]:
    """Roll out ``policy`` with epsilon-random actions for at least ``steps`` steps.

    The last episode is cut at ``steps`` and kept as a truncated episode.
    """
    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    env.action_space.seed(seed)
    episodes: list[Episode] = []
    total, episode_index = 0, 0
    while total < steps:
        obs, _ = env.reset(seed=seed + episode_index)
        observations, actions, rewards = [obs], [], []
        terminated = truncated = False
        while not (terminated or truncated) and total < steps:
            if policy is None or rng.random() < epsilon:
                action = env.action_space.sample()
            else:
                action = policy(obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(reward)
            total += 1
        episodes.append(
            Episode(
                observations=np.asarray(observations, dtype=np.float32),
                actions=np.asarray(actions),
                rewards=np.asarray(rewards, dtype=np.float32),
                terminated=bool(terminated),
            )
        )
        episode_index += 1
    env.close()
    return episodes


def make_dataset(
    *,
    env_id: str = "CartPole-v1",
    policy: str = "scripted",
    steps: int = 100_000,
    epsilon: float = 0.5,
    seed: int = 0,
    out: str | Path | None = None,
    minari_id: str | None = None,
) -> list[Episode]:
    """Record and write a dataset (``out`` file and/or ``minari_id``); returns the episodes."""
    if out is None and minari_id is None:
        raise ConfigError("give --out FILE (.h5/.hdf5/.npz) or --minari-id ID")
    episodes = record(env_id, make_policy(policy, env_id), steps=steps, epsilon=epsilon, seed=seed)
    if out is not None:
        write_mdp_file(out, episodes, env_id=env_id)
    if minari_id is not None:
        write_minari(
            minari_id,
            episodes,
            env_id,
            algorithm_name=f"{policy} eps={epsilon}",
            description=f"{steps} steps of {policy} with epsilon {epsilon} in {env_id}",
        )
    return episodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium id")
    parser.add_argument("--policy", default="scripted", help="scripted, random or a run/checkpoint")
    parser.add_argument("--steps", type=int, default=100_000, help="transitions to record")
    parser.add_argument("--epsilon", type=float, default=0.5, help="random-action probability")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        help=f"MDP file to write (.h5, .hdf5 or .npz); default {DEFAULT_OUT} "
        "unless --minari-id is given",
    )
    parser.add_argument("--minari-id", help="Minari dataset id to write, e.g. cartpole/scripted-v0")
    args = parser.parse_args(argv)
    if args.out is None and args.minari_id is None:
        args.out = DEFAULT_OUT
    start = time.perf_counter()
    try:
        episodes = make_dataset(
            env_id=args.env,
            policy=args.policy,
            steps=args.steps,
            epsilon=args.epsilon,
            seed=args.seed,
            out=args.out,
            minari_id=args.minari_id,
        )
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USER_ERROR
    returns = [float(np.sum(ep.rewards)) for ep in episodes]
    print(
        f"{sum(len(ep) for ep in episodes)} transitions, {len(episodes)} episodes, "
        f"mean return {np.mean(returns):.1f}, {time.perf_counter() - start:.1f} s -> "
        f"{args.out or ''} {args.minari_id or ''}".rstrip()
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
