"""Use a trained agent outside its run: ``agilerl.load(RUN)`` and ``agent.act(obs)``.

    import agilerl

    agent = agilerl.load("runs/2026-11-29/12-00-00_ppo_cartpole")
    env = agent.make_env()
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(agent.act(obs))

The run is found the way ``agilerl evaluate`` finds it
(:func:`agilerl.evaluate.resolve_agent_file`): a run directory means its latest
checkpoint and, in a population, the member with the best last fitness. The
agent file is read with ``torch.load(weights_only=True)``; nothing in a run
directory runs code, and only :meth:`TrainedAgent.make_env` may need
``trust_code`` (for an env the manifest names by code).

``act`` takes the observations the run's env yields (after the wrappers of
its ``environment`` section) and does what the agent does in training: its
networks one-hot discrete observations and divide ``uint8`` images by 255.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from agilerl.arena.models.errors import ConfigError
from agilerl.evaluate import find_env_spec, load_algorithm, resolve_agent_file

__all__ = ["TrainedAgent", "TrainedMultiAgent", "load"]


def load(
    run_dir_or_checkpoint: str | Path, *, agent: int | None = None, device: str = "cpu"
) -> TrainedAgent | TrainedMultiAgent:
    """The best agent of a run, ready to act.

    Args:
        run_dir_or_checkpoint: A run directory (its latest checkpoint), a
            checkpoint directory (``checkpoints/step_<n>``) or an ``agent_<i>.pt``
            file.
        agent: The population slot to load (default: the best last fitness).
        device: Torch device of the networks.

    Returns:
        A :class:`TrainedAgent`, or a :class:`TrainedMultiAgent` for a
        multi-agent (PettingZoo) run.

    Raises:
        ConfigError: For a path that does not exist or is not a run, a corrupt
            or foreign checkpoint, an agent slot the checkpoint lacks or an
            unknown device; the message names the path and what to pass instead.
    """
    from agilerl.algorithms.core.base import LLMAlgorithm, MultiAgentAlgorithm
    from agilerl.launch.preflight import check_device

    check_device(device)
    agent_file = resolve_agent_file(Path(run_dir_or_checkpoint), agent)
    algorithm = load_algorithm(agent_file, device)
    if isinstance(algorithm, LLMAlgorithm):
        raise ConfigError(
            f"{agent_file}: an LLM agent; load the model its run exported with transformers"
        )
    if isinstance(algorithm, MultiAgentAlgorithm):
        return TrainedMultiAgent(algorithm, agent_file)
    return TrainedAgent(algorithm, agent_file)


class _Loaded:
    """What both kinds of loaded agent share: the algorithm, its file and its run."""

    def __init__(self, algorithm: Any, checkpoint: Path) -> None:
        self.algorithm = algorithm
        """The rebuilt algorithm (its networks, spec and history)."""
        self.checkpoint = Path(checkpoint)
        """The agent file it was loaded from."""

    @property
    def name(self) -> str:
        """The algorithm's registered name (``PPO``, ``Rainbow DQN``, ...)."""
        return str(self.algorithm.spec.name)

    @property
    def fitness(self) -> float | None:
        """The agent's last evaluation score in training (``None`` before any)."""
        return self.algorithm.fitness[-1] if self.algorithm.fitness else None

    @property
    def run_dir(self) -> Path | None:
        """The run directory above the checkpoint (``None`` for a lone agent file)."""
        return next((p for p in self.checkpoint.parents if (p / "manifest.yaml").is_file()), None)

    def env_spec(self) -> Any:
        """The ``environment`` section of the run's manifest.

        Raises:
            ConfigError: When no ``manifest.yaml`` lies above the checkpoint.
        """
        if self.run_dir is None:
            raise ConfigError(
                f"{self.checkpoint}: no manifest.yaml above it, so the run's env is unknown; "
                "load the agent from its run directory, or make the env yourself"
            )
        return find_env_spec(self.checkpoint, None)

    def reset(self) -> None:
        """Start new episodes: zero a recurrent policy's state (a no-op otherwise)."""
        self.algorithm.reset_state()

    def __repr__(self) -> str:
        fitness = "" if self.fitness is None else f", fitness {self.fitness:.4g}"
        return f"{type(self).__name__}({self.name} from {self.checkpoint}{fitness})"


