"""The base of every scenario section: strict pydantic, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base: unknown keys and wrong types are errors (YAML ints still fill float fields)."""

    model_config = ConfigDict(extra="forbid", strict=True)
