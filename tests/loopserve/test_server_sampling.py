"""Sampling options over HTTP with the real ``openai`` client, streamed and not: logprobs
(completions and chat), n with seeds, lists of prompts, stop strings and token ids,
min_tokens and penalties; each checked against the engine (``LLM.generate``) or against a
log-softmax of the runner's logits recomputed here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from openai import OpenAI

from engine.core.request import SamplingParams
from engine.llm import LLM
from tests.reference import fixtures  # one torch thread, as the other engine tests
from tests.server_helpers import Running, running_server

PROMPT = [3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4]


@pytest.fixture(scope="module")
def srv() -> Iterator[Running]:
    with running_server() as running:
        yield running


def _client(r: Running) -> OpenAI:
    return OpenAI(base_url=r.url + "/v1", api_key="none", max_retries=0, timeout=60)


def _ids(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def _generate(prompt: list[int], **kw: object) -> list[int]:
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()}
    return LLM("tiny", arm="mixed", seed=0).generate(
        [prompt], SamplingParams(**kw))[0].output_token_ids  # type: ignore[arg-type]


class CodaLogits:
    """The logits the server's runner samples from, in order (one request at a time)."""

    def __init__(self, r: Running) -> None:
        self.model = r.service.engine.runner.model
        self.original = self.model.coda
        self.rows: list[torch.Tensor] = []

    def __enter__(self) -> CodaLogits:
        def wrapped(hidden: torch.Tensor) -> torch.Tensor:
            out = self.original(hidden)
            self.rows += list(out.detach().float().clone())
            return out

        self.model.coda = wrapped
        return self

    def __exit__(self, *_: object) -> None:
        self.model.coda = self.original


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_completion_logprobs_are_the_runner_log_softmax(srv: Running,
                                                        temperature: float) -> None:
    with CodaLogits(srv) as seen:
        out = _client(srv).completions.create(model="tiny", prompt=PROMPT, max_tokens=6,
                                              temperature=temperature, seed=4, logprobs=3)
    lp = out.choices[0].logprobs
    text = out.choices[0].text
    assert len(seen.rows) == len(lp.tokens) == 6 and "".join(lp.tokens) == text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(6)]
    for tok, value, top, logits in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs,
                                       seen.rows, strict=True):
        ref = torch.log_softmax(logits, dim=-1)
        assert value == pytest.approx(float(ref[ord(tok)]), abs=1e-5)
        best = torch.topk(ref, 3)
        want = {chr(i): v for i, v in zip(best.indices.tolist(), best.values.tolist(),
                                          strict=True)}
        want.setdefault(tok, value)  # the sampled token is always listed (vLLM)
        assert top == pytest.approx(want, abs=1e-5)
        if temperature == 0.0:
            assert value == max(top.values())
    streamed = list(_client(srv).completions.create(
        model="tiny", prompt=PROMPT, max_tokens=6, temperature=temperature, seed=4,
        logprobs=3, stream=True))
    assert [c.choices[0].logprobs.token_logprobs[0] for c in streamed] == pytest.approx(
        lp.token_logprobs, abs=1e-6)
    assert [c.choices[0].logprobs.text_offset[0] for c in streamed] == lp.text_offset


