"""The one table of model shapes and its HF config.json reader, shared by the simulator, the
scenario schema and the model presets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from engine.core.shapes import MODEL_SHAPES, TINY, get_shape, shape_from_hf, shape_name
from loopserve.errors import UserError
from loopserve.schema.build import model_shape

HF = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 64, "rope_theta": 1e4}


def test_an_hf_config_reads_as_its_shape_with_derived_defaults() -> None:
    assert shape_from_hf(HF) == TINY  # head_dim 32 / 4, four depths
    bare = {k: v for k, v in HF.items() if k != "num_key_value_heads"}
    shape = shape_from_hf({**bare, "head_dim": 16, "total_ut_steps": 3})
    assert (shape.num_kv_heads, shape.head_dim, shape.num_depths) == (4, 16, 3)


def test_missing_keys_and_bad_values_name_the_field() -> None:
    with pytest.raises(ValueError, match="missing key\\(s\\) hidden_size, intermediate_size"):
        shape_from_hf({k: v for k, v in HF.items() if k not in ("hidden_size",
                                                                "intermediate_size")})
    with pytest.raises(ValueError, match="model.num_kv_heads: 3 must divide num_heads 4"):
        shape_from_hf({**HF, "num_key_value_heads": 3})
    with pytest.raises(ValueError, match="model.num_heads: must be an integer >= 1, got 0"):
        shape_from_hf({**HF, "num_attention_heads": 0})


def test_the_schema_and_the_model_config_read_through_the_same_parser(tmp_path: Path) -> None:
    from engine.model.config import OuroConfig

    (tmp_path / "config.json").write_text(json.dumps({**HF, "total_ut_steps": 2}))
    assert model_shape(str(tmp_path)) == OuroConfig.from_hf_dict({**HF, "total_ut_steps": 2}
                                                                 ).to_shape()
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 64}))
    with pytest.raises(UserError, match="missing key\\(s\\) num_hidden_layers, hidden_size"):
        model_shape(str(tmp_path))
    with pytest.raises(ValueError, match="config.json: missing key\\(s\\) num_hidden_layers"):
        OuroConfig.from_hf_dict({"vocab_size": 64})


def test_presets_by_name() -> None:
    assert get_shape("tiny") is TINY and shape_name(TINY) == "tiny"
    assert shape_name(dataclasses.replace(TINY, num_layers=3)) is None
    with pytest.raises(ValueError,
                       match=f"unknown preset 'nope'; use one of {', '.join(MODEL_SHAPES)}"):
        get_shape("nope")
