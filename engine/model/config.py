"""Ouro model configuration (HF ``config.json`` field names) and its core-facing shape."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from engine.core.config import ModelShape
from engine.core.shapes import shape_from_hf

# HF fields we read; anything else in config.json (auto_map, torch_dtype, ...) is ignored.
_HF_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "rope_theta",
    "rms_norm_eps",
    "max_position_embeddings",
    "total_ut_steps",
    "tie_word_embeddings",
    "initializer_range",
)
# Those beyond the shape (``engine.core.shapes.shape_from_hf`` reads the rest).
_EXTRA_FIELDS = (
    "rope_theta", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings",
    "initializer_range",
)


@dataclass(frozen=True, slots=True)
class OuroConfig:
    """Architecture hyper-parameters of an Ouro (LoopLM) model, HF naming.

    ``total_ut_steps`` is the number of depths D (loops of the shared layer stack).
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 65536
    total_ut_steps: int = 4
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        if self.tie_word_embeddings:
            raise ValueError("tie_word_embeddings: Ouro uses an untied lm_head; got true")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads: {self.num_key_value_heads} must divide "
                f"num_attention_heads {self.num_attention_heads}"
            )
        self.to_shape()  # validates the positive integers

    @property
    def num_depths(self) -> int:
        return self.total_ut_steps

    def to_shape(self) -> ModelShape:
        """The shape facts the scheduling core and cost models use."""
        return ModelShape(
            num_layers=self.num_hidden_layers,
            hidden_size=self.hidden_size,
            num_heads=self.num_attention_heads,
            num_kv_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            intermediate_size=self.intermediate_size,
            vocab_size=self.vocab_size,
            num_depths=self.total_ut_steps,
        )

    def replace(self, **changes: Any) -> OuroConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_shape(cls, shape: ModelShape, **extra: Any) -> OuroConfig:
        """The config of ``shape`` with the non-shape fields in ``extra`` (rope, init)."""
        return cls(
            vocab_size=shape.vocab_size,
            hidden_size=shape.hidden_size,
            num_hidden_layers=shape.num_layers,
            num_attention_heads=shape.num_heads,
            num_key_value_heads=shape.num_kv_heads,
            head_dim=shape.head_dim,
            intermediate_size=shape.intermediate_size,
            total_ut_steps=shape.num_depths,
            **extra,
        )

    @classmethod
    def from_hf_dict(cls, raw: dict[str, Any]) -> OuroConfig:
        """Build from a parsed HF config.json: the shape as ``shape_from_hf`` reads it, plus
        the fields beyond the shape that are present."""
        try:
            shape = shape_from_hf(raw)
        except ValueError as err:
            raise ValueError(f"config.json: {err}") from None
        return cls.from_shape(shape, **{k: raw[k] for k in _EXTRA_FIELDS if raw.get(k) is not None})

    def to_hf_dict(self) -> dict[str, Any]:
        """config.json content in HF layout (remote-code Ouro)."""
        out: dict[str, Any] = {k: getattr(self, k) for k in _HF_FIELDS}
        out.update(
            model_type="ouro",
            architectures=["OuroForCausalLM"],
            hidden_act="silu",
            early_exit_threshold=1.0,
            use_sliding_window=False,
        )
        return out