class TrainedAgent(_Loaded):
    """A single-agent policy loaded from a run (see :func:`load`).

    Attributes:
        algorithm: The rebuilt algorithm (``PPO``, ``DQN``, ...).
        checkpoint: The agent file it was loaded from.
        observation_space: The single-env observation space it reads.
        action_space: The single-env action space it acts in.
    """

    def __init__(self, algorithm: Any, checkpoint: Path) -> None:
        super().__init__(algorithm, checkpoint)
        self.observation_space: spaces.Space = algorithm.observation_space
        self.action_space: spaces.Space = algorithm.action_space

    def act(self, obs: Any, deterministic: bool = True) -> Any:
        """Env actions for one observation or a batch (numpy in, numpy out).

        Args:
            obs: One observation as the run's env yields it, or a batch of them
                (a leading axis; a dict of such arrays for a Dict space).
            deterministic: The policy's greedy action (its mode). ``False``
                acts as in training: a sample of a stochastic policy, DDPG/TD3's
                exploration noise; DQN stays greedy (no epsilon).

        Returns:
            For one observation, one env action: an ``int`` for a Discrete
            space, an array of the action space's shape otherwise (a Box
            action within its bounds). For a batch, an array with a leading axis.

        Raises:
            ValueError: If ``obs`` has neither the observation space's shape nor
                that shape with a leading batch axis.
        """
        algorithm = self.algorithm
        if not getattr(algorithm, "acts_on_batches", True):  # a bandit: one step's arm contexts
            return np.asarray(algorithm.act(obs, greedy=deterministic))
        batch, batched = as_batch(obs, self.observation_space)
        actions = algorithm.act(batch, greedy=deterministic)
        if isinstance(actions, tuple):
            actions = actions[0]
        return np.asarray(actions) if batched else one_action(actions, self.action_space)

    def make_env(self, render_mode: str | None = None, trust_code: bool = False) -> Any:
        """One copy of the run's gymnasium env, with its wrappers (what :meth:`act` reads).

        Args:
            render_mode: Gymnasium's ``render_mode`` (``"rgb_array"``, ``"human"``).
            trust_code: Allow an env that the manifest names by code (an
                ``entrypoint``, a ``module:Id`` name, a wrapper class).

        Raises:
            ConfigError: Without a manifest above the checkpoint, for code
                without ``trust_code``, or for an env whose spaces do not fit.
        """
        from agilerl.arena.models.env import GymEnvSpec
        from agilerl.arena.models.trust import require_trust
        from agilerl.envs.gym import make_single_env
        from agilerl.evaluate import check_spaces

        spec = self.env_spec()
        if not isinstance(spec, GymEnvSpec):
            raise ConfigError(f"{self.checkpoint}: the run's env {spec.name} is not a gym env")
        require_trust(spec, trust_code, str(self.checkpoint))
        env = make_single_env(spec, render_mode=render_mode)
        try:
            check_spaces(self.algorithm, env, spec)
        except ConfigError:
            env.close()
            raise
        return env


