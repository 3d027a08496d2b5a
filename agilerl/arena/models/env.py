"""Environment specs: the manifest's ``environment`` section, chosen by ``env_type``.

``env_type`` may be left out: the manifest infers it from the algorithm
(PPO -> gym, MADDPG -> pettingzoo, CQN -> offline, NeuralUCB -> bandit,
GRPO -> rollout, DPO/SFT -> dataset).
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agilerl.arena.models.base import StrictModel
from agilerl.arena.models.images import (
    AtariPreprocessingSpec,
    bare_id,
    image_family,
    image_settings_problem,
)

_GYM_ID = re.compile(r"^([\w.\-]+:)?([\w.\-]+/)?[\w.\-]+-v\d+$")
_MODULE_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$")
GEM_NAME = re.compile(r"^gem:(?P<family>[A-Za-z][\w]*):(?P<id>[\w.\-]+)$")
"""``gem:<family>:<env id>``: an env of GEM's registry (gem-llm): gem:game:Sudoku-v0-easy."""
GEM_CODE_FAMILIES = frozenset({"code", "math"})
"""GEM families whose scoring executes the model's text: ``code`` runs the programs the
model writes, ``math`` parses its answers with sympy's ``parse_expr`` (Python ``eval``)."""
GEM_CODE_IDS = frozenset(
    {
        "eval:CodeContest",
        *(f"eval:{name}" for name in ("MATH500", "AMC", "OlympiadBench", "Minerva", "AIME24")),
        # reasoning-gym scorers that eval() the answer or sympy-parse it, or exec() task code
        *(
            f"rg:{name}"
            for name in (
                "binary_matrix",
                "codeio",
                "composite",
                "countdown",
                "intermediate_integration",
                "n_queens",
                "polynomial_multiplication",
                "puzzle24",
                "simple_integration",
                "spiral_matrix",
                "string_insertion",
            )
        ),
    }
)
"""GEM ids (``<family>:<id>``, gem-llm 0.1.0) whose scoring executes the model's text or a
task's code; ``rg:composite`` mixes tasks, these among them."""

ACTION_SPACE_KINDS: dict[str, str] = {
    "CartPole-v1": "discrete",
    "CartPole-v0": "discrete",
    "CartPoleNoVel-v1": "discrete",
    "Acrobot-v1": "discrete",
    "MountainCar-v0": "discrete",
    "LunarLander-v3": "discrete",
    "LunarLander-v2": "discrete",
    "Pendulum-v1": "continuous",
    "MountainCarContinuous-v0": "continuous",
    "LunarLanderContinuous-v3": "continuous",
    "BipedalWalker-v3": "continuous",
    "HalfCheetah-v5": "continuous",
    "Hopper-v5": "continuous",
    "agilerl/ConnectFour-v3": "discrete",
    "agilerl/TicTacToe-v3": "discrete",
    **{f"ALE/{game}-v5": "discrete" for game in ("Pong", "Breakout", "SpaceInvaders", "Seaquest")},
    **{
        f"MinAtar/{game}-v{v}": "discrete"
        for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
        for v in (0, 1)
    },
}
"""Action-space kind of well-known gymnasium ids, so a mismatch fails before any env is built."""


def action_space_kind_of(name: str | None) -> str | None:
    """The action-space kind of a known id (any ``module:`` prefix), ``None`` if unknown.

    Every ALE and MinAtar game has a discrete action space.
    """
    if not isinstance(name, str):
        return None
    kind = ACTION_SPACE_KINDS.get(bare_id(name))
    return kind or ("discrete" if image_family(name) else None)


class EnvSpecBase(StrictModel):
    """Fields every environment section carries."""

    num_envs: int = Field(1, ge=1, description="Parallel environment copies.")
    version: str | int | None = Field(None, description="Version of a custom env archive.")


