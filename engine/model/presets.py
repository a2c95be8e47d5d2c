"""Named model presets (docs/design.md): the shapes of ``engine.core.shapes.MODEL_SHAPES``
with the rope and init settings of each."""

from __future__ import annotations

from engine.core.shapes import OURO_1_4B, OURO_2_6B, SMALL, TINY
from engine.model.config import OuroConfig

_OURO_ROPE = {"rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 65536}

PRESETS: dict[str, OuroConfig] = {
    "ouro-1.4b": OuroConfig.from_shape(OURO_1_4B, **_OURO_ROPE),
    "ouro-2.6b": OuroConfig.from_shape(OURO_2_6B, **_OURO_ROPE),
    # CPU timing runs.
    "small": OuroConfig.from_shape(SMALL, rope_theta=10_000.0, max_position_embeddings=8192),
    # Unit tests: a large init so random-weight tokens depend on the context instead of
    # repeating the input embedding.
    "tiny": OuroConfig.from_shape(
        TINY, rope_theta=10_000.0, max_position_embeddings=1024, initializer_range=0.3
    ),
}


def get_preset(name: str) -> OuroConfig:
    """The config of a preset; ValueError naming the known presets otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(
            f"model: unknown preset {name!r}; use one of {', '.join(PRESETS)}") from None
