"""The base of every configuration section: unknown keys are errors, not silently ignored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
