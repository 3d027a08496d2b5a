"""Multi-turn text environments from GEM (``gem-llm``) as rollout envs.

``environment.name: gem:<family>:<id>`` (e.g. ``gem:game:GuessTheNumber-v0-easy``,
``gem:game:Sudoku-v0-easy``, ``gem:game:Mastermind-v0-easy``, ``gem:rg:arc_1d``) plays
an env of GEM's registry through the rollout env protocol
(:class:`~agilerl.llm.rollout_env.Episode`):

* the env's first observation is the first user turn (with GEM's ``suffix``: the
  board of a board game, e.g. Sudoku's, is only there);
* each assistant turn's text goes to ``env.step`` as is (GEM reads the answer from
  the last ``\\boxed{...}`` in it);
* a non-final observation comes back as the next user turn (with GEM's ``suffix``,
  e.g. the board and "Enter your move.", as GEM's own chat wrapper adds it);
* every turn's reward is kept, and the episode's return is their sum
  (:func:`agilerl.llm.rollout.collect`); an env message is never an action, so its
  tokens carry ``action_mask`` 0 and stay out of the loss.

Episodes are seeded: the row ``{"seed": k}`` resets a fresh env with ``seed=k``, so the
same seed plays the same game. GEM's ``reset(seed)`` reseeds Python's and NumPy's global
generators; each episode runs on generator states of its own, so a run's other random
streams are left as they were, and interleaving episodes (one batched turn at a time)
does not change any of them.

A GEM name is data, not code: nothing the manifest names is imported beyond the gem
package. Envs that would execute the model's text (GEM's code and math families, the
reasoning-gym tasks whose scorers ``eval`` or sympy-parse the answer) are refused by the
spec (:data:`agilerl.arena.models.env.GEM_CODE_IDS`) and, for names that list does not
know, here by their entry point's module.
"""

from __future__ import annotations

import contextlib
import copy
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agilerl.arena.models.env import GEM_NAME
from agilerl.arena.models.errors import ConfigError, Problem

GEM_INSTALL_HINT = "needs the gem extra: pip install 'agilerl[gem]'"
TRAIN_EPISODES = 10_000
"""Training episodes: seeds ``0 .. TRAIN_EPISODES - 1``."""
TEST_SEED = 1_000_000
"""Seed of the first held-out episode."""
DEFAULT_MAX_TURNS = 32
"""Turns per episode of a game that draws its limit per episode (``-random`` variants;
the game ends its own episodes) when the spec sets none."""
TEST_EPISODES = 16
"""Held-out episodes (seeds from :data:`TEST_SEED` on)."""
CODE_RUNNING_MODULES = (
    "gem.envs.code_env",
    "gem.envs.math_env",
    "gem.envs.math_visual_env",
    "gem.envs.terminal",
    "gem.envs.mcpmark",
)
"""Entry-point modules of GEM envs that execute model text or reach out (code sandboxes,
sympy answer checks, terminals, MCP servers): refused whatever their name."""
REASONING_GYM_MODULE = "gem.envs.reasoning_gym"
"""Entry-point module of GEM's reasoning-gym tasks (``rg:<task>``, single-turn)."""


def import_gem(name: str = "gem:...") -> Any:
    """The ``gem`` package.

    Args:
        name: The env the manifest names (for the message).

    Raises:
        ConfigError: Naming ``environment.name`` and the extra to install when gem is missing.
    """
    try:
        import gem
    except ImportError as exc:
        raise ConfigError(
            [
                Problem(
                    "environment.name",
                    f"{name!r} {GEM_INSTALL_HINT} ({exc.name or 'gem'} is not installed)",
                )
            ]
        ) from None
    return gem


@contextlib.contextmanager
def _global_rng(state: list[Any]) -> Iterator[None]:
    """Run a block on the generator states in ``state`` (``[python, numpy]``, filled on exit).

    GEM's envs draw from (and reseed) Python's ``random`` and NumPy's global generator;
    swapping the states in and out gives each episode a stream of its own.
    """
    outer = (random.getstate(), np.random.get_state())
    random.setstate(state[0])
    np.random.set_state(state[1])
    try:
        yield
    finally:
        state[0], state[1] = random.getstate(), np.random.get_state()
        random.setstate(outer[0])
        np.random.set_state(outer[1])


