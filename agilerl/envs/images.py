"""Image envs: ALE and MinAtar ids registered on use, and the preprocessing the env section asks.

The pipeline, on one (unvectorised) env, in this order:

1. ``atari_preprocessing``: gymnasium's ``AtariPreprocessing`` on an env made with
   ``frameskip=1`` (frames ``[H, W, 1]`` grey or ``[H, W, 3]`` RGB, ``uint8``);
2. channels-last images become ``[C, H, W]`` (:class:`ChannelsFirst`) when
   ``channels_last`` says so (by default: ALE and MinAtar frames);
3. ``frame_stack``: gymnasium's ``FrameStackObservation``, its ``[k, C, H, W]``
   merged into ``[k * C, H, W]`` channels (:class:`MergeStackedFrames`).

The CNN encoders then read ``[C, H, W]`` batches; MinAtar's boolean channels are
fed as 0/1 floats.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agilerl.arena.models.env import GymEnvSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.images import bare_id, image_family
from agilerl.extras import install_hint

REGISTERING_MODULES = {"ale": "ale_py", "minatar": "minatar.gym"}
"""Image family -> the module whose import (ALE) or ``register_envs()`` (MinAtar) registers it."""


def register_family(name: str) -> None:
    """Register the ALE or MinAtar ids in gymnasium before ``name`` is made (others: nothing).

    Raises:
        ConfigError: Naming the ``atari`` extra when the suite is not installed.
    """
    family = image_family(name)
    if family is None or bare_id(name) in gym.registry:
        return
    module_name = REGISTERING_MODULES[family]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"environment.name: {name} needs the atari extra ({exc.name} is not installed); "
            f"install it with: {install_hint('atari')}"
        ) from None
    if family == "ale":
        gym.register_envs(module)  # importing ale_py registered its ids
    else:
        module.register_envs()


def make_kwargs(spec: GymEnvSpec) -> dict[str, Any]:
    """Keyword arguments ``gymnasium.make`` needs for the pipeline (ALE: ``frameskip=1``)."""
    return {"frameskip": 1} if spec.atari_preprocessing is not None else {}


def wrap_images(env: gym.Env, spec: GymEnvSpec) -> gym.Env:
    """Apply the env section's image settings to one env (see the module docstring).

    Raises:
        ConfigError: When ``frame_stack`` or ``channels_last`` is set but the env does
            not observe images (a 3-D ``Box``).
    """
    atari = spec.atari_preprocessing
    if atari is not None:
        try:
            env = gym.wrappers.AtariPreprocessing(
                env, **atari.model_dump(), grayscale_newaxis=True, scale_obs=False
            )
        except gym.error.DependencyNotInstalled as exc:
            raise ConfigError(
                f"environment.atari_preprocessing needs the atari extra ({exc}); "
                f"install it with: {install_hint('atari')}"
            ) from None
    space = env.observation_space
    is_image = isinstance(space, spaces.Box) and len(space.shape) == 3
    asked = [f for f in ("frame_stack", "channels_last") if _is_set(spec, f)]
    if asked and not is_image:
        raise ConfigError(
            f"environment.{asked[0]}: {spec.name} observes {_describe(space)}, not images "
            "(a 3-D Box); frame_stack and channels_last apply to image envs only: remove them"
        )
    if is_image and _channels_last(spec, space.shape):
        env = ChannelsFirst(env)
    if spec.frame_stack > 1:
        env = MergeStackedFrames(gym.wrappers.FrameStackObservation(env, spec.frame_stack))
    return env


def _is_set(spec: GymEnvSpec, field: str) -> bool:
    return getattr(spec, field) != GymEnvSpec.model_fields[field].default


def _describe(space: spaces.Space) -> str:
    shape = getattr(space, "shape", None)
    return type(space).__name__ if shape is None else f"{type(space).__name__} {tuple(shape)}"


def _channels_last(spec: GymEnvSpec, shape: tuple[int, ...]) -> bool:
    """Whether the env's images are ``[H, W, C]`` (to be turned channels-first)."""
    if spec.channels_last is not None:
        return spec.channels_last
    if spec.entrypoint is None and image_family(spec.name) is not None:
        return True
    if spec.frame_stack > 1:  # stacking needs the layout: guess it as the CNN would
        from agilerl.networks.cnn import infer_channels_last

        return infer_channels_last(shape)
    return False


def _box(low: np.ndarray, high: np.ndarray, dtype: Any) -> spaces.Box:
    return spaces.Box(low=low, high=high, shape=low.shape, dtype=dtype)


class ChannelsFirst(gym.ObservationWrapper):
    """``[H, W, C]`` image observations as ``[C, H, W]`` (dtype kept)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        self.observation_space = _box(
            np.transpose(space.low, (2, 0, 1)), np.transpose(space.high, (2, 0, 1)), space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """The frame with its channel axis first."""
        return np.ascontiguousarray(np.transpose(observation, (2, 0, 1)))


class MergeStackedFrames(gym.ObservationWrapper):
    """``[k, C, H, W]`` stacked frames as one ``[k * C, H, W]`` image (oldest frame first)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        self._shape = (-1, *space.shape[2:])
        self.observation_space = _box(
            space.low.reshape(self._shape), space.high.reshape(self._shape), space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """The stack as channels."""
        return np.asarray(observation).reshape(self._shape)
