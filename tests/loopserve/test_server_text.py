"""Tokenizers of the server (a checkpoint's tokenizer.json, the byte-level fallback) and the
streamed text (incremental detokenization, stop strings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from engine.core.request import SamplingParams
from engine.llm import LLM
from engine.model.build import build_model
from engine.model.loader import save_checkpoint
from engine.text_stream import TextStream
from engine.tokenizer import ByteTokenizer, HFTokenizer, load_tokenizer
from tests.server_helpers import running_server

CORPUS = ["the loop runs four times", "a token exits the loop early", "mixed batches share"]


def _write_tokenizer(folder: Path, eos: int | None = None) -> Tokenizer:
    """A BPE vocabulary small enough for the tiny model's 64 ids."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=60, special_tokens=["<eos>", "<unk>"]))
    assert tok.get_vocab_size() <= 64
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    if eos is not None:
        (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    return tok


def test_byte_fallback_round_trip_and_multibyte_streaming() -> None:
    tok = ByteTokenizer(4096)
    ids = tok.encode("héllo")
    assert ids == list("héllo".encode()) and tok.decode(ids) == "héllo"
    dec = tok.decoder()
    assert [dec.step(i) for i in ids] == ["h", "", "é", "l", "l", "o"]  # é is two bytes
    assert ByteTokenizer(64).encode("A") == [65 % 64]
    assert tok.eos_token_id is None
    assert isinstance(load_tokenizer("tiny", 64), ByteTokenizer)


def test_checkpoint_tokenizer_json(tmp_path: Path) -> None:
    _write_tokenizer(tmp_path, eos=0)
    tok = load_tokenizer(str(tmp_path), 64)
    assert isinstance(tok, HFTokenizer) and tok.eos_token_id == 0
    ids = tok.encode("the loop exits early")
    assert tok.decode(ids) == "the loop exits early"
    dec = tok.decoder()
    assert "".join(dec.step(i) for i in ids) == "the loop exits early"
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"^model: cannot read .*tokenizer.json"):
        load_tokenizer(str(tmp_path), 64)


class _Chars:
    """One character per token id (ord), to drive TextStream directly."""

    def step(self, token_id: int) -> str:
        return chr(token_id)


def _run(text: str, stops: tuple[str, ...]) -> tuple[list[str], bool]:
    ts = TextStream(_Chars(), stops)
    out = []
    for ch in text:
        piece, stopped = ts.add(ord(ch))
        out.append(piece)
        if stopped:
            return out, True
    out.append(ts.flush())
    return out, False


def test_stop_strings_cut_the_text_and_hold_back_a_possible_start() -> None:
    pieces, stopped = _run("abcXYdef", ("XYd",))
    assert stopped and "".join(pieces) == "abc"
    assert pieces[:3] == ["", "", "a"]  # two characters held while "XYd" could begin
    pieces, stopped = _run("abXYc", ("XYd", "Yc"))
    assert stopped and "".join(pieces) == "abX"
    pieces, stopped = _run("abXY", ("XYd",))
    assert not stopped and "".join(pieces) == "abXY"  # held text is released at the end
    assert _run("abc", ())[0] == ["a", "b", "c", ""]


def test_serving_a_checkpoint_uses_its_tokenizer(tmp_path: Path) -> None:
    import httpx2

    model = build_model("tiny", seed=3)
    save_checkpoint(model, tmp_path)
    tok = _write_tokenizer(tmp_path)
    prompt = "the loop"
    ids = tok.encode(prompt, add_special_tokens=False).ids
    want = LLM(model, arm="mixed").generate(
        [ids], SamplingParams(max_tokens=10))[0].output_token_ids
    with running_server(model=str(tmp_path), served_model_name="ckpt") as srv:
        r = httpx2.post(srv.url + "/v1/completions", timeout=30, json={
            "model": "ckpt", "prompt": prompt, "max_tokens": 10, "temperature": 0})
    body = r.json()
    assert body["usage"]["prompt_tokens"] == len(ids)
    assert body["choices"][0]["text"] == tok.decode(want, skip_special_tokens=True)
