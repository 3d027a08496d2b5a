"""Shared pieces of actor and critic construction."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from agilerl.networks.mlp import MLP

POLICY_OUTPUT_GAIN = 0.01
VALUE_OUTPUT_GAIN = 1.0


@contextlib.contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Run the block with torch's CPU RNG seeded by ``seed`` (no effect when ``None``)."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def build_head(
    latent_dim: int, num_outputs: int, head_config: Mapping[str, Any], output_gain: float
) -> MLP:
    """MLP head from a resolved ``head_config``."""
    kwargs = {k: v for k, v in head_config.items() if k not in ("arch", "output_vanish")}
    return MLP(latent_dim, num_outputs, output_gain=output_gain, **kwargs)
