"""Rollout environments: prompts to complete and score, single- or multi-turn.

Two sources, one interface (:class:`RolloutEnv`):

* a local prompt dataset (JSONL/JSON/CSV/Parquet), rendered with the env's
  ``prompt_template`` and scored by a reward from :mod:`agilerl.llm.rewards`
  (single-turn);
* a user environment from a ``module:attr`` entry point (only with
  ``trust_code``): ``factory(**env_config)`` returns an object with
  ``reset(seed: int) -> str`` (the first user message) and
  ``step(text: str) -> (observation: str | None, reward: float, done: bool)``.
  Up to ``max_turns`` turns are played; each observation is appended to the
  conversation as a new user turn;
* a registered multi-turn env named ``gem:<family>:<id>`` (``environment.name``; the
  gem extra), played through :mod:`agilerl.llm.gem_env` (a registry name, not code:
  no ``trust_code`` needed).

An episode's rows are plain dicts, so the train order is a pure function of
(seed, epoch) and a resumed run sees the same prompts.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agilerl.arena.models.errors import ConfigError, Problem
from agilerl.arena.models.trust import TRUST_HINT
from agilerl.llm.datasets import _messages, _rename, read_rows, render_prompt
from agilerl.llm.rewards import RewardFn, resolve_reward

ENTRYPOINT_TRAIN_EPISODES = 10_000
ENTRYPOINT_TEST_SEED = 1_000_000


class Episode:
    """One conversation with the environment (a dataset prompt is a one-turn episode)."""

    def first_messages(self) -> list[dict[str, str]]:
        """The chat messages before the first assistant turn."""
        raise NotImplementedError

    def step(self, text: str) -> tuple[str | None, float, bool]:
        """Score the assistant's turn: ``(next user message, reward, done)``."""
        raise NotImplementedError


@dataclass
class PromptEpisode(Episode):
    """A dataset prompt scored once by a reward function."""

    messages: list[dict[str, str]]
    row: dict[str, Any]
    reward_fn: RewardFn

    def first_messages(self) -> list[dict[str, str]]:
        """The rendered prompt template."""
        return self.messages

    def step(self, text: str) -> tuple[str | None, float, bool]:
        """The reward of the completion; the episode ends."""
        return None, float(self.reward_fn(text, self.row)), True


@dataclass
class EnvEpisode(Episode):
    """An episode of a user environment (``reset``/``step`` on text)."""

    env: Any
    seed: int

    def first_messages(self) -> list[dict[str, str]]:
        """The environment's first message as a user turn."""
        return [{"role": "user", "content": str(self.env.reset(seed=self.seed))}]

    def step(self, text: str) -> tuple[str | None, float, bool]:
        """The environment's answer to the assistant's turn."""
        observation, reward, done = self.env.step(text)
        return observation, float(reward), bool(done)


@dataclass
class RolloutEnv:
    """Train and held-out episodes of a rollout env.

    Attributes:
        train: Training rows (dataset rows, or ``{"seed": k}`` for an entry point).
        test: Held-out rows.
        make_episode: Row -> :class:`Episode`.
        tokenizer: Tokenizer (chat template) used to render turns.
        max_turns: Turns per episode.
        max_reward: Reward of a perfect answer (a completion at least this good "passes").
        name: Label for logs.
    """

    train: list[dict[str, Any]]
    test: list[dict[str, Any]]
    make_episode: Any
    tokenizer: Any
    max_turns: int = 1
    max_reward: float = 1.0
    name: str = "rollout"
    raw: dict[str, Any] = field(default_factory=dict)
    dropped: int = 0
    """Training prompts left out because they fill ``max_model_len`` on their own."""

    def data_report(self) -> dict[str, int]:
        """What was read and what was left out, for ``summary.json``."""
        return {
            "train_rows": len(self.train),
            "test_rows": len(self.test),
            "dropped_too_long": self.dropped,
        }

    def order(self, epoch: int, seed: int) -> list[int]:
        """The shuffled order of training rows in ``epoch`` (a pure function of seed, epoch)."""
        gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
        return torch.randperm(len(self.train), generator=gen).tolist()

    def batch(self, step: int, batch_size: int, seed: int) -> list[dict[str, Any]]:
        """The ``step``-th batch of training rows (epochs wrap around)."""
        per_epoch = max(1, len(self.train) // batch_size)
        epoch, cursor = divmod(step, per_epoch)
        order = self.order(epoch, seed)
        return [self.train[j] for j in order[cursor * batch_size : (cursor + 1) * batch_size]]

    def encode(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of ``messages`` up to the assistant's turn."""
        text = render_prompt(self.tokenizer, messages)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_turn(self, observation: str) -> list[int]:
        """Token ids appended after an assistant turn: the observation as a user turn."""
        return self.encode([{"role": "user", "content": observation}])

    def close(self) -> None:
        """Nothing to release (the trainer calls it on every env)."""


def load_rollout_env(
    env_spec: Any,
    tokenizer: Any,
    *,
    max_model_len: int,
    seed: int = 42,
    base_dir: str | Path | None = None,
    trust_code: bool = False,
) -> RolloutEnv:
    """Build the rollout env an ``LLMEnvSpec`` (``env_type: rollout``) describes.

    Args:
        env_spec: The validated env spec.
        tokenizer: The model's tokenizer.
        max_model_len: Prompts at least this long are dropped.
        seed: Seed of the train/test split.
        base_dir: Folder relative dataset paths are resolved against (default: cwd).
        trust_code: The run's opt-in to user code (reward or env entry points).

    Raises:
        ConfigError: For a hub dataset, a missing file, a reward file or entry
            point without ``trust_code``, a split that leaves a side empty, or a
            ``gem:`` name without the gem extra (see :func:`_gem_env`).
    """
    max_reward = 1.0 if env_spec.max_reward is None else float(env_spec.max_reward)
    if getattr(env_spec, "env_name", None):
        return _gem_env(env_spec, tokenizer, max_reward, max_model_len)
    if env_spec.entrypoint:
        return _entrypoint_env(env_spec, tokenizer, max_reward, trust_code)
    if env_spec.hf_dataset_id:
        raise ConfigError(
            [
                Problem(
                    "environment.hf_dataset_id",
                    "hub datasets need network access; download it and set environment.dataset",
                )
            ]
        )
    reward_fn = _reward_of(env_spec, trust_code, base_dir)
    field_name = "environment.dataset" if env_spec.dataset else "environment.dataset_path"
    path = Path(env_spec.dataset or env_spec.dataset_path)
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    rows = _rename(read_rows(path, field_name), env_spec.columns)
    perm = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)).tolist()
    n_train = round(len(rows) * env_spec.train_test_split)
    if n_train == 0 or n_train == len(rows):
        raise ConfigError(
            [
                Problem(
                    "environment.train_test_split",
                    f"{env_spec.train_test_split} of {len(rows)} rows leaves a split empty",
                )
            ]
        )

    def make_episode(row: dict[str, Any]) -> Episode:
        messages = _messages(row, env_spec.prompt_column, env_spec.prompt_template)
        return PromptEpisode(messages=messages, row=row, reward_fn=reward_fn)

    env = RolloutEnv(
        train=[rows[i] for i in perm[:n_train]],
        test=[rows[i] for i in perm[n_train:]],
        make_episode=make_episode,
        tokenizer=tokenizer,
        max_turns=1,
        max_reward=max_reward,
        name=env_spec.name,
    )
    fits = [
        r for r in env.train if len(env.encode(make_episode(r).first_messages())) < max_model_len
    ]
    if not fits:
        raise ConfigError(
            [Problem("network.max_context_length", "every training prompt is too long")]
        )
    env.dropped = len(env.train) - len(fits)
    env.train = fits
    return env


