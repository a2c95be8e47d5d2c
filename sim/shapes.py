"""Model shapes the simulator knows without torch (DESIGN.md §2 presets).

The real engine's presets (``engine.model.presets``) carry weights and rope settings too; these
are only the facts the core and the cost models need.
"""

from __future__ import annotations

from engine.core.config import ModelShape

OURO_1_4B = ModelShape(
    num_layers=24, hidden_size=2048, num_heads=16, num_kv_heads=16, head_dim=128,
    intermediate_size=5632, vocab_size=49152, num_depths=4,
)
OURO_2_6B = ModelShape(
    num_layers=48, hidden_size=2048, num_heads=16, num_kv_heads=16, head_dim=128,
    intermediate_size=5632, vocab_size=49152, num_depths=4,
)
SMALL = ModelShape(
    num_layers=4, hidden_size=256, num_heads=4, num_kv_heads=4, head_dim=64,
    intermediate_size=688, vocab_size=4096, num_depths=4,
)
TINY = ModelShape(
    num_layers=2, hidden_size=32, num_heads=4, num_kv_heads=2, head_dim=8,
    intermediate_size=64, vocab_size=64, num_depths=4,
)

MODEL_SHAPES: dict[str, ModelShape] = {
    "ouro-1.4b": OURO_1_4B,
    "ouro-2.6b": OURO_2_6B,
    "small": SMALL,
    "tiny": TINY,
}


def get_shape(name: str) -> ModelShape:
    """The shape of a preset name; ValueError naming the known presets otherwise."""
    try:
        return MODEL_SHAPES[name]
    except KeyError:
        raise ValueError(
            f"model: unknown preset {name!r}; use one of {', '.join(MODEL_SHAPES)}"
        ) from None


def shape_name(shape: ModelShape) -> str | None:
    """The preset name of ``shape``, or None when it is not a preset."""
    for name, known in MODEL_SHAPES.items():
        if known == shape:
            return name
    return None
