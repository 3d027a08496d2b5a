"""Fill a :class:`~agilerl.components.rollout_buffer.RolloutBuffer` from a gymnasium vector env.

Autoreset: vector envs must use ``autoreset_mode=AutoresetMode.SAME_STEP``
(gymnasium >= 1.1), e.g.::

    gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="sync",
                 vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})

In that mode a sub-env that ends an episode is reset inside the same
``step()``: the returned observation is already the first one of the next
episode and the final observation is in ``info["final_obs"]``. Every step is
then a real transition, and a truncated episode is bootstrapped with
``V(info["final_obs"])`` (one extra batched critic pass over just the
truncated sub-envs). gymnasium's default ``NEXT_STEP`` mode instead returns
the final observation and performs the reset on the *next* ``step()``
(reward 0, action ignored), which would store fake transitions; it is
rejected with a ``ValueError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

try:
    from gymnasium.vector import AutoresetMode
except ImportError:  # gymnasium < 1.1 only has NEXT_STEP autoreset
    AutoresetMode = None  # type: ignore[assignment,misc]

from agilerl.components.rollout_buffer import RolloutBuffer
from agilerl.networks.spaces import stack_observations

REQUIRED_AUTORESET_MODE = AutoresetMode.SAME_STEP if AutoresetMode is not None else None

__all__ = ["REQUIRED_AUTORESET_MODE", "check_autoreset_mode", "collect_rollouts"]


def check_autoreset_mode(env: Any) -> None:
    """Raise ``ValueError`` unless ``env`` autoresets in ``SAME_STEP`` mode."""
    if AutoresetMode is None:
        raise ValueError("collect_rollouts needs gymnasium >= 1.1 (AutoresetMode.SAME_STEP)")
    mode = getattr(env, "metadata", {}).get("autoreset_mode")
    if mode is not None and not isinstance(mode, AutoresetMode):
        try:
            mode = AutoresetMode(mode)
        except ValueError:
            mode = None
    if mode != REQUIRED_AUTORESET_MODE:
        raise ValueError(
            f"collect_rollouts needs a vector env with autoreset_mode=AutoresetMode.SAME_STEP "
            f"(got {mode}); create it with vector_kwargs={{'autoreset_mode': "
            f"AutoresetMode.SAME_STEP}} (gymnasium's default NEXT_STEP mode would store "
            f"fake reset transitions)"
        )


def _final_values(agent: Any, env: Any, info: dict[str, Any], needs: np.ndarray) -> np.ndarray:
    """``V(final_obs)`` for the sub-envs flagged in ``needs`` (zeros elsewhere)."""
    idx = np.flatnonzero(needs)
    if "final_obs" not in info:
        raise ValueError(
            "A sub-env was truncated but info has no 'final_obs'; the vector env must "
            "autoreset in SAME_STEP mode"
        )
    final_obs = info["final_obs"]
    batch = stack_observations(env.single_observation_space, [final_obs[i] for i in idx])
    bootstrap = np.zeros(needs.shape[0], dtype=np.float32)
    bootstrap[idx] = agent.get_value(batch)
    return bootstrap


def collect_rollouts(
    agent: Any,
    env: Any,
    buffer: RolloutBuffer,
    obs: Any,
    n_steps: int | None = None,
) -> tuple[Any, list[float], list[int]]:
    """Run the policy for ``n_steps`` vector steps and fill ``buffer``.

    The buffer is reset first; at the end the returns and advantages are
    computed (with the agent's current ``gamma``/``gae_lambda``) using
    ``V(next_obs)``, after the agent's ``scale_rollout_rewards(buffer)`` when it has one
    (PPO's ``normalize_rewards``). ``agent.steps`` grows by ``n_steps * num_envs``.
    Per-env running episode returns live on the buffer, so episodes that span
    several calls are reported whole when they finish.

    Args:
        agent: An agent with ``policy_step(obs)`` (returning ``action``,
            ``env_action``, ``log_prob``, ``value`` arrays) and ``get_value(obs)``,
            e.g. :class:`agilerl.algorithms.ppo.PPO`.
        env: Gymnasium vector env (sync or async) in ``SAME_STEP`` autoreset mode.
        buffer: Rollout buffer with ``num_envs`` matching the env.
        obs: Current observation batch (from ``env.reset()`` or the previous call).
        n_steps: Vector steps to collect; defaults to the buffer capacity.

    Returns:
        ``(next_obs, finished_episode_returns, finished_episode_lengths)``.

    Raises:
        ValueError: If the env autoresets in another mode or sizes mismatch.
    """
    check_autoreset_mode(env)
    num_envs = int(env.num_envs)
    if num_envs != buffer.num_envs:
        raise ValueError(f"Env has {num_envs} sub-envs but the buffer expects {buffer.num_envs}")
    n_steps = buffer.capacity_per_env if n_steps is None else int(n_steps)
    if n_steps > buffer.capacity_per_env:
        raise ValueError(f"n_steps={n_steps} exceeds buffer capacity {buffer.capacity_per_env}")
    buffer.gamma = float(getattr(agent, "gamma", buffer.gamma))
    buffer.gae_lambda = float(getattr(agent, "gae_lambda", buffer.gae_lambda))
    buffer.reset()
    running_returns = buffer.running_returns
    running_lengths = buffer.running_lengths
    finished_returns: list[float] = []
    finished_lengths: list[int] = []
    policy_step = agent.policy_step
    add = buffer.add
    step = env.step
    with torch.inference_mode():
        for _ in range(n_steps):
            out = policy_step(obs)
            next_obs, reward, terminated, truncated, info = step(out.env_action)
            bootstrap = None
            if truncated.any():
                needs = truncated & ~terminated  # a step flagged both is terminal
                if needs.any():
                    bootstrap = _final_values(agent, env, info, needs)
            add(obs, out.action, out.log_prob, reward, out.value, terminated, truncated, bootstrap)
            running_returns += reward
            running_lengths += 1
            done = terminated | truncated
            if done.any():
                for i in np.flatnonzero(done):
                    finished_returns.append(float(running_returns[i]))
                    finished_lengths.append(int(running_lengths[i]))
                    running_returns[i] = 0.0
                    running_lengths[i] = 0
            obs = next_obs
        last_value = agent.get_value(obs)
    scale = getattr(agent, "scale_rollout_rewards", None)
    if scale is not None:  # PPO's normalize_rewards (the reported returns stay the env's)
        scale(buffer)
    buffer.compute_returns_and_advantages(last_value)
    agent.steps += n_steps * num_envs
    return obs, finished_returns, finished_lengths
