"""Preallocated on-policy rollout storage with vectorised GAE.

Layout: every field is a tensor ``[T, N, ...]`` (``T = capacity_per_env``
steps, ``N = num_envs``) allocated once on the CPU. Writes go through numpy
views of the same memory (a numpy slice assignment costs ~1 µs against
several µs for a torch ``copy_``); minibatches are flat ``[T * N, ...]``
views, moved to ``device`` once per :meth:`RolloutBuffer.get_minibatches`
call when that is not the CPU.

Step semantics: row ``t`` holds the observation the action was taken in and
the outcome of that step: ``terminated[t]`` / ``truncated[t]`` say whether
*that* step ended the episode. Truncation is bootstrapped: for a truncated
step the caller passes ``V(final_obs)`` and the effective reward becomes
``reward + gamma * V(final_obs)`` (the raw reward is kept in ``rewards``).

Autoreset: the buffer expects every stored row to be a real transition. With
gymnasium 1.x vector envs this means ``autoreset_mode=AutoresetMode.SAME_STEP``
(the default ``NEXT_STEP`` mode inserts a no-op "reset step" after every
episode end); :func:`agilerl.training.collect.collect_rollouts` enforces it
and reads the final observation from ``info["final_obs"]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl.components import advantages
from agilerl.networks.spaces import composite_items, storage_dtype

Batch = dict[str, Any]


def action_storage(action_space: spaces.Space) -> tuple[tuple[int, ...], torch.dtype]:
    """Per-step shape and dtype used to store actions of ``action_space``.

    Raises:
        ValueError: Naming an unsupported action space.
    """
    if isinstance(action_space, spaces.Discrete):
        return (), torch.int64
    if isinstance(action_space, spaces.MultiDiscrete):
        return (int(action_space.nvec.size),), torch.int64
    if isinstance(action_space, spaces.MultiBinary | spaces.Box):
        return (int(np.prod(action_space.shape)),), torch.float32
    raise ValueError(f"Unsupported action space {type(action_space).__name__} for RolloutBuffer")


class RolloutBuffer:
    """On-policy storage for ``capacity_per_env`` steps of ``num_envs`` envs.

    Args:
        capacity_per_env: Steps stored per env (``T``).
        num_envs: Number of parallel envs (``N``).
        observation_space: Single-env observation space (``Dict``/``Tuple`` allowed).
        action_space: Single-env action space.
        device: Device the minibatches are returned on.
        gamma: Discount factor.
        gae_lambda: GAE lambda.

    Attributes:
        pos: Number of steps added since the last :meth:`reset`.
        running_returns: Per-env return of the episode in progress; survives
            :meth:`reset` so episodes spanning several rollouts are reported
            whole by the collector.
        running_lengths: Per-env length of the episode in progress.
        discounted_returns: Per-env discounted return of the episode in progress
            (``normalize_rewards`` scales rewards by the spread of these); survives
            :meth:`reset` like ``running_returns``.
    """

    def __init__(
        self,
        capacity_per_env: int,
        num_envs: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: str | torch.device = "cpu",
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
    ) -> None:
        if capacity_per_env < 1 or num_envs < 1:
            raise ValueError(
                f"capacity_per_env and num_envs must be >= 1 (got {capacity_per_env}, {num_envs})"
            )
        self.capacity_per_env = int(capacity_per_env)
        self.num_envs = int(num_envs)
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = torch.device(device)
        self.gamma = float(gamma)
        self.gae_lambda = float(gae_lambda)
        T, N = self.capacity_per_env, self.num_envs

        def alloc(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros((T, N, *shape), dtype=dtype)

        self.composite = isinstance(observation_space, spaces.Dict | spaces.Tuple)
        if self.composite:
            self.observations: torch.Tensor | dict[str, torch.Tensor] = {
                key: alloc(tuple(sub.shape or ()), storage_dtype(sub))
                for key, sub in composite_items(observation_space)
            }
        else:
            self.observations = alloc(
                tuple(observation_space.shape or ()), storage_dtype(observation_space)
            )
        act_shape, act_dtype = action_storage(action_space)
        self.actions = alloc(act_shape, act_dtype)
        self.log_probs = alloc((), torch.float32)
        self.rewards = alloc((), torch.float32)
        self.values = alloc((), torch.float32)
        self.terminated = alloc((), torch.bool)
        self.truncated = alloc((), torch.bool)
        self.bootstrap_values = alloc((), torch.float32)
        self.advantages = alloc((), torch.float32)
        self.returns = alloc((), torch.float32)

        # numpy views sharing memory with the tensors above (fast writes)
        self._np_obs: np.ndarray | dict[str, np.ndarray] = (
            {k: v.numpy() for k, v in self.observations.items()}
            if self.composite
            else self.observations.numpy()
        )
        self._np_actions = self.actions.numpy()
        self._np_log_probs = self.log_probs.numpy()
        self._np_rewards = self.rewards.numpy()
        self._np_values = self.values.numpy()
        self._np_terminated = self.terminated.numpy()
        self._np_truncated = self.truncated.numpy()
        self._np_bootstrap = self.bootstrap_values.numpy()
        self._np_advantages = self.advantages.numpy()
        self._np_returns = self.returns.numpy()

        self.pos = 0
        self.computed = False
        self._flat_cache: Batch | None = None
        self.running_returns = np.zeros(N, dtype=np.float64)
        self.running_lengths = np.zeros(N, dtype=np.int64)
        self.discounted_returns = np.zeros(N, dtype=np.float64)

    @property
    def size(self) -> int:
        """Transitions currently stored (``pos * num_envs``)."""
        return self.pos * self.num_envs

    @property
    def full(self) -> bool:
        """True when ``capacity_per_env`` steps have been added."""
        return self.pos >= self.capacity_per_env

    def reset(self) -> None:
        """Forget stored steps (episode trackers are kept)."""
        self.pos = 0
        self.computed = False
        self._flat_cache = None

    def add(
        self,
        obs: Any,
        action: Any,
        log_prob: Any,
        reward: Any,
        value: Any,
        terminated: Any,
        truncated: Any,
        bootstrap_value: Any = None,
    ) -> None:
        """Store one vector step (arrays or tensors of leading size ``num_envs``).

        Args:
            obs: Observations the actions were taken in (dict for composite spaces).
            action: Raw policy actions (pre-clipping).
            log_prob: Log-probabilities of ``action``.
            reward: Rewards of this step.
            value: ``V(obs)``.
            terminated: Episode ended in a terminal state at this step.
            truncated: Episode was cut off (time limit) at this step.
            bootstrap_value: ``V(final_obs)`` per env, read where ``truncated``
                (``None`` when no env truncated).

        Raises:
            IndexError: If the buffer is full.
        """
        t = self.pos
        if t >= self.capacity_per_env:
            raise IndexError(
                f"RolloutBuffer is full ({self.capacity_per_env} steps per env); call reset()"
            )
        if self.composite:
            if isinstance(obs, tuple | list):
                obs = {str(i): o for i, o in enumerate(obs)}
            for key, arr in self._np_obs.items():
                arr[t] = _as_numpy(obs[key])
        else:
            self._np_obs[t] = _as_numpy(obs)
        self._np_actions[t] = _as_numpy(action).reshape(self._np_actions.shape[1:])
        self._np_log_probs[t] = _as_numpy(log_prob)
        self._np_rewards[t] = _as_numpy(reward)
        self._np_values[t] = _as_numpy(value)
        self._np_terminated[t] = _as_numpy(terminated)
        self._np_truncated[t] = _as_numpy(truncated)
        if bootstrap_value is None:
            self._np_bootstrap[t] = 0.0
        else:
            self._np_bootstrap[t] = _as_numpy(bootstrap_value)
        self.pos = t + 1
        self.computed = False
        self._flat_cache = None

    def compute_returns_and_advantages(self, last_value: Any, last_done: Any | None = None) -> None:
        """GAE(lambda) advantages and lambda-returns over the stored steps.

        ``delta_t = r_t + gamma * b_t * V(final_t) + gamma * (1 - done_t) * V_{t+1} - V_t``
        with ``done_t = terminated_t or truncated_t``, ``b_t = truncated_t and
        not terminated_t`` (a step flagged both is terminal) and ``V_T = last_value``;
        ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``;
        ``returns = A + V``. The loop runs backwards over time only; each
        iteration is vectorised over envs.

        Args:
            last_value: ``V`` of the observation following the last stored step (``[N]``).
            last_done: Optional done flags of the last stored step (``[N]``),
                CleanRL style; OR-ed into the stored flags (which normally
                already hold them), so ``last_value`` is not used where set.
        """
        T = self.pos
        if T == 0:
            raise ValueError("RolloutBuffer is empty; add steps before computing advantages")
        done = None if last_done is None else np.asarray(_as_numpy(last_done), dtype=bool)
        gae(
            self._np_rewards[:T],
            self._np_values[:T],
            self._np_terminated[:T],
            self._np_truncated[:T],
            self._np_bootstrap[:T],
            _as_numpy(last_value),
            self.gamma,
            self.gae_lambda,
            out_advantages=self._np_advantages[:T],
            out_returns=self._np_returns[:T],
            last_done=done,
        )
        self.computed = True
        self._flat_cache = None

    def _flat(self) -> Batch:
        T, N = self.pos, self.num_envs
        n = T * N

        def flat(t: torch.Tensor) -> torch.Tensor:
            out = t[:T].reshape(n, *t.shape[2:])
            return out if self.device.type == "cpu" else out.to(self.device)

        obs = (
            {k: flat(v) for k, v in self.observations.items()}
            if self.composite
            else flat(self.observations)
        )
        return {
            "observations": obs,
            "actions": flat(self.actions),
            "log_probs": flat(self.log_probs),
            "values": flat(self.values),
            "advantages": flat(self.advantages),
            "returns": flat(self.returns),
        }

    def get_minibatches(
        self,
        batch_size: int,
        generator: torch.Generator | None = None,
        shuffle: bool = True,
    ) -> Iterator[Batch]:
        """Yield one epoch of minibatches covering every stored sample exactly once.

        Each batch is a dict with ``observations`` (tensor or dict of tensors),
        ``actions``, ``log_probs``, ``values``, ``advantages`` and ``returns``,
        flattened over (time, env). Samples are drawn from one random
        permutation (``generator`` if given); the last batch is smaller when
        ``batch_size`` does not divide the sample count. When one batch holds
        the whole buffer the flat views are yielded as stored (order does not
        affect full-batch statistics) without a gather copy.

        Args:
            batch_size: Samples per minibatch.
            generator: Torch RNG for the permutation.
            shuffle: Permute samples (otherwise storage order).

        Raises:
            RuntimeError: If advantages were not computed for the stored steps.
        """
        if not self.computed:
            raise RuntimeError("Call compute_returns_and_advantages() before get_minibatches()")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if self._flat_cache is None:
            self._flat_cache = self._flat()
        data = self._flat_cache
        n = self.pos * self.num_envs
        if batch_size >= n:
            yield dict(data)
            return
        if shuffle:
            where = generator.device if generator is not None else None
            order = torch.randperm(n, generator=generator, device=where).to(self.device)
        else:
            order = torch.arange(n, device=self.device)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            yield _index_batch(data, idx)


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    bootstrap_values: np.ndarray,
    last_value: np.ndarray,
    gamma: float,
    gae_lambda: float,
    *,
    out_advantages: np.ndarray,
    out_returns: np.ndarray,
    last_done: np.ndarray | None = None,
) -> None:
    """GAE(lambda) of ``[T, N]`` buffer steps, written into the ``out_`` arrays.

    Turns the buffer's terminated/truncated flags and truncation bootstraps
    into :func:`agilerl.components.advantages.gae`'s inputs (see
    :meth:`RolloutBuffer.compute_returns_and_advantages`); the arrays may be
    column slices of a larger buffer (a stacked population calls this once
    per member with that member's ``gamma`` and ``gae_lambda``).
    """
    not_done = ~(terminated | truncated)
    if last_done is not None:
        not_done[-1] &= ~last_done
    bootstrap = np.where(truncated & ~terminated, bootstrap_values, 0.0)
    advantages.gae(
        rewards + gamma * bootstrap,
        values,
        not_done,
        last_value,
        gamma,
        gae_lambda,
        out_advantages=out_advantages,
        out_returns=out_returns,
    )


def _index_batch(data: Batch, idx: torch.Tensor) -> Batch:
    out: Batch = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out[key] = {k: v.index_select(0, idx) for k, v in value.items()}
        else:
            out[key] = value.index_select(0, idx)
    return out


def _as_numpy(x: Any) -> Any:
    """Numpy view of a CPU tensor; anything else is returned unchanged."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return x
