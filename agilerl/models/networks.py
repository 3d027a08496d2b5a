"""Re-export of :mod:`agilerl.arena.models.networks` (the same objects)."""

from agilerl.arena.models.networks import *  # noqa: F403
