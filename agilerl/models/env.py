"""Re-export of :mod:`agilerl.arena.models.env` (the same objects)."""

from agilerl.arena.models.env import *  # noqa: F403
