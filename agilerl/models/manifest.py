"""Re-export of :mod:`agilerl.arena.models.manifest` (the same objects)."""

from agilerl.arena.models.manifest import *  # noqa: F403