def test_chat_logprobs_and_top_logprobs(srv: Running) -> None:
    messages = [{"role": "user", "content": "loop"}]
    client = _client(srv)
    with CodaLogits(srv) as seen:
        out = client.chat.completions.create(model="tiny", messages=messages, max_tokens=5,
                                             temperature=0, logprobs=True, top_logprobs=4)
    content = out.choices[0].logprobs.content
    assert len(content) == len(seen.rows) == 5
    assert "".join(c.token for c in content) == out.choices[0].message.content
    for c, logits in zip(content, seen.rows, strict=True):
        ref = torch.log_softmax(logits, dim=-1)
        assert len(c.top_logprobs) == 4 and c.top_logprobs[0].token == c.token
        assert c.logprob == pytest.approx(float(ref.max()), abs=1e-5)
        assert [t.logprob for t in c.top_logprobs] == pytest.approx(
            torch.topk(ref, 4).values.tolist(), abs=1e-5)
        assert c.bytes == list(c.token.encode())
    plain = client.chat.completions.create(model="tiny", messages=messages, max_tokens=5,
                                           temperature=0)
    assert plain.choices[0].logprobs is None
    assert plain.choices[0].message.content == out.choices[0].message.content
    chunks = list(client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=5, temperature=0, logprobs=True,
        top_logprobs=1, stream=True))
    got = [c.choices[0].logprobs.content[0].logprob for c in chunks[1:]]
    assert got == pytest.approx([c.logprob for c in content], abs=1e-6)


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_n_with_a_seed_equals_single_requests_with_derived_seeds(prefix_caching: bool) -> None:
    with running_server(enable_prefix_caching=prefix_caching) as srv:
        client = _client(srv)
        kw = dict(model="tiny", prompt=PROMPT, max_tokens=8, temperature=1.0)
        seen = fixtures.HiddenRecorder()
        srv.service.engine.runner.hidden_hook = seen
        both = client.completions.create(n=3, seed=21, **kw)
        srv.service.engine.runner.hidden_hook = None
        # Samples 1 and 2 compute only the prompt after its full blocks, caching on or off.
        block_size = srv.service.engine.core.cfg.cache.block_size
        tail = len(PROMPT) // block_size * block_size
        computed = sorted(
            sorted({pos for r, pos, _ in seen.rows if r == rid and pos < len(PROMPT)})
            for rid in {r for r, _, _ in seen.rows})
        assert computed == [list(range(len(PROMPT)))] + [list(range(tail, len(PROMPT)))] * 2
        singles = [client.completions.create(seed=21 + i, **kw).choices[0].text
                   for i in range(3)]
        assert [c.index for c in both.choices] == [0, 1, 2]
        assert [c.text for c in both.choices] == singles
        assert len(set(singles)) == 3 and both.usage.completion_tokens == 24
        assert both.usage.prompt_tokens == len(PROMPT)  # counted once per prompt
        stream = client.completions.create(n=3, seed=21, stream=True, **kw)
        texts = ["", "", ""]
        for c in stream:
            texts[c.choices[0].index] += c.choices[0].text
        assert texts == singles
        chat = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=6,
            temperature=1.0, n=2, seed=5)
        one = [client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=6,
            temperature=1.0, seed=5 + i).choices[0].message.content for i in range(2)]
        assert [c.message.content for c in chat.choices] == one
        if prefix_caching:  # samples 1 and 2 of each n=3 request reused the prompt's block
            assert srv.metric("loopserve:prefix_cache_hits_total") >= 2 * 2 * 16


def test_a_list_of_prompts_gives_one_choice_per_prompt_and_sample(srv: Running) -> None:
    prompts = [PROMPT, PROMPT[:7], [5, 5, 5]]
    out = _client(srv).completions.create(model="tiny", prompt=prompts, max_tokens=5,
                                          temperature=0, n=2)
    assert [c.index for c in out.choices] == list(range(6))
    for p, prompt in enumerate(prompts):
        want = _generate(prompt, max_tokens=5)
        assert [_ids(out.choices[2 * p + i].text) for i in range(2)] == [want, want]
    assert out.usage.prompt_tokens == sum(len(p) for p in prompts)
    texts = _client(srv).completions.create(model="tiny", prompt=["ab", "cd"], max_tokens=3,
                                            temperature=0)
    assert [_ids(c.text) for c in texts.choices] == [
        _generate([ord(c) % 64 for c in s], max_tokens=3) for s in ("ab", "cd")]


def test_stop_strings_across_tokens_streamed_and_per_choice_reasons(srv: Running) -> None:
    free = _client(srv).completions.create(model="tiny", prompt=PROMPT, max_tokens=16,
                                           temperature=0).choices[0].text
    stop = free[4:7]  # three tokens of the byte-level fallback
    kw = dict(model="tiny", max_tokens=16, temperature=0, stop=[stop, "\x7f\x7f"])
    multi = _client(srv).completions.create(prompt=[PROMPT, [1, 2]], **kw)
    assert multi.choices[0].text == free[:free.index(stop)]
    assert multi.choices[0].finish_reason == "stop"
    assert multi.choices[1].finish_reason in ("length", "stop")
    pieces = [c.choices[0].text for c in _client(srv).completions.create(
        prompt=PROMPT, stream=True, **kw)]
    assert "".join(pieces) == free[:free.index(stop)]
    srv.wait_metric("loopserve:kv_blocks_in_use", 0)


@pytest.mark.parametrize("options", [
    dict(presence_penalty=1.5), dict(frequency_penalty=-1.0), dict(repetition_penalty=1.7),
    dict(presence_penalty=0.5, frequency_penalty=0.5, repetition_penalty=0.8),
    dict(min_tokens=6, stop_token_ids=[27, 30]),  # greedy output: 43 27 43 27 43 30 ...
])
def test_penalties_and_min_tokens_match_the_engine(srv: Running, options: dict) -> None:
    want = _generate(PROMPT, max_tokens=10, **options)
    extra = {k: v for k, v in options.items()
             if k not in ("presence_penalty", "frequency_penalty")}
    std = {k: v for k, v in options.items() if k in ("presence_penalty", "frequency_penalty")}
    out = _client(srv).completions.create(model="tiny", prompt=PROMPT, max_tokens=10,
                                          temperature=0, extra_body=extra, **std)
    assert _ids(out.choices[0].text) == want
    assert want != _generate(PROMPT, max_tokens=10)
