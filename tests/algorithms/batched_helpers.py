"""Shared helpers of the stacked-group tests: random batches and lone-vs-stacked comparisons."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pytest
import torch

NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16]},
    "head_config": {"hidden_size": [16]},
}

BatchOf = Callable[[np.random.Generator, int], dict[str, np.ndarray]]


def random_batch(
    rng: np.random.Generator, size: int, obs_dim: int = 3, discrete: int | None = None
) -> dict[str, np.ndarray]:
    """``size`` random transitions: ``discrete`` actions, else 2-D actions in ``[-2, 2]``.

    Args:
        rng: Draws the transitions.
        size: How many.
        obs_dim: The observations' size.
        discrete: The number of discrete actions (``None``: continuous actions).

    Returns:
        The batch, keyed like a replay buffer's samples.
    """
    return {
        "obs": rng.standard_normal((size, obs_dim)).astype(np.float32),
        "action": rng.integers(0, discrete, size)
        if discrete is not None
        else rng.uniform(-2.0, 2.0, (size, 2)).astype(np.float32),
        "reward": rng.standard_normal(size).astype(np.float32),
        "next_obs": rng.standard_normal((size, obs_dim)).astype(np.float32),
        "done": (rng.random(size) < 0.2).astype(np.float32),
    }


def member_major(batches: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The members' batches joined into one batch, member after member."""
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def network_weights(agent: Any) -> list[torch.Tensor]:
    """Copies of the parameters of every network the agent names."""
    nets = [getattr(agent, name) for name in agent.network_names]
    return [p.detach().clone() for net in nets for p in net.parameters()]


def assert_learns_like_lone(
    lone: Sequence[Any],
    group: Any,
    rng: np.random.Generator,
    batch_of: BatchOf,
    keys: Iterable[str],
    updates: int = 6,
) -> None:
    """``updates`` group updates of every member give what each lone agent's ``learn`` gives.

    Args:
        lone: The members' unstacked twins.
        group: The stacked group (all of ``lone``'s twins, in order).
        rng: Draws the batches.
        batch_of: ``batch_of(rng, size)``: one member's batch.
        keys: The statistics compared (``actor_updated`` too where ``learn`` returns it).
        updates: How many updates.
    """
    keys = tuple(keys)
    for _ in range(updates):
        batches = [batch_of(rng, 8) for _ in lone]
        expected = [agent.learn(b) for agent, b in zip(lone, batches, strict=True)]
        got = group.learn(range(len(lone)), batches)
        for e, g in zip(expected, got, strict=True):
            if "actor_updated" in e:
                assert g["actor_updated"] == e["actor_updated"]
            for key in keys:
                assert g[key] == pytest.approx(e[key], rel=1e-4, abs=1e-6), key


def learn_subsets(
    lone: Sequence[Any],
    group: Any,
    rng: np.random.Generator,
    batch_of: BatchOf,
    subsets: Iterable[Sequence[int]],
) -> None:
    """Only some members learn (different learn steps), alone and in the group."""
    for subset in subsets:
        batches = [batch_of(rng, 8) for _ in subset]
        for r, b in zip(subset, batches, strict=True):
            lone[r].learn(b)
        group.learn(subset, batches)


def assert_same_members(
    lone: Sequence[Any],
    stacked: Sequence[Any],
    weights: Callable[[Any], list[torch.Tensor]],
    optimizers: Sequence[str],
    counted: Sequence[str] = (),
) -> None:
    """The synced members equal their lone twins: updates, Adam state and weights.

    Args:
        lone: The agents that learnt alone.
        stacked: The group's members (after ``sync``).
        weights: The weights compared, per agent.
        optimizers: The :class:`~agilerl.networks.optim.FlatAdam` s compared (steps and moments).
        counted: Other optimizers whose step counts are compared.
    """
    for a, b in zip(lone, stacked, strict=True):
        assert a.num_updates == b.num_updates
        for opt in (*optimizers, *counted):
            assert getattr(a, opt).step_count == getattr(b, opt).step_count
        for opt in optimizers:
            torch.testing.assert_close(getattr(b, opt).exp_avg_sq, getattr(a, opt).exp_avg_sq)
        for x, y in zip(weights(a), weights(b), strict=True):
            torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-6)


def assert_acts_like_lone(lone: Sequence[Any], group: Any) -> None:
    """A continuous-action group's actions (greedy and noisy) equal its lone twins'."""
    obs = np.random.default_rng(1).standard_normal((3, 5, 3)).astype(np.float32)
    for greedy in (True, False, False):
        expected = [a.get_action(obs[i], greedy=greedy) for i, a in enumerate(lone)]
        got = group.act(obs, [0.0] * 3, greedy=greedy)
        for e, g in zip(expected, got, strict=True):
            assert g.shape == e.shape == (5, 2)
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
