"""PettingZoo parallel envs from the manifest, and a vector env over copies of one.

:func:`make_parallel_env` imports the module named in the manifest (for
example ``mpe2.simple_speaker_listener_v4``) and calls its ``parallel_env``
with ``env_config``. :class:`PettingZooVectorEnv` steps ``num_envs`` copies,
in process (``sync=True``) or one subprocess per copy (``sync=False``), and
returns fixed-shape per-agent arrays:

* ``obs[agent]``: ``(num_envs, *obs_shape)``; zeros for an agent that is not
  alive in that copy (it finished earlier than the others). A ``Dict``
  observation (e.g. ``{"observation", "action_mask"}``) is a dict of such arrays.
* ``rewards[agent]``, ``terminated[agent]``, ``truncated[agent]``: ``(num_envs,)``.
* ``infos["active"][agent]``: ``(num_envs,)`` bool, whether the agent acted
  this step (learners ignore inactive rows).
* ``infos["episode_done"]``: ``(num_envs,)`` bool; a copy whose agents are all
  done is reset in the same step (its returned ``obs`` are the new episode's),
  the finishing observations are in ``infos["final_obs"]``.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.conversions import aec_to_parallel_wrapper
from pettingzoo.utils.env import AECEnv, ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

from agilerl.arena.models.errors import ConfigError

__all__ = [
    "ActionMaskFromInfoParallel",
    "ClipActionsParallel",
    "ParallelEnvFactory",
    "PettingZooVectorEnv",
    "make_parallel_env",
    "make_vector_env",
]


def make_parallel_env(name: str, env_config: Mapping[str, Any] | None = None) -> ParallelEnv:
    """Build a PettingZoo parallel env from its module path.

    Args:
        name: Module exposing ``parallel_env()``, e.g. ``mpe2.simple_spread_v3``.
        env_config: Keyword arguments for ``parallel_env()``.

    Raises:
        ConfigError: Naming ``environment.name`` / ``environment.env_config`` when
            the module cannot be imported, has no ``parallel_env`` or refuses
            the arguments.
    """
    if name.startswith("pettingzoo.mpe"):
        raise ConfigError(
            f"environment.name: {name!r}: MPE moved out of pettingzoo 1.27; use "
            f"'mpe2.{name.rsplit('.', 1)[-1]}' (pip install mpe2)"
        )
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(
            f"environment.name: cannot import {name!r} ({exc}); install its package "
            "(e.g. pip install 'agilerl[multiagent]') or fix the module path"
        ) from None
    factory = getattr(module, "parallel_env", None)
    if factory is None:
        raise ConfigError(
            f"environment.name: module {name!r} has no parallel_env(); name a PettingZoo "
            "env module such as mpe2.simple_spread_v3"
        )
    try:
        return factory(**dict(env_config or {}))
    except TypeError as exc:
        raise ConfigError(
            f"environment.env_config: {name}.parallel_env() refused it: {exc}"
        ) from None


class ClipActionsParallel(BaseParallelWrapper):
    """Clip every Box action into its agent's action-space bounds before stepping.

    Gaussian (IPPO) and noisy (MADDPG) policies can leave the bounds; MPE
    asserts its continuous actions lie in ``[0, 1]``.
    """

    def step(self, actions: dict[str, Any]) -> tuple[dict, ...]:
        """Step with clipped actions (Discrete actions pass through)."""
        clipped = {}
        for agent, action in actions.items():
            space = self.env.action_space(agent)
            if isinstance(space, spaces.Box):
                action = np.clip(np.asarray(action, dtype=space.dtype), space.low, space.high)
            clipped[agent] = action
        return self.env.step(clipped)


class ActionMaskFromInfoParallel(BaseParallelWrapper):
    """Each agent's observation becomes ``{"observation", "action_mask"}`` with the mask
    its ``infos[agent]["action_mask"]`` reports (``environment.action_mask: info``; see
    :class:`agilerl.envs.masks.ActionMaskFromInfo`, the single-agent twin).

    Raises:
        ConfigError: Naming ``environment.action_mask`` for an agent without
            ``Discrete`` actions, observations that already carry a mask, or a
            step whose info lacks the mask.
    """

    def __init__(self, env: ParallelEnv) -> None:
        super().__init__(env)
        from agilerl.envs.masks import check_info_maskable, mask_space

        self._n = {
            a: check_info_maskable(env.observation_space(a), env.action_space(a))
            for a in env.possible_agents
        }
        self._spaces = {
            a: spaces.Dict({"observation": env.observation_space(a), "action_mask": mask_space(n)})
            for a, n in self._n.items()
        }

    def observation_space(self, agent: str) -> spaces.Space:
        """``{"observation": the env's space, "action_mask": 0/1 per action}``."""
        return self._spaces[agent]

    def _masked(
        self, obs: Mapping[str, Any], infos: Mapping[str, Any], ended: Any, where: str
    ) -> dict:
        from agilerl.envs.masks import mask_from_info

        return {
            a: {
                "observation": value,
                "action_mask": mask_from_info(infos.get(a, {}), self._n[a], a in ended, where),
            }
            for a, value in obs.items()
        }

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Reset; every observation carries its agent's first legal actions."""
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._masked(obs, infos, (), "reset"), infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, ...]:
        """Step; every observation carries its agent's next legal actions."""
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        ended = {a for a, done in terminated.items() if done}
        return self._masked(obs, infos, ended, "step"), rewards, terminated, truncated, infos


