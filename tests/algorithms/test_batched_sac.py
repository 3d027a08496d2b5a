"""A stacked SAC group learns and acts exactly like its members would alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms.batched import LoneGroup, SACGroup, make_groups
from agilerl.algorithms.sac import SAC
from agilerl.arena.models.algorithms.sac import SACSpec

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(-2.0, 2.0, (2,), np.float32)
NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16]},
    "head_config": {"hidden_size": [16]},
}
HPS = [
    {"lr_actor": 1e-3, "lr_critic": 2e-3, "gamma": 0.99, "tau": 0.05, "policy_freq": 2},
    {"lr_actor": 5e-3, "lr_critic": 1e-3, "gamma": 0.9, "tau": 1.0, "policy_freq": 1,
     "lr_alpha": 1e-2, "target_entropy": -0.5, "noise_correlation": 0.5},
    {"lr_actor": 2e-4, "lr_critic": 5e-4, "gamma": 0.97, "tau": 0.0, "policy_freq": 3,
     "learn_alpha": False, "alpha_init": 0.2},
]  # fmt: skip


def _agent(index: int, net: dict | None = None, **hps: object) -> SAC:
    torch.manual_seed(100 + index)
    spec = SACSpec.model_validate({"net_config": net or NET, "batch_size": 8, **hps})
    return SAC(spec, OBS, ACT, index=index)


def _population(net: dict | None = None) -> list[SAC]:
    return [_agent(i, net, **hp) for i, hp in enumerate(HPS)]


def _batch(rng: np.random.Generator, size: int) -> dict[str, np.ndarray]:
    return {
        "obs": rng.standard_normal((size, 3)).astype(np.float32),
        "action": rng.uniform(-2.0, 2.0, (size, 2)).astype(np.float32),
        "reward": rng.standard_normal(size).astype(np.float32),
        "next_obs": rng.standard_normal((size, 3)).astype(np.float32),
        "done": (rng.random(size) < 0.2).astype(np.float32),
    }


def _weights(agent: SAC) -> list[torch.Tensor]:
    nets = [getattr(agent, name) for name in agent.network_names]
    return [p.detach().clone() for net in nets for p in net.parameters()] + [
        agent.log_alpha.detach().clone()
    ]


@pytest.mark.parametrize("layer_norm", [False, True])
def test_group_updates_match_lone_agents(layer_norm: bool) -> None:
    torch.set_num_threads(1)
    net = {**NET, "head_config": {"hidden_size": [16], "layer_norm": layer_norm}}
    lone, stacked = _population(net), _population(net)
    groups = make_groups(stacked)
    assert len(groups) == 1 and isinstance(groups[0], SACGroup)
    group = groups[0]
    rng = np.random.default_rng(0)
    keys = ("critic_loss", "actor_loss", "alpha_loss", "entropy", "alpha", "q_mean")
    for _ in range(6):
        batches = [_batch(rng, 8) for _ in lone]
        expected = [agent.learn(b) for agent, b in zip(lone, batches, strict=True)]
        got = group.learn(range(3), batches)
        for e, g in zip(expected, got, strict=True):
            assert g["actor_updated"] == e["actor_updated"]
            for key in keys:
                assert g[key] == pytest.approx(e[key], rel=1e-4, abs=1e-6), key
    # Only some members learn (different learn steps): the others must not move.
    for subset in ([2], [0, 1]):
        batches = [_batch(rng, 8) for _ in subset]
        for r, b in zip(subset, batches, strict=True):
            lone[r].learn(b)
        group.learn(subset, batches)
    group.sync()
    for a, b in zip(lone, stacked, strict=True):
        assert a.num_updates == b.num_updates
        for opt in ("actor_optimizer", "critic_optimizer", "alpha_optimizer"):
            assert getattr(a, opt).step_count == getattr(b, opt).step_count
        for opt in ("actor_optimizer", "critic_optimizer"):
            torch.testing.assert_close(getattr(b, opt).exp_avg_sq, getattr(a, opt).exp_avg_sq)
        for x, y in zip(_weights(a), _weights(b), strict=True):
            torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-6)
    fresh, moved = _weights(_population(net)[1]), _weights(stacked[1])
    assert not torch.equal(fresh[0], moved[0]) and not torch.equal(fresh[-1], moved[-1])


def test_group_acts_like_lone_agents() -> None:
    lone, stacked = _population(), _population()
    group = make_groups(stacked)[0]
    obs = np.random.default_rng(1).standard_normal((3, 5, 3)).astype(np.float32)
    for greedy in (True, False, False):
        expected = [a.get_action(obs[i], greedy=greedy) for i, a in enumerate(lone)]
        got = group.act(obs, [0.0] * 3, greedy=greedy)
        for e, g in zip(expected, got, strict=True):
            assert g.shape == e.shape == (5, 2)
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_shared_encoders_learn_alone() -> None:
    groups = make_groups([_agent(0), _agent(1, share_encoders=True), _agent(2)])
    assert [g.slots for g in groups] == [[0, 2], [1]]
    assert [type(g) for g in groups] == [SACGroup, LoneGroup]
