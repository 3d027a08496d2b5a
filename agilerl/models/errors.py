"""Re-export of :mod:`agilerl.arena.models.errors` (the same objects)."""

from agilerl.arena.models.errors import *  # noqa: F403