@dataclass(frozen=True)
class ParallelEnvFactory:
    """A picklable recipe for one env copy (what subprocess workers build)."""

    name: str
    env_config: dict[str, Any] = field(default_factory=dict)
    clip_actions: bool = True
    info_masks: bool = False

    def __call__(self) -> ParallelEnv:
        """Build the env, wrapped in :class:`ClipActionsParallel` unless disabled (and in
        :class:`ActionMaskFromInfoParallel` with ``info_masks``)."""
        env = make_parallel_env(self.name, self.env_config)
        if self.info_masks:
            env = ActionMaskFromInfoParallel(env)
        return ClipActionsParallel(env) if self.clip_actions else env

    @classmethod
    def of(cls, spec: Any, env_config: Mapping[str, Any] | None = None) -> ParallelEnvFactory:
        """The recipe of a manifest's PettingZoo ``environment`` section (``env_config``
        replaces the section's own)."""
        config = spec.env_config if env_config is None else env_config
        info_masks = getattr(spec, "action_mask", "observation") == "info"
        return cls(spec.name, dict(config or {}), info_masks=info_masks)


def _zeros(space: spaces.Space) -> Any:
    if isinstance(space, spaces.Dict):  # e.g. {"observation", "action_mask"} (classic games)
        return {k: _zeros(sub) for k, sub in space.spaces.items()}
    return np.zeros(space.shape, dtype=space.dtype)


def _allocate(space: spaces.Space, n: int) -> Any:
    """Room for ``n`` copies' observations of ``space`` (a dict of arrays for a Dict)."""
    if isinstance(space, spaces.Dict):
        return {k: _allocate(sub, n) for k, sub in space.spaces.items()}
    return np.empty((n, *space.shape), dtype=space.dtype)


def _put(rows: Any, i: int, value: Any) -> None:
    """Write one copy's observation into row ``i`` of :func:`_allocate`'s storage."""
    if isinstance(rows, dict):
        for key, sub in rows.items():
            _put(sub, i, value[key])
    else:
        rows[i] = value


def _raw_aec(env: ParallelEnv) -> AECEnv | None:
    """The bare AEC env under an ``aec_to_parallel`` conversion, or ``None``.

    Stepping it directly skips the conversion's per-step ``last()`` (an
    observation computed and thrown away) and the AEC wrappers' attribute
    forwarding and space checks: what mpe2's parallel envs spend most of a step on.
    """
    inner = env.env if isinstance(env, ClipActionsParallel) else env
    if type(inner) is not aec_to_parallel_wrapper:
        return None
    raw = inner.aec_env.unwrapped
    return raw if isinstance(raw, AECEnv) else None


