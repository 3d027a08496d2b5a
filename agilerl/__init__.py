"""agilerl: train RL agents and fine-tune LLMs from one validated manifest.

The package root stays import-light: the contract (:mod:`agilerl.arena.models`)
must load without torch, so nothing heavy is imported here. :func:`load` (a
trained agent, ready to act) is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agilerl.deploy.trained_agent import load

__version__ = "0.1.0"
__all__ = ["__version__", "load"]


def __getattr__(name: str) -> Any:
    """``agilerl.load``, imported (with torch) when first used."""
    if name == "load":
        from agilerl.deploy.trained_agent import load

        return load
    raise AttributeError(f"module 'agilerl' has no attribute {name!r}")
