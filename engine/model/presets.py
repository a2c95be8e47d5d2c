"""Named model presets (DESIGN.md §2). Shapes agree with ``sim.shapes.MODEL_SHAPES``."""

from __future__ import annotations

from engine.model.config import OuroConfig

_OURO_1_4B = OuroConfig(
    vocab_size=49152,
    hidden_size=2048,
    num_hidden_layers=24,
    num_attention_heads=16,
    num_key_value_heads=16,
    head_dim=128,
    intermediate_size=5632,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    max_position_embeddings=65536,
    total_ut_steps=4,
)

PRESETS: dict[str, OuroConfig] = {
    "ouro-1.4b": _OURO_1_4B,
    "ouro-2.6b": _OURO_1_4B.replace(num_hidden_layers=48),
    # CPU timing runs.
    "small": OuroConfig(
        vocab_size=4096,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        intermediate_size=688,
        rope_theta=10_000.0,
        max_position_embeddings=8192,
    ),
    # Unit tests: GQA (4 query heads over 2 KV heads), a tiny vocabulary, and a large init so
    # random-weight tokens depend on the context instead of repeating the input embedding.
    "tiny": OuroConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        rope_theta=10_000.0,
        max_position_embeddings=1024,
        initializer_range=0.3,
    ),
}


def get_preset(name: str) -> OuroConfig:
    """The config of a preset; ValueError naming the known presets otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"model: unknown preset {name!r}; use one of {', '.join(PRESETS)}") from None
