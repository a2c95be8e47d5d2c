"""``/v1/chat/completions`` on the tiny model: the chat template rendered as ``transformers``
renders it, the real ``openai`` client streamed and not, a checkpoint without a template,
``--chat-template``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from openai import OpenAI

from engine.core.request import SamplingParams
from engine.llm import LLM
from engine.model.build import build_model
from engine.model.loader import save_checkpoint
from engine.tokenizer import load_tokenizer
from loopserve.server.chat_template import DEFAULT_CHAT_TEMPLATE, load_chat_template
from tests.loopserve.test_server_text import _write_tokenizer
from tests.reference import fixtures  # noqa: F401 - one torch thread, as the other engine tests
from tests.server_helpers import Running, running_server

MESSAGES = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "the loop"},
            {"role": "assistant", "content": "runs four times"},
            {"role": "user", "content": "a token exits"}]

# Whitespace control, trim_blocks/lstrip_blocks-sensitive lines, a namespace, tojson,
# raise_exception and the special tokens: what checkpoints' templates use.
TEMPLATE = """{{ bos_token }}
{%- set ns = namespace(n=0) %}
{% for message in messages %}
    {% if message['role'] not in ['system', 'user', 'assistant'] %}
        {{ raise_exception('unknown role ' + message['role']) }}
    {% endif %}
    {% set ns.n = ns.n + 1 %}
<|{{ message['role'] }}|>
{{ message['content'] | trim }}{{ eos_token }}
    {% if loop.last and message['role'] == 'user' %}{{ {'turns': ns.n} | tojson }}{% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% endif %}"""


@pytest.fixture(scope="module")
def srv() -> Iterator[Running]:
    with running_server() as running:
        yield running


def _client(r: Running, key: str = "none") -> OpenAI:
    return OpenAI(base_url=r.url + "/v1", api_key=key, max_retries=0, timeout=60)


def _hf_render(template: str, messages: list[dict], **special: str) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template([messages], chat_template=template,
                                        add_generation_prompt=True, **special)
    return rendered[0]


def _checkpoint(folder: Path, template: str | None) -> None:
    save_checkpoint(build_model("tiny", seed=3), folder)
    _write_tokenizer(folder)
    config: dict = {"bos_token": "<unk>", "eos_token": "<eos>",
                    "tokenizer_class": "PreTrainedTokenizerFast"}
    if template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def test_template_renders_token_for_token_as_transformers(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    _checkpoint(tmp_path, TEMPLATE)
    ours = load_chat_template(str(tmp_path))
    assert ours is not None
    text = ours.render(MESSAGES)
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    assert text == hf.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    want_ids = hf.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True,
                                      return_dict=False)
    assert load_tokenizer(str(tmp_path), 64).encode(text) == list(want_ids)
    assert '{"turns": 4}' in text and "<|assistant|>\n" in text  # tojson without escaping
    assert ours.render(MESSAGES, add_generation_prompt=False) == _hf_render(
        TEMPLATE, MESSAGES, bos_token="<unk>", eos_token="<eos>").removesuffix("<|assistant|>\n")
    # the presets' default template renders as transformers renders it too
    default = load_chat_template("tiny")
    assert default is not None and default.render(MESSAGES) == _hf_render(
        DEFAULT_CHAT_TEMPLATE, MESSAGES)


def _want(messages: list[dict], max_tokens: int, **kw: object) -> list[int]:
    text = _hf_render(DEFAULT_CHAT_TEMPLATE, messages)
    prompt = [b % 64 for b in text.encode()]
    return LLM("tiny", arm="mixed", seed=0).generate(
        [prompt], SamplingParams(max_tokens=max_tokens, **kw))[0].output_token_ids  # type: ignore[arg-type]


def _ids(text: str) -> list[int]:
    return list(text.encode("utf-8"))


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
def test_chat_with_the_openai_client_streamed_and_not(srv: Running, limit: str) -> None:
    want = _want(MESSAGES, 9, temperature=0.0)
    client = _client(srv)
    full = client.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0,
                                          **{limit: 9})
    assert full.object == "chat.completion" and full.id.startswith("chatcmpl-")
    msg = full.choices[0].message
    assert msg.role == "assistant" and _ids(msg.content) == want
    assert full.choices[0].finish_reason == "length" and full.choices[0].index == 0
    assert full.usage.completion_tokens == 9
    prompt_len = len(_hf_render(DEFAULT_CHAT_TEMPLATE, MESSAGES).encode())
    assert full.usage.prompt_tokens == prompt_len
    chunks = list(client.chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=0, stream=True,
        stream_options={"include_usage": True}, **{limit: 9}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    content = [c for c in chunks[1:] if c.choices]
    assert all(c.choices[0].delta.role is None for c in content)
    assert _ids("".join(c.choices[0].delta.content for c in content)) == want
    assert [c.choices[0].finish_reason for c in content] == [None] * 8 + ["length"]
    assert chunks[-1].usage.completion_tokens == 9 and not chunks[-1].choices


def test_chat_stream_ends_with_done_and_default_max_tokens_fits(srv: Running) -> None:
    r = httpx2.post(srv.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": True, "max_tokens": 3, "temperature": 0})
    lines = [ln for ln in r.text.split("\n\n") if ln]
    assert lines[-1] == "data: [DONE]" and len(lines) == 1 + 3 + 1
    body = httpx2.post(srv.url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "hi"}], "temperature": 0,
        "stop_token_ids": list(range(64))}).json()  # no max_tokens: as many as fit
    assert body["choices"][0]["finish_reason"] == "stop", body


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"content": "hi"}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
     "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
     "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 5000},
     "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
     "tools"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json"}},
     "response_format"),
])
def test_bad_chat_request_is_a_400_naming_the_field(srv: Running, body: dict,
                                                    param: str) -> None:
    r = httpx2.post(srv.url + "/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"].startswith(param), err


def test_checkpoint_without_a_template_and_the_override(tmp_path: Path) -> None:
    _checkpoint(tmp_path, None)
    body = {"messages": [{"role": "user", "content": "the loop"}], "max_tokens": 4,
            "temperature": 0}
    with running_server(model=str(tmp_path)) as srv:
        r = httpx2.post(srv.url + "/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 400
        assert "no chat template" in r.json()["error"]["message"]
        assert r.json()["error"]["param"] == "messages"
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    with running_server(model=str(tmp_path), chat_template=str(tmp_path / "t.jinja")) as srv:
        ok = httpx2.post(srv.url + "/v1/chat/completions", json=body, timeout=30).json()
        assert ok["choices"][0]["finish_reason"] == "length"
        bad = httpx2.post(srv.url + "/v1/chat/completions", timeout=30, json={
            **body, "messages": [{"role": "tool", "content": "x"}]})
        assert bad.status_code == 400 and "unknown role tool" in bad.json()["error"]["message"]
