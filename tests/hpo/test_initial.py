"""Populations that start from points drawn from the mutation ranges."""

from __future__ import annotations

import math
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest
import torch

from agilerl.algorithms import DQN
from agilerl.arena.models.algorithms.dqn import DQNSpec
from agilerl.hpo import sample_starts, start_population

RANGES = {
    "lr": (1e-5, 1e-2, 1.2, 0.8),
    "batch_size": (32, 256, 1.2, 0.8),
    "learn_step": (1, 8, 1.2, 0.8),
    "gamma": (0.9, 0.999, 1.2, 0.8),
}
NET = {
    "latent_dim": 32,
    "encoder_config": {"arch": "mlp", "hidden_size": [32], "max_mlp_nodes": 512},
    "head_config": {"hidden_size": [32], "activation": "ELU", "max_mlp_nodes": 512},
}


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _population(size: int) -> list[DQN]:
    env = gym.make("CartPole-v1")
    spec = DQNSpec(net_config=NET)
    return [DQN(spec, env.observation_space, env.action_space, index=i) for i in range(size)]


def test_wide_ranges_are_drawn_on_a_log_scale_and_integers_stay_integers() -> None:
    starts = sample_starts(RANGES, 600, np.random.default_rng(0))
    decades = np.histogram([math.log10(s["lr"]) for s in starts], bins=[-5, -4, -3, -2])[0]
    assert decades.min() > 150  # about 200 per decade; uniform draws would put ~540 in the last
    assert all(isinstance(s["batch_size"], int) and 32 <= s["batch_size"] <= 256 for s in starts)
    assert {s["learn_step"] for s in starts} == set(range(1, 9))
    assert all(0.9 <= s["gamma"] <= 0.999 for s in starts)
    assert sample_starts(RANGES, 5, np.random.default_rng(3)) == sample_starts(
        RANGES, 5, np.random.default_rng(3)
    )


def test_members_are_rebuilt_from_their_own_start() -> None:
    population = _population(2)
    starts = [
        {"lr": 3e-3, "batch_size": 48, "gamma": 0.95},
        {"lr": 2e-5, "learn_step": 7, "net_config": {"head_config": {"hidden_size": [128]}}},
    ]
    first, second = start_population(population, starts, seed=1)
    assert (first.index, second.index) == (0, 1)
    assert (first.spec.lr, first.batch_size, first.spec.gamma) == (3e-3, 48, 0.95)
    assert first.optimizer.param_groups[0]["lr"] == pytest.approx(3e-3)
    assert second.optimizer.param_groups[0]["lr"] == pytest.approx(2e-5)
    assert second.learn_step == 7
    head = second.net_config["head_config"]
    assert head["hidden_size"] == [128]
    assert head["activation"] == "ELU"  # the rest of the section is kept
    assert second.actor.head.linears[0].out_features == 128
    assert first.actor.head.linears[0].out_features == 32


def test_the_same_seed_builds_the_same_weights() -> None:
    starts = [{"lr": 1e-3}, {"lr": 1e-4}]
    one = start_population(_population(2), starts, seed=7)
    two = start_population(_population(2), starts, seed=7)
    for a, b in zip(one, two, strict=True):
        for (name, x), (_, y) in zip(
            a.actor.state_dict().items(), b.actor.state_dict().items(), strict=True
        ):
            assert torch.equal(x, y), name
    assert not torch.equal(one[0].actor.head.linears[0].weight, one[1].actor.head.linears[0].weight)


def test_too_few_starts_and_invalid_values_are_refused() -> None:
    with pytest.raises(ValueError, match="2 agents need as many starts"):
        start_population(_population(2), [{"lr": 1e-3}])
    with pytest.raises(ValueError, match="batch_size"):
        start_population(_population(1), [{"batch_size": 0}])


def test_starts_drawn_from_a_specs_ranges_are_valid_for_the_spec() -> None:
    """The spec's integer fields are drawn as integers (its ranges are stored as floats)."""
    from agilerl.hpo.ranges import ranges_from_spec

    ranges = ranges_from_spec(DQNSpec)
    for start in sample_starts(ranges, 20, np.random.default_rng(0), spec=DQNSpec):
        assert isinstance(start["batch_size"], int) and isinstance(start["learn_step"], int)
        DQNSpec(**start)  # every value validates
