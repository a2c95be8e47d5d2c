"""The chat prompt: a conversation rendered with the checkpoint's jinja2 chat template.

The template comes from ``--chat-template FILE``, else the checkpoint's ``chat_template.jinja``
or the ``chat_template`` of its ``tokenizer_config.json`` (a string, or a list of named
templates whose ``default`` is used); a preset uses ``DEFAULT_CHAT_TEMPLATE``. A checkpoint
with none has no chat endpoint (400 naming the fix). Rendering matches ``transformers``'
``apply_chat_template``: a sandboxed environment with ``trim_blocks`` and ``lstrip_blocks``,
the loop-control extension, its ``tojson`` filter (no HTML escaping), ``raise_exception``
and ``strftime_now``, and the tokenizer's special tokens (``bos_token``, ``eos_token``, ...)
as variables; the text is then tokenized without adding special tokens.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The presets' template (ChatML, as Ouro's chat checkpoints use): each message as
# "<|im_start|>{role}\n{content}<|im_end|>\n", then "<|im_start|>assistant\n" to answer.
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
            "mask_token")


class ChatTemplateError(ValueError):
    """A template the server cannot use, or a conversation it refuses to render."""


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled template and the special tokens it may refer to."""

    def __init__(self, source: str, special_tokens: dict[str, str] | None = None,
                 origin: str = "template") -> None:
        try:
            self.template = _environment().from_string(source)
        except jinja2.TemplateError as err:
            raise ChatTemplateError(f"{origin}: not a valid jinja2 template ({err})") from None
        self.source = source
        self.special_tokens = special_tokens or {}

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        try:
            return self.template.render(messages=messages, tools=None, documents=None,
                                        add_generation_prompt=add_generation_prompt,
                                        **self.special_tokens)
        except jinja2.TemplateError as err:
            raise ChatTemplateError(f"messages: the chat template refused them ({err})") from None


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _config_template(config: dict[str, Any]) -> str | None:
    found = config.get("chat_template")
    if isinstance(found, list):
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
        found = named.get("default")
    return found if isinstance(found, str) else None


def load_chat_template(model: str, override: str | None = None) -> ChatTemplate | None:
    """The template of ``--chat-template FILE`` or of the checkpoint ``model`` (None when a
    checkpoint has none); a preset's default. ChatTemplateError naming the file otherwise."""
    folder = Path(model)
    config: dict[str, Any] = {}
    config_path = folder / "tokenizer_config.json"
    if config_path.is_file():
        try:
            loaded = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as err:
            raise ChatTemplateError(f"{config_path}: cannot read it ({err})") from None
        config = loaded if isinstance(loaded, dict) else {}
    special = {k: t for k in _SPECIAL if (t := _token_text(config.get(k))) is not None}
    if override is not None:
        try:
            source = Path(override).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ChatTemplateError(f"--chat-template: cannot read {override} ({err})") from None
        return ChatTemplate(source, special, "--chat-template")
    if not folder.is_dir():
        return ChatTemplate(DEFAULT_CHAT_TEMPLATE, special, "default template")
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return ChatTemplate(jinja_file.read_text(encoding="utf-8"), special, str(jinja_file))
    found = _config_template(config)
    return None if found is None else ChatTemplate(found, special, str(config_path))
