"""HF checkpoint round trip and every loader rejection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.model import build_model
from engine.model.loader import load_checkpoint, save_checkpoint
from engine.runner import ModelRunner
from tests.reference.fixtures import make_llm, outputs_key, tiny_model


@pytest.fixture()
def ckpt(tmp_path: Path) -> Path:
    save_checkpoint(tiny_model(seed=9, gate_std=0.5), tmp_path / "ckpt")
    return tmp_path / "ckpt"


def _rewrite(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"))


def test_round_trip_gives_the_same_weights_and_tokens(ckpt: Path) -> None:
    original = tiny_model(seed=9, gate_std=0.5)
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg["model_type"] == "ouro" and cfg["total_ut_steps"] == 4
    loaded = build_model(str(ckpt))
    for (name, a), b in zip(original.state_dict().items(), loaded.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name
    h = torch.randn(3, 32)
    torch.testing.assert_close(loaded.coda(h), original.coda(h))
    prompts = [[1, 2, 3, 4, 5], [6, 7]]
    assert outputs_key(make_llm(loaded, "mixed").generate(prompts)) == outputs_key(
        make_llm(original, "mixed").generate(prompts)
    )


def test_bf16_checkpoint_loads_into_fp32(tmp_path: Path) -> None:
    model = tiny_model()
    save_checkpoint(model, tmp_path, dtype=torch.bfloat16)
    loaded = load_checkpoint(tmp_path, dtype=torch.float32)
    w = loaded.lm_head.weight
    assert w.dtype == torch.float32
    assert torch.equal(w, model.lm_head.weight.to(torch.bfloat16).float())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"),
         r"^checkpoint: missing tensor 'model.layers.1.mlp.up_proj.weight' \(1 missing\)$"),
        (lambda t: t.update({"model.rotary_emb.extra": torch.zeros(2)}),
         r"^checkpoint: unexpected tensor 'model.rotary_emb.extra' in model.safetensors$"),
        (lambda t: t.update({"model.norm.weight": torch.ones(33)}),
         r"^checkpoint: tensor 'model.norm.weight' has shape \[33\], expected \[32\]$"),
        (lambda t: t.update({"lm_head.weight": torch.zeros(64, 32, dtype=torch.int32)}),
         r"^checkpoint: tensor 'lm_head.weight' has dtype torch.int32, expected one of"),
    ],
    ids=["missing", "extra", "misshaped", "dtype"],
)
def test_loader_rejects_with_one_line_naming_the_tensor(ckpt: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    _rewrite(ckpt, edit)
    with pytest.raises(ValueError, match=message) as info:
        load_checkpoint(ckpt)
    assert "\n" not in str(info.value)


def test_loader_rejects_duplicates_and_missing_files(ckpt: Path, tmp_path: Path) -> None:
    save_file({"model.norm.weight": torch.ones(32)}, str(ckpt / "extra.safetensors"))
    with pytest.raises(ValueError, match="'model.norm.weight' appears in two files"):
        load_checkpoint(ckpt)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        load_checkpoint(empty)
    (empty / "config.json").write_text((ckpt / "config.json").read_text())
    with pytest.raises(ValueError, match=r"no \*.safetensors"):
        load_checkpoint(empty)


def test_config_mismatch_with_engine_is_rejected(ckpt: Path) -> None:
    raw = json.loads((ckpt / "config.json").read_text())
    raw["tie_word_embeddings"] = True
    (ckpt / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="untied lm_head"):
        load_checkpoint(ckpt)
    llm = make_llm(tiny_model(), "mixed")
    with pytest.raises(ValueError, match="shape"):
        ModelRunner(build_model("small"), llm.cfg)
