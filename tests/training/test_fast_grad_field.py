"""``training.fast_grad``: the graph-free gradient path is optional and changes no result.

Per algorithm, a short run on the fast path and one on plain autograd
(``fast_grad: false``) end with the same weights within float tolerance, and
only the first runs the hand-written backward passes (counted, and they ran,
so the weights moved), so the field acts: a run that ignored it would take
the fast path both times.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from agilerl.arena.models import ConfigError
from agilerl.networks import fastgrad
from agilerl.trainer import LocalTrainer

pytestmark = pytest.mark.filterwarnings("ignore:.*has no replay_buffer section")

RUNS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "PPO": ("CartPole-v1", {"learn_step": 128, "batch_size": 64, "update_epochs": 2}, {}),
    "DQN": ("CartPole-v1", {"learn_step": 4, "batch_size": 32}, {"learning_delay": 64}),
    "RainbowDQN": ("CartPole-v1", {"learn_step": 4, "batch_size": 32}, {"learning_delay": 64}),
    "DDPG": ("Pendulum-v1", {"learn_step": 4, "batch_size": 32}, {"learning_delay": 64}),
    "TD3": ("Pendulum-v1", {"learn_step": 4, "batch_size": 32}, {"learning_delay": 64}),
    "SAC": ("Pendulum-v1", {"learn_step": 4, "batch_size": 32}, {"learning_delay": 64}),
    "IPPO": ("mpe2.simple_speaker_listener_v4", {"learn_step": 64, "batch_size": 32}, {}),
    "MADDPG": ("mpe2.simple_speaker_listener_v4", {"learn_step": 4, "batch_size": 32}, {}),
    "MATD3": ("mpe2.simple_speaker_listener_v4", {"learn_step": 4, "batch_size": 32}, {}),
}


def _modules(value: Any) -> Iterator[nn.Module]:
    if isinstance(value, nn.Module):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _modules(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _modules(item)


def _weights(agent: Any) -> list[torch.Tensor]:
    """Every parameter the agent holds, in a fixed order."""
    seen: set[int] = set()
    out = []
    for name in sorted(vars(agent)):
        for module in _modules(vars(agent)[name]):
            for param in module.parameters():
                if id(param) not in seen:
                    seen.add(id(param))
                    out.append(param.detach().clone())
    return out


class _Counter:
    """Counts calls of the hand-written backward passes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        for owner in (fastgrad.MLPChain, fastgrad.StackedChain):
            original = owner.backward

            def counted(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                self.calls += 1
                return _original(*args, **kwargs)

            monkeypatch.setattr(owner, "backward", counted)


def _train(tmp_path: Path, name: str, fast: bool) -> Any:
    env, algorithm, training = RUNS[name]
    trainer = LocalTrainer(
        {"name": name, **algorithm},
        env,
        {"max_steps": 384, "evo_steps": 384, "eval_loop": 1, "fast_grad": fast, **training},
        run_dir=tmp_path / ("fast" if fast else "autograd"),
        seed=3,
        verbose=False,
        presets=False,
    )
    population, _ = trainer.train()
    return population[0]


@pytest.mark.parametrize("name", list(RUNS))
def test_fast_grad_false_runs_plain_autograd_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    counter = _Counter(monkeypatch)
    fast = _weights(_train(tmp_path, name, fast=True))
    fast_calls, counter.calls = counter.calls, 0
    plain = _weights(_train(tmp_path, name, fast=False))
    assert fast_calls > 0, "the fast path was not taken with fast_grad: true"
    assert counter.calls == 0, "fast_grad: false still ran a hand-written backward"
    assert len(fast) == len(plain)
    for a, b in zip(fast, plain, strict=True):  # bit-identical on this torch, as it happens
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_batched_population_needs_the_fast_path() -> None:
    with pytest.raises(ConfigError, match="fast_grad"):
        LocalTrainer(
            "DQN",
            "CartPole-v1",
            {"pop_size": 2, "batched_population": True, "fast_grad": False},
            presets=False,
        )