def _reward_of(env_spec: Any, trust_code: bool, base_dir: str | Path | None) -> RewardFn:
    if env_spec.reward:
        return resolve_reward(env_spec.reward, env_spec.reward_config, trust_code=trust_code)
    if not trust_code:
        raise ConfigError(
            [
                Problem(
                    "environment.rubric_file_path",
                    f"{env_spec.rubric_file_path!r} runs code (executes the file); refused "
                    f"without {TRUST_HINT}; or use a built-in environment.reward",
                )
            ]
        )
    import importlib.util

    path = Path(env_spec.rubric_file_path)
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    if not path.is_file():
        raise ConfigError(
            [Problem("environment.rubric_file_path", f"{path} does not exist; check the path")]
        )
    module_spec = importlib.util.spec_from_file_location(f"_agilerl_reward_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    fn = getattr(module, env_spec.rubric_name, None)
    if not callable(fn):
        raise ConfigError(
            [Problem("environment.rubric_name", f"{path} defines no {env_spec.rubric_name}()")]
        )
    return fn


def _entrypoint_env(env_spec: Any, tokenizer: Any, max_reward: float, trust: bool) -> RolloutEnv:
    if not trust:
        raise ConfigError(
            [
                Problem(
                    "environment.entrypoint",
                    f"{env_spec.entrypoint!r} runs code (imports and calls it); refused "
                    f"without {TRUST_HINT}",
                )
            ]
        )
    module_name, _, attr = env_spec.entrypoint.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            [Problem("environment.entrypoint", f"cannot import {env_spec.entrypoint!r}: {exc}")]
        ) from None
    config = dict(env_spec.env_config or {})

    def make_episode(row: dict[str, Any]) -> Episode:
        return EnvEpisode(env=factory(**config), seed=int(row["seed"]))

    return RolloutEnv(
        train=[{"seed": i} for i in range(ENTRYPOINT_TRAIN_EPISODES)],
        test=[{"seed": ENTRYPOINT_TEST_SEED + i} for i in range(16)],
        make_episode=make_episode,
        tokenizer=tokenizer,
        max_turns=env_spec.max_turns or 1,
        max_reward=max_reward,
        name=env_spec.entrypoint,
    )


def _gem_env(env_spec: Any, tokenizer: Any, max_reward: float, max_model_len: int) -> RolloutEnv:
    """``environment.name: gem:<family>:<id>``: GEM's seeded episodes as a rollout env.

    Raises:
        ConfigError: See :func:`~agilerl.llm.gem_env.gem_episodes`; and naming
            ``network.max_context_length`` when the first message leaves no room to answer.
    """
    from agilerl.llm.gem_env import gem_episodes

    episodes = gem_episodes(env_spec)
    env = RolloutEnv(
        train=episodes.train,
        test=episodes.test,
        make_episode=episodes.make_episode,
        tokenizer=tokenizer,
        max_turns=episodes.max_turns,
        max_reward=max_reward,
        name=env_spec.env_name,
    )
    length = len(env.encode(episodes.first))
    if length >= max_model_len:
        raise ConfigError(
            [
                Problem(
                    "network.max_context_length",
                    f"{max_model_len} tokens: {env_spec.env_name!r}'s first message alone is "
                    f"{length} tokens; raise it above that plus the turns' answers and replies",
                )
            ]
        )
    return env
