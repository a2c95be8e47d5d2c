"""Ouro model configuration (HF ``config.json`` field names) and its core-facing shape."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from engine.core.config import ModelShape

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
    def from_hf_dict(cls, raw: dict[str, Any]) -> OuroConfig:
        """Build from a parsed HF config.json (head_dim defaults to hidden / heads)."""
        missing = [
            k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                        "intermediate_size") if k not in raw
        ]
        if missing:
            raise ValueError(f"config.json: missing field {missing[0]!r}")
        fields = {k: raw[k] for k in _HF_FIELDS if raw.get(k) is not None}
        fields.setdefault("num_key_value_heads", raw["num_attention_heads"])
        fields.setdefault("head_dim", raw["hidden_size"] // raw["num_attention_heads"])
        return cls(**fields)

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
