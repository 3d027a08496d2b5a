"""Training and replay-buffer specs: the manifest's ``training`` and ``replay_buffer``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from agilerl.arena.models.base import StrictModel


class CheckpointExportSpec(StrictModel):
    """How LLM checkpoints are exported: adapter weights or a merged model, and when."""

    format: Literal["adapter", "merged"] = Field("adapter", description="Adapter or merged model.")
    trigger: Literal["final", "best", "every", "on_demand"] = Field(
        "final", description="When a merged export is written."
    )

    def should_merge(self, is_final: bool, is_best: bool) -> bool:
        """Whether this save writes a merged model.

        Args:
            is_final: The save at the end of training.
            is_best: The save of a new best agent.
        """
        if self.format == "adapter":
            return False
        if self.trigger == "every":
            return True
        if self.trigger == "final":
            return is_final
        if self.trigger == "best":
            return is_best or is_final
        return False


class TrainingSpec(StrictModel):
    """The manifest's training section."""

    name: str | None = Field(
        None,
        description="Label of the run: the console display, summary.json's name and the "
        "wandb run name (default: the run directory's name).",
    )
    max_steps: int = Field(1_000_000, ge=1, description="Env steps per agent before stopping.")
    evo_steps: int | None = Field(
        None,
        ge=1,
        validation_alias=AliasChoices("evo_steps", "metrics_interval"),
        description="Env steps between evaluations (and evolutions); null takes the algorithm's.",
    )
    pop_size: int = Field(
        1,
        ge=1,
        validation_alias=AliasChoices("pop_size", "population_size"),
        description="Agents trained together.",
    )
    eval_steps: int | None = Field(
        None, ge=1, description="Steps per evaluation episode; null runs full episodes."
    )
    eval_loop: int = Field(1, ge=1, description="Evaluation episodes averaged into one fitness.")
    hpo: bool = Field(False, description="Evolve the population (tournament + mutation).")
    target_score: float | None = Field(
        None, description="Stop once an evaluation reaches this mean return."
    )
    learning_delay: int | None = Field(
        None, ge=0, description="Env steps collected before the first update (off-policy)."
    )
    eps_start: float | None = Field(None, description="Initial epsilon (epsilon-greedy).")
    eps_end: float | None = Field(None, description="Final epsilon.")
    eps_decay: float | None = Field(None, description="Per-step multiplicative epsilon decay.")
    checkpoint_steps: int | None = Field(
        None, ge=1, description="Env steps between checkpoints; null saves after every evaluation."
    )
    checkpoint_path: str | None = Field(None, description="Checkpoint directory.")
    overwrite_checkpoints: bool = Field(False, description="Keep only the latest checkpoint.")
    checkpoint_optimizer: bool = Field(
        True,
        description="Store optimizer state in checkpoints; false writes smaller checkpoints "
        "and a resumed run restarts its optimizers fresh.",
    )
    evaluation_interval: int | None = Field(
        None, ge=1, description="Steps between evaluations (LLM loops)."
    )
    eval_samples_per_task: int = Field(0, ge=0, description="Sampled answers per eval task.")
    eval_greedy: bool = Field(True, description="Evaluate greedily.")
    eval_max_concurrent_episodes: int | None = Field(
        None, ge=1, description="Evaluation episodes in flight at once."
    )
    num_epochs: int | None = Field(None, ge=1, description="Passes over a dataset (LLM dataset).")
    evo_epochs: int | None = Field(
        None,
        ge=1,
        description="Passes over the training split between evolutions (LLM dataset "
        "fine-tuning; instead of evo_steps).",
    )
    max_wall_seconds: float | None = Field(
        None, gt=0, description="Stop after this many seconds of wall time."
    )
    episode_steps: int | None = Field(None, ge=1, description="Steps per bandit episode.")
    sum_scores: bool | None = Field(None, description="Multi-agent fitness is the sum over agents.")
    reporting_interval: int = Field(1024, ge=1, description="Steps between progress reports.")
    experience_sharing: bool | None = Field(
        None, description="Off-policy populations share one replay buffer."
    )
    batched_population: bool | None = Field(
        None,
        description="Train members that share an architecture as one stacked network "
        "(one vector env, one forward, one update for the group); null: on for populations "
        "of more than one agent whose algorithm and memories allow it.",
    )
    fast_grad: bool = Field(
        True,
        description="Compute the gradients of MLP trunks on the graph-free fast path "
        "(hand-written backward passes; stacked populations train through it too); false: "
        "plain autograd, members one after another. Both give the same results within float "
        "tolerance; the fast path is off by itself on a torch version it is not tested on.",
    )
    env_resource_ratio: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="Share of the CPUs given to asynchronous LLM rollout engines (their OpenMP "
        "threads, split between the engines).",
    )
    rollout_mode: Literal["colocated", "async"] = Field(
        "colocated", description="LLM generation in the trainer or on rollout engines."
    )
    rollout_batch_size: int | None = Field(
        None,
        ge=1,
        description="Prompt groups per async engine request (default: a round "
        "split evenly over the engines).",
    )
    rollout_engines_per_agent: int | Literal["auto"] = Field(
        0, description="Rollout engines per agent (async)."
    )
    training_gpus_per_agent: int = Field(1, ge=1, description="Trainer GPUs per agent.")
    weight_sync_backend: Literal["filesystem", "nccl"] | None = Field(
        None, description="How weights reach rollout engines."
    )
    reuse_prefix_cache_across_syncs: bool = Field(
        False, description="Keep vLLM's prefix cache across weight syncs."
    )
    weight_sync_interval: int | None = Field(None, ge=1, description="Steps between weight syncs.")
    rollout_version_stamp: Literal["publish", "oldest_turn"] | None = Field(
        None, description="Policy version stamped on async rollouts."
    )
    checkpoint_export: CheckpointExportSpec | None = Field(
        None, description="LLM checkpoint export."
    )

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        if isinstance(data, dict) and "async_rollout" in data:
            raise ValueError("async_rollout is retired: set rollout_mode: async")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> TrainingSpec:
        if self.evo_steps is not None and self.evo_steps > self.max_steps:
            raise ValueError(
                f"evo_steps ({self.evo_steps}) must not exceed max_steps ({self.max_steps}): "
                f"raise training.max_steps to at least {self.evo_steps}, or lower "
                f"training.evo_steps to at most {self.max_steps}"
            )
        if self.evo_epochs is not None and self.num_epochs is None:
            raise ValueError("evo_epochs needs num_epochs")
        if self.evo_epochs is not None and "evo_steps" in self.model_fields_set:
            raise ValueError(
                "evo_steps and evo_epochs both set when evolution happens: keep one of them"
            )
        if (
            self.eps_start is not None
            and self.eps_end is not None
            and self.eps_start < self.eps_end
        ):
            raise ValueError(f"eps_start ({self.eps_start}) is below eps_end ({self.eps_end})")
        if not self.fast_grad and self.batched_population:
            raise ValueError(
                "batched_population: true trains the stacked members through the fast-gradient "
                "path, which fast_grad: false turns off; set batched_population to false (or "
                "remove it), or fast_grad to true"
            )
        if not self.eval_greedy and self.eval_samples_per_task < 1:
            raise ValueError("eval_greedy: false needs eval_samples_per_task >= 1")
        if self.async_rollout:
            if self.rollout_engines_per_agent == 0:
                raise ValueError("rollout_mode async needs rollout_engines_per_agent >= 1 or auto")
            if self.experience_sharing:
                raise ValueError("experience_sharing is not available with rollout_mode async")
            batch = self.rollout_batch_size or 1
            if batch % self.training_gpus_per_agent:
                raise ValueError("rollout_batch_size must be a multiple of training_gpus_per_agent")
        return self

    @property
    def async_rollout(self) -> bool:
        """Whether generation runs on rollout engines rather than the trainer."""
        return self.rollout_mode == "async"

    def effective_checkpoint_export(self) -> CheckpointExportSpec:
        """LLM checkpoint export defaults when the training section omits it."""
        return self.checkpoint_export or CheckpointExportSpec()

    def effective_rollout_version_stamp(self) -> Literal["publish", "oldest_turn"] | None:
        """Async rollout stamping when the training section omits it."""
        if self.rollout_version_stamp is not None:
            return self.rollout_version_stamp
        return "oldest_turn" if self.async_rollout else None


