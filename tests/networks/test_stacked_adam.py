"""StackedAdam: each row of a stacked group steps exactly as its member's own FlatAdam."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agilerl.networks.optim import FlatAdam
from agilerl.networks.stacked import StackedAdam

LRS = [1e-3, 3e-4, 2e-3]
BETAS = [(0.9, 0.999), (0.8, 0.99), (0.9, 0.999)]
EPS = [1e-8, 1e-5, 1e-8]


def _members(fused: bool, size: int = 257) -> list[FlatAdam]:
    torch.manual_seed(0)
    nets = [nn.Linear(size, 1, bias=False) for _ in LRS]
    return [
        FlatAdam(n.parameters(), lr=lr, betas=b, eps=e, fused=fused)
        for n, lr, b, e in zip(nets, LRS, BETAS, EPS, strict=True)
    ]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("rows", [None, [0, 2]], ids=["all", "subset"])
def test_rows_match_their_members_bit_for_bit(rows: list[int] | None, fused: bool) -> None:
    members = _members(fused)
    stack = StackedAdam.of(members, torch.stack([m.flat.clone() for m in members]))
    assert stack.fused == members[0].fused
    stepped = list(range(len(members))) if rows is None else rows
    generator = torch.Generator().manual_seed(1)
    for _ in range(50):
        # gradients over several orders of magnitude, as early and late in training
        grad = torch.randn(len(stepped), members[0].flat.numel(), generator=generator)
        grad *= 10.0 ** torch.randn(len(stepped), 1, generator=generator)
        for g, i in zip(grad, stepped, strict=True):
            members[i].flat_grad.copy_(g)
            members[i].step()
        stack.step(grad.clone(), rows)
    for i, member in enumerate(members):
        assert torch.equal(stack.params[i], member.flat), i
        assert torch.equal(stack.exp_avg_sq[i], member.exp_avg_sq), i
        assert stack.steps[i] == member.step_count
    if rows is not None:  # a row left out keeps its state
        assert stack.steps[1] == 0 and not members[1].exp_avg.any()


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_a_step_moves_the_version_counters_caches_key_on(fused: bool) -> None:
    """PPO keys its acting snapshot on ``flat._version``: every step must bump it."""
    (member, *_) = _members(fused)
    before = member.flat._version
    member.flat_grad.normal_()
    member.step()
    assert member.flat._version > before
    stack = StackedAdam.of([member], member.flat.view(1, -1).clone())
    before = stack.params._version
    stack.step(torch.ones_like(stack.params))
    assert stack.params._version > before
