"""The base of every scenario section: strict pydantic, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base: unknown keys and wrong types are errors (YAML ints still fill float fields);
    ``.inf`` and ``.nan`` are refused in every number field (nothing the simulator computes
    from one is finite)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