class NStepBufferArgs(StrictModel):
    """Settings of the n-step buffer."""

    n_step: int = Field(3, ge=1, description="Steps folded into one return.")

    @field_validator("n_step", mode="before")
    @classmethod
    def _null(cls, value: Any) -> Any:
        return 3 if value is None else value


class PerBufferArgs(StrictModel):
    """Settings of the prioritized buffer."""

    alpha: float = Field(0.5, ge=0.0, le=1.0, description="Priority exponent.")

    @field_validator("alpha", mode="before")
    @classmethod
    def _null(cls, value: Any) -> Any:
        return 0.5 if value is None else value


class ReplayBufferSpec(StrictModel):
    """Classic branch of the replay_buffer section."""

    kind: Literal["classic"] = Field("classic", description="Buffer family.")
    name: str | None = Field(None, description="Label.")
    max_size: int = Field(
        100_000,
        ge=1,
        validation_alias=AliasChoices("max_size", "memory_size"),
        description="Transitions kept.",
    )
    standard_buffer: bool = Field(True, description="Keep a plain one-step buffer.")
    n_step_buffer: bool = Field(False, description="Use n-step returns.")
    n_step_buffer_args: NStepBufferArgs = Field(
        default_factory=NStepBufferArgs, description="n-step settings."
    )
    per_buffer: bool = Field(False, description="Prioritized experience replay.")
    per_buffer_args: PerBufferArgs = Field(
        default_factory=PerBufferArgs, description="PER settings."
    )
    store_in_checkpoint: bool = Field(
        False,
        description=(
            "Save the buffer's contents with every checkpoint (large buffers: slow), so a "
            "run stopped by a signal resumes exactly as if uninterrupted. Without it only "
            "the checkpoint made as a run stops early (signal, time limit) carries the buffer."
        ),
    )

    @model_validator(mode="after")
    def _every_setting_acts(self) -> ReplayBufferSpec:
        if self.name is not None:
            raise ValueError(
                "name: the buffer has no label of its own; label the run with "
                "training.name and remove replay_buffer.name"
            )
        if not self.standard_buffer:
            raise ValueError(
                "standard_buffer: false: the main memory is always kept (n-step and "
                "prioritized replay are built on it); remove standard_buffer"
            )
        for args, flag in (
            ("n_step_buffer_args", "n_step_buffer"),
            ("per_buffer_args", "per_buffer"),
        ):
            default = type(self).model_fields[args].get_default(call_default_factory=True)
            if getattr(self, args) != default and not getattr(self, flag):
                raise ValueError(
                    f"{args} is read only with {flag}: true; set {flag}: true or remove {args}"
                )
        return self
