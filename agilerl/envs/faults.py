"""Faults of an environment, named: which env, which step, what went wrong.

An env whose ``step()`` raises, or that returns a NaN/inf observation or
reward, stops the run with an :class:`EnvironmentFault` naming the env and
the env step, instead of a raw traceback from deep inside a vector env or a
"training diverged" message that blames the learning rate.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from agilerl.arena.models.errors import ConfigError


class EnvironmentFault(ConfigError):
    """The environment failed (raised, or returned a non-finite value)."""


def _non_finite(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, tuple | list):
        return any(_non_finite(v) for v in value)
    array = np.asarray(value)
    return array.dtype.kind in "fc" and not np.isfinite(array).all()


class NamedFaults(gym.vector.VectorWrapper):
    """Re-raises env exceptions and non-finite outputs with the env's name and step.

    Args:
        env: The vector env.
        label: The env's name (gymnasium id or entrypoint).
    """

    def __init__(self, env: gym.vector.VectorEnv, label: str) -> None:
        super().__init__(env)
        self.label = label
        self.env_steps = 0

    @staticmethod
    def fault(label: str, when: str, exc: BaseException) -> EnvironmentFault:
        """The error for an exception ``exc`` raised by env ``label`` at ``when``."""
        detail = str(exc).strip().splitlines()
        message = f"{type(exc).__name__}: {detail[-1]}" if detail else type(exc).__name__
        return EnvironmentFault(
            f"environment {label!r} raised {message} at {when}; fix the env "
            "(or its environment.config) and start again"
        )

    def _check(self, when: str, observation: Any, reward: Any = None) -> None:
        if _non_finite(observation):
            raise EnvironmentFault(
                f"environment {self.label!r} returned a non-finite (NaN or inf) observation "
                f"at {when}; the env is at fault, not the algorithm"
            )
        if reward is not None and _non_finite(reward):
            raise EnvironmentFault(
                f"environment {self.label!r} returned a non-finite (NaN or inf) reward at "
                f"{when}; the env is at fault, not the algorithm"
            )

    def reset(self, **kwargs: Any) -> Any:
        when = f"reset (env step {self.env_steps})"
        try:
            observation, info = self.env.reset(**kwargs)
        except ConfigError:
            raise
        except Exception as exc:
            raise self.fault(self.label, when, exc) from exc
        self._check(when, observation)
        return observation, info

    def step(self, actions: Any) -> Any:
        when = f"env step {self.env_steps + self.num_envs}"
        try:
            observation, reward, terminated, truncated, info = self.env.step(actions)
        except ConfigError:
            raise
        except Exception as exc:
            raise self.fault(self.label, when, exc) from exc
        self.env_steps += self.num_envs
        self._check(when, observation, reward)
        ended = np.logical_or(terminated, truncated)
        if ended.any() and "final_obs" in info:  # SAME_STEP autoreset: the episode's last obs
            self._check(when, [info["final_obs"][i] for i in np.flatnonzero(ended)])
        return observation, reward, terminated, truncated, info
