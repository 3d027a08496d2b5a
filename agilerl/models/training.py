"""Training and replay-buffer specs, plus the helpers that build buffers from them."""

from agilerl.arena.models.training import (  # noqa: F401
    CheckpointExportSpec,
    NStepBufferArgs,
    PerBufferArgs,
    ReplayBufferSpec,
    TrainingSpec,
)
