"""Re-export of :mod:`agilerl.arena.models.hpo` (the same objects)."""

from agilerl.arena.models.hpo import *  # noqa: F403
