"""Run options: the composed config's keys that are not manifest sections."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agilerl.arena.models.base import StrictModel


class LoggerOptions(StrictModel):
    """Where metrics go besides the run directory's files."""

    kind: Literal["local", "wandb"] = Field("local", description="local files, or also wandb.")
    tensorboard: bool = Field(True, description="Write TensorBoard events under tb/.")
    project: str = Field("agilerl", description="wandb project.")
    entity: str | None = Field(None, description="wandb entity (team or user).")
    mode: Literal["online", "offline", "disabled"] | None = Field(
        None, description="wandb mode; null reads WANDB_MODE."
    )
    tags: list[str] = Field(default_factory=list, description="wandb tags.")


class RunOptions(StrictModel):
    """How to run a validated manifest."""

    manifest: str | None = Field(None, description="A YAML/JSON manifest file to run.")
    dry_run: bool = Field(False, description="Validate, print the manifest and exit.")
    resume: str | None = Field(None, description="Run directory to resume.")
    seed: int | None = Field(
        None, ge=0, description="Seed of envs, torch and numpy (null: 0; resume keeps the run's)."
    )
    device: str = Field("cpu", description="cpu, cuda or cuda:N.")
    torch_threads: int = Field(1, ge=0, description="torch threads; 0 keeps torch's default.")
    flush_denormal: bool = Field(
        True, description="Flush subnormal floats to zero in CPU arithmetic while training."
    )
    run_dir: str | None = Field(None, description="Run directory; default Hydra's output dir.")
    accept_changed_inputs: bool = Field(
        False,
        description="Resume even though the base model, dataset or reward file changed since "
        "the run started (its inputs.json).",
    )
    trust_code: bool = Field(
        False, description="Allow manifest fields that run code (entrypoints, module:Id, rubrics)."
    )
    logger: LoggerOptions = Field(default_factory=LoggerOptions, description="Logging.")
