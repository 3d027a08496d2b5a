"""The squashed Gaussian sampler's hand-written backward against autograd of its forward."""

from __future__ import annotations

import pytest
import torch
from gymnasium import spaces

from agilerl.networks.fastgrad import GradTape, autograd_only
from agilerl.networks.squashed_gaussian import (
    _SQUASHED_SAMPLE,
    LOG_STD_MAX,
    LOG_STD_MIN,
    SquashedGaussianActor,
)


def _head_output(batch: int, dim: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    mean = torch.randn(batch, dim, generator=gen)
    # raw log stds on both sides of the clamp, so that its zero gradient is exercised
    raw = torch.linspace(LOG_STD_MIN - 3.0, LOG_STD_MAX + 3.0, batch * dim).reshape(batch, dim)
    return torch.cat([mean, raw], dim=-1)


@pytest.mark.parametrize("wanted", ["action", "log_prob", "both"])
def test_backward_matches_autograd(wanted: str) -> None:
    batch, dim = 64, 3
    out = _head_output(batch, dim).requires_grad_(True)
    noise = torch.randn(batch, dim, generator=torch.Generator().manual_seed(1))
    grad_action = torch.randn(batch, dim) if wanted != "log_prob" else None
    grad_log_prob = torch.randn(batch) if wanted != "action" else None

    (action, log_prob), saved = _SQUASHED_SAMPLE.forward(out, noise)
    terms = []
    if grad_action is not None:
        terms.append((action * grad_action).sum())
    if grad_log_prob is not None:
        terms.append((log_prob * grad_log_prob).sum())
    (expected,) = torch.autograd.grad(sum(terms), out)

    with torch.no_grad():
        _, saved = _SQUASHED_SAMPLE.forward(out.detach(), noise)
        got, noise_grad = _SQUASHED_SAMPLE.backward(saved, [grad_action, grad_log_prob])
    assert noise_grad is None
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    clamped = (out[:, dim:] < LOG_STD_MIN) | (out[:, dim:] > LOG_STD_MAX)
    assert clamped.any() and bool((got[:, dim:][clamped] == 0).all())


def test_actor_sample_through_tape_matches_autograd() -> None:
    """A tape's graph-free sample gives the actor the gradients plain autograd gives."""
    obs_space = spaces.Box(-1.0, 1.0, (4,))
    act_space = spaces.Box(-2.0, 2.0, (2,))
    net = {
        "latent_dim": 16,
        "encoder_config": {"hidden_size": [16]},
        "head_config": {"hidden_size": [16]},
    }
    actor = SquashedGaussianActor(obs_space, act_space, net_config=net)
    obs = torch.randn(32, 4, generator=torch.Generator().manual_seed(2))
    weights = torch.randn(32, 2, generator=torch.Generator().manual_seed(3))

    def grads(fast: bool) -> list[torch.Tensor]:
        actor.zero_grad(set_to_none=True)
        torch.manual_seed(4)
        tape = GradTape()
        action, log_prob = actor.sample(obs, tape)
        loss = (action * weights).sum() + 0.3 * log_prob.mean()
        tape.backward(loss)
        return [p.grad.clone() for p in actor.parameters()]

    fast = grads(True)
    with autograd_only():
        plain = grads(False)
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
