"""Fill a :class:`~agilerl.components.recurrent_rollout_buffer.RecurrentRolloutBuffer`.

The recurrent counterpart of :func:`agilerl.training.collect.collect_rollouts`
(same autoreset rules, same return values): the policy acts from each env's
recurrent state, the buffer stores the state every step was acted from, a
truncated episode is bootstrapped with ``V(final_obs)`` read from the state
its last step reached, and a state is zeroed when its episode ends. The state
reached at the end is kept on the buffer (``rollout_state``), so the next call
continues the same episodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agilerl.components.recurrent_rollout_buffer import RecurrentRolloutBuffer
from agilerl.networks.spaces import stack_observations
from agilerl.training.collect import check_autoreset_mode

__all__ = ["collect_recurrent_rollouts"]


def collect_recurrent_rollouts(
    agent: Any,
    env: Any,
    buffer: RecurrentRolloutBuffer,
    obs: Any,
    n_steps: int | None = None,
) -> tuple[Any, list[float], list[int]]:
    """Run a recurrent policy for ``n_steps`` vector steps and fill ``buffer``.

    Args:
        agent: An agent with ``recurrent_step(obs, state)`` and
            ``get_value(obs, state)``, e.g. a recurrent
            :class:`agilerl.algorithms.ppo.PPO`.
        env: Gymnasium vector env in ``SAME_STEP`` autoreset mode.
        buffer: Recurrent rollout buffer with ``num_envs`` matching the env.
        obs: Current observation batch.
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
    buffer.gamma = float(agent.gamma)
    buffer.gae_lambda = float(agent.gae_lambda)
    buffer.reset()
    state = buffer.rollout_state
    finished_returns: list[float] = []
    finished_lengths: list[int] = []
    with torch.inference_mode():
        for _ in range(n_steps):
            out, next_state = agent.recurrent_step(obs, state)
            next_obs, reward, terminated, truncated, info = env.step(out.env_action)
            bootstrap = None
            needs = truncated & ~terminated  # a step flagged both is terminal
            if needs.any():
                idx = np.flatnonzero(needs)
                final = stack_observations(
                    env.single_observation_space, [info["final_obs"][i] for i in idx]
                )
                bootstrap = np.zeros(num_envs, dtype=np.float32)
                bootstrap[idx] = agent.get_value(
                    final, next_state[torch.as_tensor(idx, device=next_state.device)]
                )
            buffer.add(
                obs,
                out.action,
                out.log_prob,
                reward,
                out.value,
                terminated,
                truncated,
                bootstrap,
                state=state,
            )
            buffer.running_returns += reward
            buffer.running_lengths += 1
            done = terminated | truncated
            if done.any():
                next_state = next_state.clone()
                for i in np.flatnonzero(done):
                    finished_returns.append(float(buffer.running_returns[i]))
                    finished_lengths.append(int(buffer.running_lengths[i]))
                    buffer.running_returns[i] = 0.0
                    buffer.running_lengths[i] = 0
                next_state[torch.as_tensor(done, device=next_state.device)] = 0.0
            state, obs = next_state, next_obs
        last_value = agent.get_value(obs, state)
    buffer.rollout_state = state.cpu()
    scale = getattr(agent, "scale_rollout_rewards", None)
    if scale is not None:  # PPO's normalize_rewards (the reported returns stay the env's)
        scale(buffer)
    buffer.compute_returns_and_advantages(last_value)
    agent.steps += n_steps * num_envs
    return obs, finished_returns, finished_lengths
