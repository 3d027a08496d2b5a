"""Re-export of :mod:`agilerl.arena.models.fsdp` (the same objects)."""

from agilerl.arena.models.fsdp import *  # noqa: F403