def _seeded_state(seed: int) -> list[Any]:
    """Generator states ``[python, numpy]`` seeded with ``seed``, built without touching
    the global ones."""
    python = random.Random(seed).getstate()
    numpy = np.random.RandomState(seed % 2**32).get_state()
    return [python, numpy]


@dataclass
class GemEpisode:
    """One seeded episode of a GEM env (an :class:`~agilerl.llm.rollout_env.Episode`).

    Attributes:
        make: ``() -> gem.Env`` (a fresh env per episode).
        seed: The episode's seed (``env.reset(seed=seed)``).
        rewards: Each turn's reward, in order (the episode's return is their sum).
    """

    make: Any
    seed: int
    rewards: list[float] = field(default_factory=list)
    _rng: list[Any] = field(default_factory=list, repr=False)
    _env: Any = field(default=None, repr=False)

    def first_messages(self) -> list[dict[str, str]]:
        """Build and reset the env: its first observation (and ``suffix``: a board game's
        board) as the first user turn."""
        self._rng = _seeded_state(self.seed)
        self.rewards = []
        with _global_rng(self._rng):
            self._env = self.make()
            observation, info = self._env.reset(seed=self.seed)
        return [{"role": "user", "content": _user_turn(str(observation), info)}]

    def step(self, text: str) -> tuple[str | None, float, bool]:
        """Pass the assistant's turn to ``env.step``: ``(next user turn | None, reward, done)``.

        ``done`` is GEM's ``terminated or truncated``; the next user turn is the
        observation followed by the env's ``suffix`` (``None`` once done).
        """
        if self._env is None:
            raise RuntimeError("GemEpisode.step before first_messages()")
        with _global_rng(self._rng):
            observation, reward, terminated, truncated, info = self._env.step(text)
        self.rewards.append(float(reward))
        done = bool(terminated or truncated)
        if done:
            return None, float(reward), True
        return _user_turn(str(observation), info), float(reward), False

    @property
    def episode_return(self) -> float:
        """The sum of the turn rewards so far."""
        return float(sum(self.rewards))


def _user_turn(observation: str, info: dict[str, Any] | None) -> str:
    """The observation as GEM's chat wrapper shows it: then the env's ``suffix``, if any."""
    suffix = (info or {}).get("suffix")
    if not suffix:
        return observation
    joiner = "" if not observation or observation.endswith("\n") else "\n"
    return f"{observation}{joiner}{suffix}"


def _env_max_turns(env: Any) -> int:
    """The env's own turn limit: its ``max_turns`` (GEM's games), :data:`DEFAULT_MAX_TURNS`
    when it draws one per episode (the ``-random`` variants), 1 for an env without one
    (GEM's single-turn tasks)."""
    if not hasattr(env, "max_turns"):
        return 1
    limit = env.max_turns
    return limit if isinstance(limit, int) and limit > 0 else DEFAULT_MAX_TURNS