class GymEnvSpec(EnvSpecBase):
    """A Gymnasium environment, vectorised ``num_envs`` times."""

    env_type: Literal["gym"] = Field("gym", description="Environment kind.")
    name: str = Field(..., min_length=1, description="Gymnasium id, e.g. CartPole-v1.")
    num_envs: int = Field(32, ge=1, description="Parallel environment copies.")
    custom: bool = Field(False, description="A custom env loaded from entrypoint.")
    default_type: str = Field("float32", description="Observation dtype.")
    entrypoint: str | None = Field(
        None, description="'module:callable' returning the env (explicit opt-in to run code)."
    )
    path: str | None = Field(None, description="Directory added to sys.path for entrypoint.")
    env_config: dict[str, Any] | None = Field(
        None, alias="config", description="Keyword arguments for gymnasium.make."
    )
    env_wrappers: list[str | tuple[str, dict[str, Any]]] | None = Field(
        None, alias="wrappers", description="Gymnasium wrappers applied in order."
    )
    sync: bool = Field(True, description="Step copies in-process (true) or in subprocesses.")
    max_episode_steps: int | None = Field(None, ge=1, description="Override the time limit.")
    atari_preprocessing: AtariPreprocessingSpec | None = Field(
        None,
        description="gymnasium's AtariPreprocessing (frame skip, no-ops, resize, grey-scale) "
        "for an ALE id; null: raw frames.",
    )
    frame_stack: int = Field(
        1,
        ge=1,
        le=16,
        description="Stack this many last frames as channels (FrameStackObservation); "
        "image observations only.",
    )
    channels_last: bool | None = Field(
        None,
        description="The env's images are [H, W, C]: true turns them into [C, H, W], false "
        "keeps them; null: true for ALE and MinAtar, else guessed when frames are stacked.",
    )
    action_mask: Literal["observation", "info"] = Field(
        "observation",
        description="Where the env reports its legal actions: 'observation' (a Dict "
        "observation with an 'action_mask' key, PettingZoo classic's layout; read whenever "
        "present) or 'info' (info['action_mask'] at every step, moved into the observation). "
        "Discrete actions only.",
    )

    @model_validator(mode="after")
    def _name_shape(self) -> GymEnvSpec:
        if self.entrypoint is None and not self.custom and not _GYM_ID.match(self.name):
            hint = (
                " (this looks like a PettingZoo module: set env_type: pettingzoo)"
                if _MODULE_PATH.match(self.name)
                else ""
            )
            raise ValueError(f"name {self.name!r} is not a gymnasium id like 'CartPole-v1'{hint}")
        if self.entrypoint is not None and not _ENTRYPOINT.match(self.entrypoint):
            raise ValueError(f"entrypoint {self.entrypoint!r} must look like 'package.module:attr'")
        problem = image_settings_problem(self, ACTION_SPACE_KINDS)
        if problem:
            raise ValueError(problem)
        return self


class PettingZooEnvSpec(EnvSpecBase):
    """A PettingZoo parallel environment, named by its module path."""

    env_type: Literal["pettingzoo"] = Field("pettingzoo", description="Environment kind.")
    name: str = Field(
        ..., min_length=1, description="Module with parallel_env(), e.g. mpe2.simple_spread_v3."
    )
    num_envs: int = Field(8, ge=1, description="Parallel environment copies.")
    env_config: dict[str, Any] | None = Field(
        None, alias="config", description="Keyword arguments for parallel_env()."
    )
    sync: bool = Field(True, description="Step copies in-process (true) or in subprocesses.")
    action_mask: Literal["observation", "info"] = Field(
        "observation",
        description="Where each agent's legal actions come from: 'observation' (a Dict "
        "observation with an 'action_mask' key; read whenever present) or 'info' "
        "(infos[agent]['action_mask'] at every step, moved into the observation). "
        "Discrete actions only.",
    )

    @model_validator(mode="after")
    def _module_path(self) -> PettingZooEnvSpec:
        if not _MODULE_PATH.match(self.name):
            raise ValueError(
                f"name {self.name!r} is not a PettingZoo module path like "
                "'mpe2.simple_spread_v3'; single-agent gymnasium envs need a single-agent algorithm"
            )
        return self


class OfflineEnvSpec(GymEnvSpec):
    """A Gymnasium env for evaluation plus a fixed dataset to learn from."""

    env_type: Literal["offline"] = Field("offline", description="Environment kind.")
    minari_dataset_id: str | None = Field(None, description="Minari dataset id.")
    dataset_path: str | None = Field(None, description="HDF5 or .npz file of transitions.")
    remote: bool = Field(False, description="Download the Minari dataset if missing.")

    @model_validator(mode="after")
    def _one_source(self) -> OfflineEnvSpec:
        if (self.minari_dataset_id is None) == (self.dataset_path is None):
            raise ValueError("set exactly one of minari_dataset_id and dataset_path")
        images = (self.atari_preprocessing, self.channels_last)
        if images != (None, None) or self.frame_stack != 1:
            raise ValueError(
                "an offline dataset holds the observations it was recorded with: remove "
                "atari_preprocessing, frame_stack and channels_last"
            )
        if self.action_mask != "observation":
            raise ValueError(
                "action_mask: an offline dataset holds no action masks and the offline "
                "algorithms act unmasked; remove action_mask"
            )
        return self


