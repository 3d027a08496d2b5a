"""Greedy episodes of a saved multi-agent agent on its run's PettingZoo env.

:func:`agilerl.evaluate.evaluate_checkpoint` comes here when the run's
manifest names a PettingZoo env: one env copy is built from the manifest
(``environment.name`` and ``env_config``), each episode starts from
``reset(seed=seed + episode)``, and every live agent acts greedily. The
result holds each episode's return summed over agents (what training's
``sum_scores`` fitness measures) and each agent's own returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from agilerl.arena.models.env import PettingZooEnvSpec
from agilerl.arena.models.errors import ConfigError

__all__ = ["check_multi_agent_spaces", "run_multi_agent_episodes"]


def check_multi_agent_spaces(agent: Any, env: Any, env_spec: PettingZooEnvSpec) -> None:
    """Refuse an env whose agents or per-agent spaces differ from the agent's.

    Raises:
        ConfigError: Naming the first mismatching agent and both spaces.
    """
    from agilerl.networks.spaces import same_space

    ours, theirs = list(agent.observation_spaces), list(env.possible_agents)
    if sorted(ours) != sorted(theirs):
        raise ConfigError(
            f"environment {env_spec.name}: its agents {theirs} are not the agent's {ours}; "
            "evaluate in the env the agent was trained on"
        )
    pairs = (("observation", agent.observation_spaces), ("action", agent.action_spaces))
    for kind, spaces in pairs:
        for name in ours:
            env_space = getattr(env, f"{kind}_space")(name)
            if not same_space(spaces[name], env_space):
                raise ConfigError(
                    f"environment {env_spec.name}: {name}'s {kind} space {env_space} does not "
                    f"match the agent's {spaces[name]}; evaluate in the env it was trained on"
                )


def _padded(obs: Mapping[str, Any], spaces: Mapping[str, Any]) -> dict[str, Any]:
    """A batch of one observation per agent (zeros for agents that already finished; a
    Dict observation, e.g. with an action mask, as a dict of batches)."""
    return {a: _batch_of_one(obs.get(a), space) for a, space in spaces.items()}


def _batch_of_one(value: Any, space: Any) -> Any:
    if isinstance(getattr(space, "spaces", None), Mapping):
        return {
            k: _batch_of_one(None if value is None else value[k], sub)
            for k, sub in space.spaces.items()
        }
    if value is None:
        return np.zeros((1, *space.shape), dtype=np.float32)
    return np.asarray(value, dtype=np.float32)[None]


def run_multi_agent_episodes(
    agent: Any,
    env_spec: PettingZooEnvSpec,
    *,
    episodes: int,
    seed: int,
    on_frame: Callable[[Any], None] | None = None,
) -> tuple[list[float], dict[str, list[float]]]:
    """Run greedy episodes on one copy of ``env_spec``.

    Args:
        agent: A multi-agent algorithm (``act(obs, greedy=True)`` on per-agent batches).
        env_spec: The run's PettingZoo env.
        episodes: Episodes to run.
        seed: Episode ``i`` starts from ``reset(seed=seed + i)``.
        on_frame: Called with each ``rgb_array`` frame as it is rendered (a video
            encoder: frames are streamed, never all held in memory).

    Returns:
        ``(summed returns, {agent_id: returns})``.

    Raises:
        ConfigError: If the env cannot be made or does not fit the agent.
    """
    from agilerl.envs.pettingzoo import ParallelEnvFactory

    config = dict(env_spec.env_config or {})
    if on_frame is not None:
        config["render_mode"] = "rgb_array"
    env = ParallelEnvFactory.of(env_spec, config)()
    per_agent: dict[str, list[float]] = {a: [] for a in agent.agents}
    summed: list[float] = []
    try:
        check_multi_agent_spaces(agent, env, env_spec)
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            totals = dict.fromkeys(agent.agents, 0.0)
            while env.agents:
                if on_frame is not None:
                    on_frame(env.render())
                actions = agent.act(_padded(obs, agent.observation_spaces), greedy=True)
                obs, rewards, _, _, _ = env.step({a: actions[a][0] for a in env.agents})
                for name, reward in rewards.items():
                    totals[name] += float(reward)
            for name, total in totals.items():
                per_agent[name].append(total)
            summed.append(float(sum(totals.values())))
    finally:
        env.close()
    return summed, per_agent