class _CopyStepper:
    """One env copy turned into fixed-shape arrays with same-step autoreset."""

    def __init__(self, env: ParallelEnv) -> None:
        self.env = env
        self.agents = list(env.possible_agents)
        self.obs_spaces = {a: env.observation_space(a) for a in self.agents}
        self.act_spaces = {a: env.action_space(a) for a in self.agents}
        # The bare env skips mpe2's own action clipping: only when ours clips (or nothing can).
        discrete = all(isinstance(s, spaces.Discrete) for s in self.act_spaces.values())
        self.raw = _raw_aec(env) if isinstance(env, ClipActionsParallel) or discrete else None
        self._zero_obs = {a: _zeros(s) for a, s in self.obs_spaces.items()}
        self.seed: int | None = None

    def _pad(self, obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return {a: obs[a] if a in obs else self._zero_obs[a] for a in self.agents}

    def reset(self, seed: int | None) -> tuple[dict[str, np.ndarray], dict]:
        obs, info = self.env.reset(seed=seed)
        return self._pad(obs), info

    def _alive(self) -> list[str]:
        return list(self.raw.agents if self.raw is not None else self.env.agents)

    def _step_raw(self, actions: Mapping[str, Any]) -> tuple[dict, dict, dict, dict]:
        """What ``aec_to_parallel_wrapper.step`` returns, from the bare AEC env."""
        raw = self.raw
        rewards = dict.fromkeys(self.agents, 0.0)
        for agent in raw.agents[:]:
            if agent != raw.agent_selection:
                raise AssertionError(
                    f"expected agent {agent} got {raw.agent_selection}: a parallel env's "
                    "agents must step in a cycle"
                )
            raw.step(actions[agent])
            for other in raw.agents:
                rewards[other] += raw.rewards[other]
        terminated, truncated = dict(raw.terminations), dict(raw.truncations)
        obs = {a: raw.observe(a) for a in raw.agents}
        while raw.agents and (
            raw.terminations[raw.agent_selection] or raw.truncations[raw.agent_selection]
        ):
            raw.step(None)
        return obs, rewards, terminated, truncated

    def step(self, actions: Mapping[str, Any]) -> tuple[Any, ...]:
        alive = self._alive()
        if self.raw is not None:
            obs, rew, term, trunc = self._step_raw(actions)
        else:
            obs, rew, term, trunc, _ = self.env.step({a: actions[a] for a in alive})
        active = {a: a in alive for a in self.agents}
        rewards = {a: float(rew.get(a, 0.0)) for a in self.agents}
        terminated = {a: bool(term.get(a, a not in alive)) for a in self.agents}
        truncated = {a: bool(trunc.get(a, False)) for a in self.agents}
        padded = self._pad(obs)
        done = not self._alive()
        final = None
        if done:
            final = padded
            padded, _ = self.reset(None)
        return padded, rewards, terminated, truncated, active, done, final

    def close(self) -> None:
        self.env.close()


def _worker(remote: Any, factory: ParallelEnvFactory) -> None:
    stepper = _CopyStepper(factory())
    try:
        while True:
            cmd, data = remote.recv()
            if cmd == "step":
                remote.send(stepper.step(data))
            elif cmd == "reset":
                remote.send(stepper.reset(data))
            elif cmd == "close":
                stepper.close()
                remote.send(None)
                break
    except (EOFError, KeyboardInterrupt):
        stepper.close()
    finally:
        remote.close()


class PettingZooVectorEnv:
    """``num_envs`` copies of a PettingZoo parallel env with batched per-agent arrays.

    Args:
        factories: One picklable env recipe per copy.
        sync: Step in process (``True``) or one subprocess per copy.
        context: ``multiprocessing`` start method for ``sync=False`` (the
            platform default when ``None``; ``spawn``/``forkserver`` need an
            ``if __name__ == "__main__"`` guard in the calling script).

    Attributes:
        agents: ``possible_agents`` of the env, in order.
        observation_spaces: Per-agent single-copy observation spaces.
        action_spaces: Per-agent single-copy action spaces.
    """

    def __init__(
        self,
        factories: Sequence[ParallelEnvFactory],
        sync: bool = True,
        context: str | None = None,
    ) -> None:
        if not factories:
            raise ValueError("PettingZooVectorEnv needs at least one env copy")
        self.num_envs = len(factories)
        self.sync = bool(sync)
        probe = factories[0]()
        self.agents = list(probe.possible_agents)
        self.observation_spaces = {a: probe.observation_space(a) for a in self.agents}
        self.action_spaces = {a: probe.action_space(a) for a in self.agents}
        self.metadata = dict(getattr(probe, "metadata", {}))
        self._clip = isinstance(probe, ClipActionsParallel)
        self._closed = False
        if self.sync:
            self._steppers = [_CopyStepper(probe)] + [_CopyStepper(f()) for f in factories[1:]]
        else:
            probe.close()
            ctx = mp.get_context(context)
            self._remotes, self._procs = [], []
            for factory in factories:
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(child, factory), daemon=True)
                proc.start()
                child.close()
                self._remotes.append(parent)
                self._procs.append(proc)

    def observation_space(self, agent: str) -> spaces.Space:
        """Single-copy observation space of ``agent``."""
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        """Single-copy action space of ``agent``."""
        return self.action_spaces[agent]

    def _call(self, cmd: str, args: Sequence[Any]) -> list[Any]:
        if self.sync:
            return [getattr(s, cmd)(a) for s, a in zip(self._steppers, args, strict=True)]
        for remote, arg in zip(self._remotes, args, strict=True):
            remote.send((cmd, arg))
        return [remote.recv() for remote in self._remotes]

    def _stack_obs(self, per_copy: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        out = {a: _allocate(s, len(per_copy)) for a, s in self.observation_spaces.items()}
        for i, copy in enumerate(per_copy):
            for agent, rows in out.items():
                _put(rows, i, copy[agent])
        return out

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset every copy; copy ``i`` is seeded with ``seed + i`` when a seed is given."""
        seeds = [None if seed is None else int(seed) + i for i in range(self.num_envs)]
        results = self._call("reset", seeds)
        return self._stack_obs([r[0] for r in results]), {"per_copy": [r[1] for r in results]}

    def _per_copy_actions(self, actions: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
        rows = {}
        for agent in self.agents:
            value = np.asarray(actions[agent])
            space = self.action_spaces[agent]
            if self._clip and isinstance(space, spaces.Box):  # once for all copies
                value = np.clip(value.astype(space.dtype, copy=False), space.low, space.high)
            rows[agent] = list(value)
        return [{a: rows[a][i] for a in self.agents} for i in range(self.num_envs)]

    def step(self, actions: Mapping[str, np.ndarray]) -> tuple[Any, ...]:
        """Step every copy with row ``i`` of each agent's actions.

        Returns:
            ``(obs, rewards, terminated, truncated, infos)`` as described in
            the module docstring.
        """
        results = self._call("step", self._per_copy_actions(actions))
        n = self.num_envs
        obs = {a: _allocate(s, n) for a, s in self.observation_spaces.items()}
        rewards = {a: np.empty(n, dtype=np.float32) for a in self.agents}
        terminated = {a: np.empty(n, dtype=bool) for a in self.agents}
        truncated = {a: np.empty(n, dtype=bool) for a in self.agents}
        active = {a: np.empty(n, dtype=bool) for a in self.agents}
        for i, (o, r, te, tr, ac, _, _) in enumerate(results):
            for a in self.agents:
                _put(obs[a], i, o[a])
                rewards[a][i] = r[a]
                terminated[a][i] = te[a]
                truncated[a][i] = tr[a]
                active[a][i] = ac[a]
        done = np.array([r[5] for r in results], dtype=bool)
        final = [r[6] for r in results]
        infos = {"active": active, "episode_done": done, "final_obs": final}
        return obs, rewards, terminated, truncated, infos

    def close(self) -> None:
        """Close every copy (and stop the workers)."""
        if self._closed:
            return
        self._closed = True
        if self.sync:
            for stepper in self._steppers:
                stepper.close()
            return
        for remote in self._remotes:
            try:
                remote.send(("close", None))
                remote.recv()
            except (BrokenPipeError, EOFError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()


def make_vector_env(
    name: str,
    env_config: Mapping[str, Any] | None = None,
    num_envs: int = 1,
    sync: bool = True,
    clip_actions: bool = True,
    info_masks: bool = False,
) -> PettingZooVectorEnv:
    """A :class:`PettingZooVectorEnv` from a manifest's ``environment`` fields.

    Args:
        name: Module path (``environment.name``).
        env_config: ``environment.env_config``.
        num_envs: Copies (``environment.num_envs``).
        sync: ``environment.sync``.
        clip_actions: Wrap each copy in :class:`ClipActionsParallel`.
        info_masks: Move ``infos[agent]["action_mask"]`` into the observations
            (``environment.action_mask: info``).
    """
    make_parallel_env(name, env_config).close()  # fail fast, in this process, with ConfigError
    factory = ParallelEnvFactory(name, dict(env_config or {}), clip_actions, info_masks)
    return PettingZooVectorEnv([factory] * int(num_envs), sync=sync)