class BanditEnvSpec(EnvSpecBase):
    """A contextual bandit built from a table of features and targets."""

    env_type: Literal["bandit"] = Field("bandit", description="Environment kind.")
    name: str = Field("BanditEnv", description="Label of the bandit.")
    features: str | None = Field(None, description="CSV/parquet file of context features.")
    targets: str | None = Field(None, description="CSV/parquet file of the correct arm per row.")
    dataset: str | None = Field(
        None, description="A built-in table instead of files: 'iris' or 'wine'."
    )
    entrypoint: str | None = Field(None, description="'module:callable' returning the bandit env.")
    path: str | None = Field(None, description="Directory added to sys.path for entrypoint.")
    env_config: dict[str, Any] | None = Field(None, alias="config", description="Env arguments.")

    @model_validator(mode="after")
    def _one_source(self) -> BanditEnvSpec:
        if (self.features is None) != (self.targets is None):
            raise ValueError("features and targets must be given together")
        sources = [self.features is not None, self.dataset is not None, self.entrypoint is not None]
        if sum(sources) != 1:
            raise ValueError("set exactly one of features+targets, dataset or entrypoint")
        return self


class LLMEnvType(str, Enum):
    """Kinds of LLM environment."""

    ROLLOUT = "rollout"
    DATASET = "dataset"

    def __str__(self) -> str:
        return self.value


class LLMEnvSpec(EnvSpecBase):
    """An LLM environment: prompts to roll out and reward, or rows to learn from."""

    env_type: LLMEnvType = Field(..., description="rollout (generate + reward) or dataset.")
    objective: Literal["preference", "sft"] | None = Field(
        None, description="Loss of a dataset env (inferred from DPO/SFT)."
    )
    dataset: str | None = Field(None, description="Local dataset file (jsonl, json, csv, parquet).")
    dataset_path: str | None = Field(None, description="Alternative spelling of a local file.")
    hf_dataset_id: str | None = Field(None, description="A hub dataset id (needs network access).")
    columns: dict[str, str] | None = Field(None, description="Rename map for dataset columns.")
    prompt_column: str = Field("prompt", description="Column holding the prompt.")
    response_column: str = Field("response", description="Column holding the SFT response.")
    chosen_column: str = Field("chosen", description="Preferred response (DPO).")
    rejected_column: str = Field("rejected", description="Dispreferred response (DPO).")
    prompt_template: dict[str, str] | None = Field(
        None, description="Chat turns keyed '<role>_<index>'; values may use {column}."
    )
    rubric_file_path: str | None = Field(
        None, alias="reward_file_path", description="Python file with the reward function."
    )
    rubric_name: str = Field(
        "reward_fn", min_length=1, alias="reward_fn_name", description="Reward function name."
    )
    reward: str | None = Field(
        None,
        description="Built-in reward (countdown, exact_answer, numeric, format, regex, "
        "digit_fraction) or 'module:attr' of user code (needs trust_code).",
    )
    reward_config: dict[str, Any] | None = Field(
        None, description="Keyword arguments of the reward (e.g. pattern for regex)."
    )
    max_reward: float | None = Field(None, description="Reward of a perfect answer.")
    train_test_split: float = Field(0.9, ge=0.0, le=1.0, description="Share used for training.")
    entrypoint: str | None = Field(None, description="'module:attr' of a rollout environment.")
    env_name: str | None = Field(
        None,
        alias="name",
        description="A registered multi-turn env: 'gem:<family>:<id>' from GEM (the gem "
        "extra), e.g. gem:game:GuessTheNumber-v0-easy, gem:game:Sudoku-v0-easy, gem:rg:arc_1d.",
    )
    env_config: dict[str, Any] | None = Field(
        None, description="Arguments for entrypoint (or GEM's make for a gem: name)."
    )
    max_turns: int | None = Field(
        None, ge=1, description="Turns per episode (a gem: game's own limit if unset)."
    )

    model_config = {**StrictModel.model_config, "use_enum_values": False}

    @property
    def name(self) -> str:
        """A label for logs: the env name, else the dataset, else the entrypoint."""
        return (
            self.env_name
            or self.dataset
            or self.dataset_path
            or self.hf_dataset_id
            or self.entrypoint
            or "llm"
        )

    @field_validator("env_name")
    @classmethod
    def _gem_name(cls, name: str | None) -> str | None:
        """A registry name is data (no code is imported for it), so only GEM's own
        text-scored envs are accepted: families that execute the model's text are refused."""
        if name is None:
            return None
        match = GEM_NAME.match(name)
        if match is None:
            raise ValueError(
                f"environment.name={name!r}: an LLM env's name is a GEM id "
                "'gem:<family>:<id>', e.g. gem:game:GuessTheNumber-v0-easy (needs the gem "
                "extra); for your own env set environment.entrypoint instead"
            )
        gem_id = f"{match['family']}:{match['id']}"
        if match["family"] in GEM_CODE_FAMILIES or gem_id in GEM_CODE_IDS:
            raise ValueError(
                f"environment.name={name!r}: this GEM env scores an answer by executing it "
                "(running the model's code, or Python eval/sympy parsing of its text), which "
                "agilerl does not run from a manifest; choose a gem:game:... or another "
                "gem:rg:... task, or wrap the env in your own environment.entrypoint "
                "(trust_code)"
            )
        return name

    @field_validator("prompt_template")
    @classmethod
    def _bounded_template(cls, template: dict[str, str] | None) -> dict[str, str] | None:
        """Each turn may only name dataset columns, with a short format spec: a template
        is data, so it must not reach into objects (``{row.__class__}``), index by position
        (``{0}``) or expand to gigabytes (``{target:>99999999}``)."""
        for key, text in (template or {}).items():
            check_template_text(key, text)
        return template

    @model_validator(mode="after")
    def _sources(self) -> LLMEnvSpec:
        datasets = [x for x in (self.dataset, self.dataset_path, self.hf_dataset_id) if x]
        if len(datasets) > 1:
            raise ValueError("set only one of dataset, dataset_path and hf_dataset_id")
        if self.env_type is LLMEnvType.DATASET:
            if not datasets:
                raise ValueError("a dataset env needs dataset, dataset_path or hf_dataset_id")
            if self.objective is None:
                raise ValueError("a dataset env needs objective: preference or sft")
            if self.entrypoint or self.rubric_file_path or self.reward or self.env_name:
                raise ValueError(
                    "a dataset env takes no entrypoint, name, reward or rubric_file_path"
                )
            return self
        sources = [bool(datasets), bool(self.entrypoint), bool(self.env_name)]
        if sum(sources) != 1:
            raise ValueError(
                "a rollout env needs exactly one source: a dataset, an entrypoint or a "
                "name (gem:<family>:<id>)"
            )
        if self.env_name:
            extra = [
                key
                for key, value in (
                    ("reward", self.reward),
                    ("rubric_file_path", self.rubric_file_path),
                    ("prompt_template", self.prompt_template),
                    ("columns", self.columns),
                )
                if value is not None
            ]
            if extra:
                fields = ", ".join(f"environment.{key}" for key in extra)
                raise ValueError(
                    f"environment.name={self.env_name!r} is a GEM env: it writes its own "
                    f"prompts and scores each turn; remove {fields}"
                )
        if datasets:
            if (self.rubric_file_path is None) == (self.reward is None):
                raise ValueError("a dataset rollout needs one of reward and rubric_file_path")
            if self.prompt_template is None:
                raise ValueError("a dataset rollout needs prompt_template")
            if self.max_turns not in (None, 1):
                raise ValueError("a dataset rollout is single-turn: max_turns must be 1")
            if self.env_config:
                raise ValueError("env_config only applies to an entrypoint or gem: rollout env")
        return self


