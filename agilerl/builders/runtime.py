"""What a build needs besides the spec: population slot, device, HPO config, checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AlgorithmBuildRuntime:
    """Runtime inputs to ``build()`` that a manifest cannot hold.

    Attributes:
        index: Population slot of the agent.
        device: Torch device, e.g. ``"cpu"`` or ``"cuda:0"``.
        accelerator: An ``accelerate.Accelerator`` for distributed LLM runs.
        hp_config: Resolved hyperparameter ranges for mutation.
        resume_from_checkpoint: Checkpoint to restore completely (weights,
            optimisers, counters; checkpoint values win over the spec's).
        load_weights_from: Checkpoint whose network weights to load while
            keeping the spec's hyperparameters.
        total_steps: Env steps the run will take (for learning-rate schedules).
    """

    index: int | None = None
    device: Any = "cpu"
    accelerator: Any = None
    hp_config: Any = None
    resume_from_checkpoint: str | None = None
    load_weights_from: str | None = None
    total_steps: int | None = None
