"""Reusable RL components (buffers)."""

from __future__ import annotations

from agilerl.components.rollout_buffer import RolloutBuffer

__all__ = ["RolloutBuffer"]
