"""Subnormal floats are flushed to zero while a run trains, and only then."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from agilerl.networks.optim import FlatAdam
from agilerl.trainer import LocalTrainer
from agilerl.training.numerics import denormals_flushed, flushing_denormals

TINY = torch.finfo(torch.float32).tiny


def _idle_moment(steps: int) -> torch.Tensor:
    """Adam's first moment of a weight whose gradient went to zero ``steps`` steps ago."""
    weight = nn.Parameter(torch.ones(8))
    adam = FlatAdam([weight], lr=1e-3)
    weight.grad = torch.ones(8)
    adam.step()
    for _ in range(steps):
        adam.zero_grad()
        weight.grad = torch.zeros(8)
        adam.step()
    return adam.state_dict()["state"]["exp_avg"]


def test_block_flushes_and_restores() -> None:
    assert not flushing_denormals()
    with denormals_flushed() as on:
        assert on and flushing_denormals()
        assert torch.tensor(1e-30).mul(1e-10).item() == 0.0
    assert not flushing_denormals()
    assert torch.tensor(1e-30).mul(1e-10).item() > 0.0
    with denormals_flushed(False) as on:
        assert not on and not flushing_denormals()


def test_an_idle_weights_adam_moment_reaches_zero_not_a_subnormal() -> None:
    # 0.1 * 0.9**850 ~ 1.3e-40: subnormal unless flushed
    moment, recent = _idle_moment(850), _idle_moment(100)
    assert 0.0 < moment.abs().max().item() < TINY
    with denormals_flushed():
        assert _idle_moment(850).abs().max().item() == 0.0
        # a value above the subnormal range is the same bit for bit
        torch.testing.assert_close(_idle_moment(100), recent, rtol=0, atol=0)


def test_trainer_flushes_while_it_trains_and_restores_after(tmp_path: Path) -> None:
    seen: list[bool] = []

    class Probe(LocalTrainer):
        def _seed_everything(self) -> None:
            seen.append(flushing_denormals())
            super()._seed_everything()

    budget = {"max_steps": 256, "evo_steps": 256, "eval_loop": 1, "eval_steps": 50}
    for flush in (True, False):
        Probe(
            "DQN",
            "CartPole-v1",
            budget,
            run_dir=tmp_path / str(flush),
            verbose=False,
            logger={"tensorboard": False},
            flush_denormal=flush,
        ).train()
    assert seen == [True, False]
    assert not flushing_denormals()
