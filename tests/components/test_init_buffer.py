"""init_buffer / init_n_step_buffer: which buffer a replay_buffer section builds."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.components.memory import InsufficientMemoryError
from agilerl.components.replay_buffer import (
    MultiStepReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
)
from agilerl.models import DQNSpec, MADDPGSpec, RainbowDQNSpec, ReplayBufferSpec, TD3Spec
from agilerl.models.training import init_buffer, init_n_step_buffer


def _spec(**kwargs) -> ReplayBufferSpec:
    """A section whose n-step and PER settings come with their flags (alone they are refused)."""
    args = {}
    if kwargs.get("n_step_buffer"):
        args["n_step_buffer_args"] = {"n_step": 4}
    if kwargs.get("per_buffer"):
        args["per_buffer_args"] = {"alpha": 0.7}
    return ReplayBufferSpec(max_size=64, **args, **kwargs)


def test_settings_that_cannot_act_are_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="n_step_buffer_args is read only with n_step"):
        ReplayBufferSpec(n_step_buffer_args={"n_step": 4})
    with pytest.raises(ValidationError, match="per_buffer_args is read only with per_buffer"):
        ReplayBufferSpec(per_buffer_args={"alpha": 0.7})
    with pytest.raises(ValidationError, match="standard_buffer: false: the main memory"):
        ReplayBufferSpec(standard_buffer=False)
    with pytest.raises(ValidationError, match=r"label the run with training\.name"):
        ReplayBufferSpec(name="mine")


def test_default_is_plain_replay_buffer() -> None:
    buffer = init_buffer(_spec(), DQNSpec())
    assert type(buffer) is ReplayBuffer and buffer.max_size == 64
    assert init_n_step_buffer(_spec(), DQNSpec()) is None


def test_n_step_only_builds_multi_step_with_algorithm_gamma() -> None:
    buffer = init_buffer(_spec(n_step_buffer=True), DQNSpec(gamma=0.9))
    assert type(buffer) is MultiStepReplayBuffer
    assert (buffer.max_size, buffer.n_step, buffer.gamma) == (64, 4, 0.9)
    assert init_n_step_buffer(_spec(n_step_buffer=True), DQNSpec()) is None


@pytest.mark.parametrize("algo", [DQNSpec(), TD3Spec()])
def test_per_requires_rainbow(algo) -> None:
    with pytest.raises(ValueError, match="only supported for Rainbow DQN") as info:
        init_buffer(_spec(per_buffer=True), algo)
    assert f"not {algo.name}" in str(info.value)  # names the offending algorithm
    with pytest.raises(ValueError, match="not DQN"):
        init_buffer(_spec(per_buffer=True, n_step_buffer=True), DQNSpec())


def test_per_on_rainbow() -> None:
    buffer = init_buffer(_spec(per_buffer=True), RainbowDQNSpec())
    assert type(buffer) is PrioritizedReplayBuffer and buffer.alpha == 0.7
    assert init_n_step_buffer(_spec(per_buffer=True), RainbowDQNSpec()) is None


def test_per_and_n_step_build_per_main_and_n_step_secondary() -> None:
    spec = _spec(per_buffer=True, n_step_buffer=True)
    algo = RainbowDQNSpec(gamma=0.95)
    main = init_buffer(spec, algo)
    n_step = init_n_step_buffer(spec, algo)
    assert type(main) is PrioritizedReplayBuffer  # PER takes precedence for the main memory
    assert type(n_step) is MultiStepReplayBuffer
    assert (n_step.max_size, n_step.n_step, n_step.gamma) == (main.max_size, 4, 0.95)


def test_multi_agent_ignores_flags() -> None:
    for flags in ({}, {"per_buffer": True}, {"n_step_buffer": True}):
        buffer = init_buffer(_spec(**flags), MADDPGSpec())
        assert type(buffer) is ReplayBuffer and buffer.max_size == 64
    assert init_n_step_buffer(_spec(per_buffer=True, n_step_buffer=True), MADDPGSpec()) is None


def test_multi_agent_dict_fields_round_trip() -> None:
    buffer = init_buffer(_spec(per_buffer=True), MADDPGSpec())
    agents = ("a", "b")
    obs = {k: np.full((2, 3), i, np.float32) for i, k in enumerate(agents)}
    per_agent = {k: np.ones(2) for k in agents}
    buffer.add(obs, {k: np.zeros((2, 2)) for k in agents}, per_agent, obs, per_agent)
    batch = buffer.sample(4)
    assert batch["obs"]["b"].shape == (4, 3) and batch["reward"]["a"].shape == (4,)


def test_device_and_eager_allocation_with_spaces() -> None:
    box = spaces.Box(-1, 1, (5,), np.float32)
    buffer = init_buffer(
        _spec(n_step_buffer=True),
        DQNSpec(),
        device=torch.device("cpu"),
        observation_space=box,
        action_space=spaces.Discrete(2),
    )
    assert buffer.allocated and buffer.device == torch.device("cpu")
    assert buffer.fields["obs"].shape == (64, 5) and buffer.fields["n_steps"].shape == (64,)
    n_step = init_n_step_buffer(
        _spec(per_buffer=True, n_step_buffer=True),
        RainbowDQNSpec(),
        observation_space=box,
        action_space=spaces.Discrete(2),
    )
    assert n_step.allocated
    with pytest.raises(ValueError, match="both"):
        init_buffer(_spec(), DQNSpec(), observation_space=box)


@pytest.mark.parametrize("algo", [DQNSpec(), RainbowDQNSpec(), MADDPGSpec()])
def test_absurd_size_is_refused_before_allocating(algo) -> None:
    spec = ReplayBufferSpec(max_size=10**9, per_buffer=algo.supports_per_buffer)
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    if isinstance(algo, MADDPGSpec):
        obs_space = {"a": obs_space, "b": obs_space}
        act_space = {"a": spaces.Discrete(3), "b": spaces.Discrete(3)}
    else:
        act_space = spaces.Discrete(4)
    with pytest.raises(InsufficientMemoryError, match=r"needs [\d,]+ bytes .* available"):
        init_buffer(spec, algo, observation_space=obs_space, action_space=act_space)


def test_models_training_imports_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['numpy'] = None\n"
        "import agilerl.models.training as t\n"
        "assert callable(t.init_buffer) and callable(t.init_n_step_buffer)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