def _brief(exc: BaseException, limit: int = 240) -> str:
    """An exception's message on one line, without terminal colours, at most ``limit`` chars."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    text = " ".join(text.replace("*", " ").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reasoning_gym_maker(gem: Any, env_id: str, config: dict[str, Any]) -> Any:
    """``seed -> env`` for a reasoning-gym task: ``reset(seed)`` draws one of the ``size``
    problems of a dataset the env builds from its own ``seed`` (building one can take a
    second), so each split builds its dataset once and its episodes are shallow copies
    (each its own problem, the dataset shared). Training episodes draw from the dataset
    of ``env_config.seed`` (GEM's 42 by default), held-out ones from the next seed's."""
    train_seed = int(config.get("seed", 42))
    built: dict[int, Any] = {}

    def make(seed: int) -> Any:
        dataset_seed = train_seed + int(seed >= TEST_SEED)
        if dataset_seed not in built:
            built[dataset_seed] = gem.make(env_id, **{**config, "seed": dataset_seed})
        return copy.copy(built[dataset_seed])

    return make


def gem_id(name: str) -> str:
    """``gem:game:Sudoku-v0-easy`` -> ``game:Sudoku-v0-easy`` (GEM's registry id).

    Raises:
        ConfigError: If ``name`` is not ``gem:<family>:<id>``.
    """
    match = GEM_NAME.match(name)
    if match is None:
        raise ConfigError(
            [Problem("environment.name", f"{name!r} is not a GEM id like gem:game:Sudoku-v0-easy")]
        )
    return f"{match['family']}:{match['id']}"


@dataclass
class GemEpisodes:
    """What a rollout env needs from a GEM name (see :func:`gem_episodes`).

    Attributes:
        make_episode: Row ``{"seed": k}`` -> :class:`GemEpisode`.
        train: Training rows, ``{"seed": 0..9999}``.
        test: Held-out rows, 16 seeds from :data:`TEST_SEED` on.
        max_turns: The spec's, else the env's own limit (see :func:`_env_max_turns`).
        first: The first messages of the episode of seed 0 (to check they fit the context).
    """

    make_episode: Any
    train: list[dict[str, Any]]
    test: list[dict[str, Any]]
    max_turns: int
    first: list[dict[str, str]]


def gem_episodes(env_spec: Any) -> GemEpisodes:
    """The seeded episodes of ``environment.name: gem:<family>:<id>``.

    Args:
        env_spec: The validated ``LLMEnvSpec`` (``env_name``, ``env_config``, ``max_turns``).

    Raises:
        ConfigError: Naming ``environment.name`` when gem is not installed, the id is not
            registered, the env executes model text, or it cannot be made here (e.g. it
            downloads data).
    """
    name = env_spec.env_name
    gem = import_gem(name)
    from gem.envs.registration import ENV_REGISTRY

    env_id = gem_id(name)
    registered = ENV_REGISTRY.get(env_id)
    if registered is None:
        family = env_id.split(":", 1)[0]
        close = sorted(k for k in ENV_REGISTRY if k.startswith(f"{family}:"))[:6]
        hint = f"; registered {family}: ids include {', '.join(close)}" if close else ""
        raise ConfigError(
            [Problem("environment.name", f"{name!r}: GEM has no env {env_id!r}{hint}")]
        )
    entry = registered.entry_point
    module = entry.split(":", 1)[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
    if module.startswith(CODE_RUNNING_MODULES):
        raise ConfigError(
            [
                Problem(
                    "environment.name",
                    f"{name!r} ({module}) executes the model's text or reaches outside the "
                    "process; choose a gem:game:... or a gem:rg:... task",
                )
            ]
        )
    config = dict(env_spec.env_config or {})
    if env_spec.max_turns is not None and "max_turns" in registered.kwargs:
        config.setdefault("max_turns", env_spec.max_turns)  # the game's own limit agrees
    if module == REASONING_GYM_MODULE:
        make = _reasoning_gym_maker(gem, env_id, config)
    else:

        def make(seed: int) -> Any:
            del seed  # a game draws its instance in reset(seed)
            return gem.make(env_id, **config)

    def make_episode(row: dict[str, Any]) -> GemEpisode:
        seed = int(row["seed"])
        return GemEpisode(make=lambda: make(seed), seed=seed)

    probe = make_episode({"seed": 0})
    try:
        first = probe.first_messages()
    except Exception as exc:  # any failure to build is the manifest's to fix
        raise ConfigError(
            [
                Problem(
                    "environment.name",
                    f"{name!r} cannot be made here: {type(exc).__name__}: {_brief(exc)} "
                    "(GEM envs that download data, e.g. the word games' NLTK corpus, need "
                    "network access); check environment.env_config",
                )
            ]
        ) from None
    return GemEpisodes(
        make_episode=make_episode,
        train=[{"seed": i} for i in range(TRAIN_EPISODES)],
        test=[{"seed": TEST_SEED + i} for i in range(TEST_EPISODES)],
        max_turns=env_spec.max_turns or _env_max_turns(probe._env),
        first=first,
    )