EnvSpecType = GymEnvSpec | PettingZooEnvSpec | OfflineEnvSpec | BanditEnvSpec | LLMEnvSpec
"""Any environment spec."""

ENV_SPECS: dict[str, type[EnvSpecBase]] = {
    "gym": GymEnvSpec,
    "pettingzoo": PettingZooEnvSpec,
    "offline": OfflineEnvSpec,
    "bandit": BanditEnvSpec,
    "rollout": LLMEnvSpec,
    "dataset": LLMEnvSpec,
}
"""``env_type`` -> spec class."""


TEMPLATE_SPEC_LIMIT = 16
"""Longest format spec (``:>8``, ``.2f``) a prompt template may give a column."""
TEMPLATE_WIDTH_LIMIT = 200
"""Widest padding or precision a prompt template may ask for (characters)."""
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WIDTHS = re.compile(r"\d+")


def check_template_text(key: str, text: str) -> None:
    """Refuse a template turn that could do more than put column values into text.

    Raises:
        ValueError: Naming the turn and the replacement field at fault.
    """
    import string

    try:
        fields = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"{key}: {exc} (write a literal brace as {{{{ or }}}})") from None
    for _, name, spec, _ in fields:
        if name is None:
            continue
        if not _COLUMN.fullmatch(name):
            raise ValueError(
                f"{key}: {{{name}}} is not a column name; a template names "
                "dataset columns ({question}), not positions ({0}) or attributes ({row.x})"
            )
        if spec and ("{" in spec or len(spec) > TEMPLATE_SPEC_LIMIT):
            raise ValueError(f"{key}: the format spec of {{{name}}} is too long")
        if spec and any(int(n) > TEMPLATE_WIDTH_LIMIT for n in _WIDTHS.findall(spec)):
            raise ValueError(
                f"{key}: {{{name}:{spec}}} pads or rounds to more than "
                f"{TEMPLATE_WIDTH_LIMIT} characters"
            )
