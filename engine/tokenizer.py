"""Text <-> token ids for the server and the benchmark client.

A checkpoint directory that ships ``tokenizer.json`` (HF Ouro checkpoints do) is read with the
``tokenizers`` library; its EOS id comes from the checkpoint's ``generation_config.json`` or
``config.json`` (``eos_token_id``), else none.

Presets have random weights and no vocabulary, so they use the byte-level fallback: a text
encodes to its UTF-8 bytes, each byte ``b`` becoming token ``b % vocab_size`` (exact for a
vocabulary of at least 256 ids, folded for the tiny test model's 64), and token ``t`` decodes
to byte ``t % 256``; byte sequences that are not valid UTF-8 decode with U+FFFD. The fallback
has no EOS token. Token-id prompts always work, whatever the tokenizer.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Protocol

from tokenizers import Tokenizer as HFTokenizerImpl
from tokenizers.decoders import DecodeStream

from engine.text_stream import TokenDecoder


class Tokenizer(Protocol):
    """What serving needs from a tokenizer."""

    name: str
    eos_token_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...

    def decoder(self) -> TokenDecoder: ...


class _ByteDecoder:
    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def step(self, token_id: int) -> str:
        return str(self._utf8.decode(bytes((token_id % 256,))))


class ByteTokenizer:
    """The documented byte-level fallback for presets (module docstring)."""

    name = "bytes"
    eos_token_id: int | None = None

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        v = self.vocab_size
        return [b % v for b in text.encode("utf-8")]

    def decode(self, token_ids: list[int]) -> str:
        return bytes(t % 256 for t in token_ids).decode("utf-8", errors="replace")

    def decoder(self) -> TokenDecoder:
        return _ByteDecoder()


class _HFDecoder:
    def __init__(self, tok: HFTokenizerImpl) -> None:
        self._tok = tok
        self._stream = DecodeStream(skip_special_tokens=True)

    def step(self, token_id: int) -> str:
        try:
            return self._stream.step(self._tok, token_id) or ""
        except Exception:  # noqa: BLE001 - an id the vocabulary lacks (random weights) adds no text
            return ""


class HFTokenizer:
    """A checkpoint's ``tokenizer.json``."""

    def __init__(self, path: Path, eos_token_id: int | None) -> None:
        self.name = str(path)
        self._tok = HFTokenizerImpl.from_file(str(path))
        self.eos_token_id = eos_token_id

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, token_ids: list[int]) -> str:
        return str(self._tok.decode(token_ids, skip_special_tokens=True))

    def decoder(self) -> TokenDecoder:
        return _HFDecoder(self._tok)


def _eos_id(model_dir: Path) -> int | None:
    for name in ("generation_config.json", "config.json"):
        try:
            eos = json.loads((model_dir / name).read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(eos, list) and eos:
            eos = eos[0]
        if isinstance(eos, int) and not isinstance(eos, bool):
            return eos
    return None


def load_tokenizer(model: str, vocab_size: int) -> Tokenizer:
    """The tokenizer of a checkpoint directory (its ``tokenizer.json``) or the byte-level
    fallback (presets, or a directory without one). ValueError naming ``model`` on a
    ``tokenizer.json`` the library cannot read."""
    path = Path(model) / "tokenizer.json"
    if not path.is_file():
        return ByteTokenizer(vocab_size)
    try:
        return HFTokenizer(path, _eos_id(Path(model)))
    except Exception as err:  # noqa: BLE001 - the library raises its own exception types
        raise ValueError(f"model: cannot read {path} ({err})") from None
