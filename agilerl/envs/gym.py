"""Gymnasium vector environments built from a :class:`GymEnvSpec`."""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from agilerl.arena.models.env import GymEnvSpec
from agilerl.arena.models.errors import ConfigError, did_you_mean
from agilerl.envs import (
    cartpole_novel,  # noqa: F401  (registers CartPoleNoVel-v1)
    classic_ids,  # noqa: F401  (registers agilerl/ConnectFour-v3, ...)
)
from agilerl.envs.images import make_kwargs, register_family, wrap_images
from agilerl.extras import extra_of


def _check_registered(name: str) -> None:
    register_family(name)  # ALE and MinAtar ids (also under ale_py:)
    if name in gym.registry:
        return
    if ":" in name:  # "module:EnvId-v0" registers on import
        return
    ids = list(gym.registry)
    guess = did_you_mean(name, ids)
    hint = f" (did you mean {guess}?)" if guess else ""
    namespace = name.split("/", 1)[0] if "/" in name else None
    extra = f"; is the package that registers {namespace!r} installed?" if namespace else ""
    raise ConfigError(f"environment.name: {name!r} is not a registered gymnasium id{hint}{extra}")


def _env_factory(spec: GymEnvSpec, render_mode: str | None = None) -> Any:
    kwargs = {**make_kwargs(spec), **(spec.env_config or {})}
    if spec.max_episode_steps is not None:
        kwargs["max_episode_steps"] = spec.max_episode_steps
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if spec.path and (spec.entrypoint is not None or ":" in spec.name):
        sys.path.insert(0, spec.path)
    if spec.entrypoint is not None:
        make = _user_object(spec.entrypoint, "environment.entrypoint")
        return lambda: _wrap(make(**kwargs), spec)
    _check_registered(spec.name)
    return lambda: _wrap(_make(spec.name, **kwargs), spec)


DEPENDENCIES = {"box2d": "Box2D"}
"""gymnasium's optional dependency (as its error names it) -> the package (see agilerl.extras)."""


def _user_object(target: str, field: str) -> Any:
    """``module:attr`` (or ``module.attr``) of user code, imported (trust is checked before).

    Raises:
        ConfigError: Naming ``field`` when the module or the attribute is missing.
    """
    module_name, _, attr = target.replace(":", ".").rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"{field}: {target}: no module named {exc.name!r}; put its folder on the import "
            "path with environment.path=<folder> (or install its package)"
        ) from None
    except AttributeError:
        raise ConfigError(f"{field}: {target}: module {module_name!r} has no {attr!r}") from None


def _make(name: str, **kwargs: Any) -> gym.Env:
    register_family(name)  # again in a subprocess copy (AsyncVectorEnv)
    try:
        return gym.make(name, **kwargs)
    except gym.error.DependencyNotInstalled as exc:
        raise missing_dependency(name, exc) from None
    except ModuleNotFoundError:  # "module:EnvId-v0" whose module cannot be imported
        module = name.split(":", 1)[0]
        raise ConfigError(
            f"environment.name: {name}: no module named {module!r} to register it; put its "
            "folder on the import path with environment.path=<folder> (or install its package)"
        ) from None


def missing_dependency(name: str, exc: Exception) -> ConfigError:
    """The user error for an env whose package is missing, naming the extra to install."""
    text = str(exc)
    for needle, package in DEPENDENCIES.items():
        if needle in text.lower():
            extra = extra_of(package)
            return ConfigError(
                f"environment.name: {name} needs {package}, which is not installed: "
                f'pip install -e ".[{extra}]" in a clone (or pip install "agilerl[{extra}]")'
            )
    return ConfigError(f"environment.name: {name} cannot be made: {text}")


def _wrapper_class(name: str) -> Any:
    """A gymnasium wrapper by name, or ``module:Class`` (trust-gated by the caller)."""
    if ":" in name or "." in name:
        module_name, _, attr = name.replace(":", ".").rpartition(".")
        return getattr(importlib.import_module(module_name), attr)
    return getattr(gym.wrappers, name)


FRAME_WRAPPERS = ("RecordVideo", "HumanRendering", "RenderCollection")
"""Gymnasium wrappers that read rendered frames: the env needs an image ``render_mode``."""


