"""The one table of model shapes (docs/design.md), and reading a shape from an HF
``config.json``.

Only the facts the core and the cost models need; the real engine's presets
(``engine.model.presets``) add rope and init settings on top of these shapes.
"""

from __future__ import annotations

from collections.abc import Mapping

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
# GQA (4 query heads over 2 KV heads) and a tiny vocabulary: unit tests.
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

# ModelShape field -> HF config.json key (Ouro naming); all required.
HF_KEYS: dict[str, str] = {
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "vocab_size": "vocab_size",
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


def shape_from_hf(raw: Mapping[str, object]) -> ModelShape:
    """The shape in a parsed HF ``config.json``: ``num_key_value_heads`` defaults to the
    attention heads, ``head_dim`` to hidden / heads, ``total_ut_steps`` (the depths) to 4.
    ValueError naming the missing keys or the bad value."""
    missing = [key for key in HF_KEYS.values() if key not in raw]
    if missing:
        raise ValueError(f"missing key(s) {', '.join(missing)}")
    fields: dict[str, object] = {name: raw[key] for name, key in HF_KEYS.items()}
    heads, hidden = raw["num_attention_heads"], raw["hidden_size"]
    fields["num_kv_heads"] = _get(raw, "num_key_value_heads", heads)
    if "head_dim" in raw and raw["head_dim"] is not None:
        fields["head_dim"] = raw["head_dim"]
    elif isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        fields["head_dim"] = hidden // heads
    else:
        fields["head_dim"] = None  # ModelShape names the bad field
    fields["num_depths"] = _get(raw, "total_ut_steps", 4)
    return ModelShape(**fields)  # type: ignore[arg-type]  # ModelShape checks every value


def _get(raw: Mapping[str, object], key: str, default: object) -> object:
    value = raw.get(key)
    return default if value is None else value
