"""Shared base for every contract model: unknown keys are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A Pydantic model that forbids unknown keys and validates assignments."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, populate_by_name=True, defer_build=True
    )