def _wrap(env: gym.Env, spec: GymEnvSpec) -> gym.Env:
    env = wrap_images(env, spec)
    for index, wrapper in enumerate(spec.env_wrappers or []):
        name, kwargs = (wrapper, {}) if isinstance(wrapper, str) else wrapper
        try:
            env = _wrapper_class(name)(env, **kwargs)
        except (TypeError, ValueError, gym.error.Error) as exc:
            raise ConfigError(f"environment.env_wrappers[{index}]: {name}: {exc}") from None
    if spec.action_mask == "info":
        from agilerl.envs.masks import ActionMaskFromInfo

        env = ActionMaskFromInfo(env)
    return env


def check_wrappers(spec: GymEnvSpec) -> None:
    """Check ``environment.env_wrappers`` before any env is built.

    Gymnasium wrapper names must exist in ``gymnasium.wrappers`` and their
    arguments must fit the wrapper's signature. ``module:Class`` wrappers are
    code (see :mod:`agilerl.arena.models.trust`) and are checked when built.

    Raises:
        ConfigError: Naming the wrapper, with close matches or its parameters.
    """
    classes = {n: getattr(gym.wrappers, n) for n in dir(gym.wrappers)}
    names = [n for n, c in classes.items() if isinstance(c, type) and issubclass(c, gym.Wrapper)]
    for index, wrapper in enumerate(spec.env_wrappers or []):
        name, kwargs = (wrapper, {}) if isinstance(wrapper, str) else wrapper
        where = f"environment.env_wrappers[{index}]"
        if ":" in name or "." in name:
            continue
        if name not in names:
            guess = did_you_mean(name, names)
            hint = f" (did you mean {guess}?)" if guess else ""
            raise ConfigError(f"{where}: {name!r} is not a gymnasium wrapper{hint}")
        if not isinstance(kwargs, dict):
            raise ConfigError(f"{where}: the arguments of {name} must be a mapping")
        render_mode = (spec.env_config or {}).get("render_mode")
        if name in FRAME_WRAPPERS and render_mode not in ("rgb_array", "rgb_array_list"):
            raise ConfigError(
                f"{where}: {name} records rendered frames, but the env's render_mode is "
                f"{render_mode!r}: set environment.env_config.render_mode=rgb_array, or "
                "record a trained agent with agilerl evaluate RUN --video out.mp4"
            )
        signature = inspect.signature(getattr(gym.wrappers, name))
        try:
            signature.bind(None, **kwargs)
        except TypeError as exc:
            params = [p for p in signature.parameters if p != "env"]
            raise ConfigError(
                f"{where}: {name}({', '.join(f'{k}=' for k in kwargs)}): {exc}; "
                f"{name} takes {', '.join(params) or 'no arguments'}"
            ) from None


def make_vector_env(
    spec: GymEnvSpec,
    num_envs: int | None = None,
    *,
    seed: int | None = None,
    autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP,
    render_mode: str | None = None,
) -> gym.vector.VectorEnv:
    """A vector env of ``num_envs`` copies (``spec.num_envs`` by default).

    Copies step in-process when ``spec.sync`` is true, else in subprocesses.
    Autoreset happens in the same step, with the final observation in
    ``info["final_obs"]``, so truncated episodes can be bootstrapped.

    Raises:
        ConfigError: If the gymnasium id is unknown (close matches are listed).
    """
    from agilerl.envs.faults import NamedFaults

    n = num_envs or spec.num_envs
    factory = _env_factory(spec, render_mode)
    kwargs = {"autoreset_mode": autoreset_mode}
    label = spec.entrypoint or spec.name
    try:
        if spec.sync or n == 1:
            env = gym.vector.SyncVectorEnv([factory] * n, **kwargs)
        else:
            env = gym.vector.AsyncVectorEnv([factory] * n, **kwargs)
    except ConfigError:
        raise
    except Exception as exc:
        raise NamedFaults.fault(label, "construction", exc) from exc
    env = NamedFaults(env, label)
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env


def make_single_env(spec: GymEnvSpec, render_mode: str | None = None) -> gym.Env:
    """One (unvectorised) copy of the env, e.g. for rendering a video."""
    return _env_factory(spec, render_mode)()


def action_space_kind(space: gym.Space) -> str:
    """``discrete``, ``continuous``, ``multidiscrete`` or ``multibinary``."""
    kinds = {
        gym.spaces.Discrete: "discrete",
        gym.spaces.Box: "continuous",
        gym.spaces.MultiDiscrete: "multidiscrete",
        gym.spaces.MultiBinary: "multibinary",
    }
    for cls, kind in kinds.items():
        if isinstance(space, cls):
            return kind
    return type(space).__name__