class TrainedMultiAgent(_Loaded):
    """A multi-agent policy loaded from a run (see :func:`load`): one action per agent id.

    Attributes:
        algorithm: The rebuilt algorithm (``IPPO``, ``MADDPG``, ``MATD3``).
        checkpoint: The agent file it was loaded from.
        agents: The agent ids, in the env's order.
        observation_spaces: Each agent's observation space.
        action_spaces: Each agent's action space.
    """

    def __init__(self, algorithm: Any, checkpoint: Path) -> None:
        super().__init__(algorithm, checkpoint)
        self.agents: list[str] = list(algorithm.agents)
        self.observation_spaces: dict[str, spaces.Space] = dict(algorithm.observation_spaces)
        self.action_spaces: dict[str, spaces.Space] = dict(algorithm.action_spaces)

    def act(self, obs: Mapping[str, Any], deterministic: bool = True) -> dict[str, Any]:
        """Env actions of the agents in ``obs`` (the dict a PettingZoo parallel env yields).

        Agents missing from ``obs`` (finished ones) are given zero observations
        and get no action.

        Args:
            obs: ``{agent id: observation}``, each one observation or a batch
                (all alike).
            deterministic: The greedy action of each policy; ``False`` acts as
                in training (samples, exploration noise).

        Returns:
            ``{agent id: action}`` for the agents in ``obs``: an ``int`` or an
            array per agent for single observations, arrays with a leading
            axis for batches.

        Raises:
            ValueError: For an agent id the policy does not know, observations
                of the wrong shape, or single observations mixed with batches.
        """
        unknown = sorted(set(obs) - set(self.agents))
        if unknown:
            raise ValueError(f"unknown agent ids {unknown}; this policy acts for {self.agents}")
        if not obs:
            return {}
        batches = {a: as_batch(value, self.observation_spaces[a]) for a, value in obs.items()}
        layouts = {batched for _, batched in batches.values()}
        sizes = {len(batch) for batch, _ in batches.values()}
        if len(layouts) > 1 or len(sizes) > 1:
            raise ValueError(
                "pass every agent one observation, or every agent a batch of the same size"
            )
        (batched,), (size,) = layouts, sizes
        full = {
            a: batches[a][0] if a in batches else np.zeros((size, *space.shape), np.float32)
            for a, space in self.observation_spaces.items()
        }
        actions = self.algorithm.act(full, greedy=deterministic)
        if batched:
            return {a: np.asarray(actions[a]) for a in obs}
        return {a: one_action(actions[a], self.action_spaces[a]) for a in obs}

    def make_env(self, render_mode: str | None = None, trust_code: bool = False) -> Any:
        """One copy of the run's PettingZoo parallel env (what :meth:`act` reads).

        Args:
            render_mode: PettingZoo's ``render_mode``.
            trust_code: Allow an env module outside the known packages.

        Raises:
            ConfigError: Without a manifest above the checkpoint, for code
                without ``trust_code``, or for an env whose agents or spaces differ.
        """
        from agilerl.arena.models.env import PettingZooEnvSpec
        from agilerl.arena.models.trust import require_trust
        from agilerl.envs.pettingzoo import ParallelEnvFactory
        from agilerl.evaluate_multi_agent import check_multi_agent_spaces

        spec = self.env_spec()
        if not isinstance(spec, PettingZooEnvSpec):
            raise ConfigError(f"{self.checkpoint}: the run's env {spec.name} is not PettingZoo")
        require_trust(spec, trust_code, str(self.checkpoint))
        config = dict(spec.env_config or {})
        if render_mode is not None:
            config["render_mode"] = render_mode
        env = ParallelEnvFactory.of(spec, config)()
        try:
            check_multi_agent_spaces(self.algorithm, env, spec)
        except ConfigError:
            env.close()
            raise
        return env


def as_batch(obs: Any, space: spaces.Space) -> tuple[Any, bool]:
    """``obs`` as a numpy batch in the space's storage dtype, and whether it was one already.

    Raises:
        ValueError: If ``obs`` fits neither one observation of ``space`` nor a batch.
    """
    if isinstance(space, spaces.Dict | spaces.Tuple):
        from agilerl.networks.spaces import composite_items

        items = composite_items(space)
        is_tuple = isinstance(space, spaces.Tuple)
        leaves = {
            key: _leaf_batch(obs[int(key)] if is_tuple else obs[key], sub, f"obs[{key!r}]")
            for key, sub in items
        }
        layouts = {batched for _, batched in leaves.values()}
        if len(layouts) > 1:
            raise ValueError("pass one observation or a batch for every key, not a mix")
        batch = {key: leaf for key, (leaf, _) in leaves.items()}
        return (tuple(batch.values()) if is_tuple else batch), layouts.pop()
    return _leaf_batch(obs, space, "obs")


def _leaf_batch(obs: Any, space: spaces.Space, name: str) -> tuple[np.ndarray, bool]:
    from agilerl.networks.spaces import storage_dtype

    dtype = np.dtype(str(storage_dtype(space)).removeprefix("torch."))
    array = np.asarray(obs, dtype=dtype)
    shape = tuple(space.shape or ())
    if array.shape == shape:
        return array[None], False
    if array.ndim == len(shape) + 1 and array.shape[1:] == shape:
        return array, True
    batch_shape = "(batch" + "".join(f", {d}" for d in shape) + ")"
    raise ValueError(
        f"{name} has shape {array.shape}, which fits neither one observation of {space} "
        f"(shape {shape}) nor a batch of them {batch_shape}"
    )


def one_action(actions: Any, space: spaces.Space) -> Any:
    """The first action of a batch, as the env takes it: an ``int`` for a Discrete space."""
    action = np.asarray(actions)[0]
    return int(action) if isinstance(space, spaces.Discrete) else action
