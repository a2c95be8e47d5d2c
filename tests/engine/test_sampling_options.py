"""Sampling options as engine features, through ``LLM.generate``: logprobs, n, stop strings,
stop_token_ids, min_tokens and the three penalties."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.core import SamplingParams
from engine.llm import LLM
from engine.parallel_sampling import sample_request_id
from tests.reference.fixtures import make_llm, tiny_model

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], [3, 3, 5]]


class CodaLogits:
    """Wraps the model's coda: the logits of every row the sampler sees, by request."""

    def __init__(self, llm: LLM) -> None:
        self.calls: list[torch.Tensor] = []
        coda = llm.runner.model.coda

        def wrapped(hidden: torch.Tensor) -> torch.Tensor:
            out = coda(hidden)
            self.calls.append(out.detach().float().clone())
            return out

        llm.runner.model.coda = wrapped  # type: ignore[method-assign]

    def rows(self) -> list[torch.Tensor]:
        return [row for call in self.calls for row in call]


class Letters:
    """A decoder for tests: token t is the letter chr(97 + t % 26)."""

    class _Dec:
        def step(self, token_id: int) -> str:
            return chr(97 + token_id % 26)

    def decoder(self) -> _Dec:
        return self._Dec()


def _single(**kw: object) -> LLM:
    return make_llm(tiny_model(), "mixed", **kw)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logprobs_are_the_log_softmax_of_the_exit_depth_logits(temperature: float) -> None:
    llm = _single()
    seen = CodaLogits(llm)
    params = SamplingParams(max_tokens=6, temperature=temperature, seed=3, logprobs=5)
    out = llm.generate([PROMPTS[0]], params)[0]
    rows = seen.rows()
    assert out.logprobs is not None and len(out.logprobs) == len(rows) == 6
    for tok, lp, logits in zip(out.output_token_ids, out.logprobs, rows, strict=True):
        ref = torch.log_softmax(logits, dim=-1)
        assert lp.token_id == tok
        assert lp.logprob == pytest.approx(float(ref[tok]), abs=1e-5)
        top = torch.topk(ref, 5)
        assert [t for t, _ in lp.top] == top.indices.tolist()
        assert [v for _, v in lp.top] == pytest.approx(top.values.tolist(), abs=1e-5)
        if temperature == 0.0:  # greedy: the chosen token is the most likely one
            assert lp.top[0] == (tok, pytest.approx(lp.logprob))


def test_logprobs_leave_tokens_unchanged_and_mix_with_plain_rows() -> None:
    plain = SamplingParams(max_tokens=5, temperature=0.8, seed=9)
    ref = _single().generate(PROMPTS, plain)
    mixed = _single().generate(PROMPTS, [dataclasses.replace(plain, logprobs=0), plain])
    assert [o.output_token_ids for o in mixed] == [o.output_token_ids for o in ref]
    assert mixed[0].logprobs is not None and all(lp.top == () for lp in mixed[0].logprobs)
    assert mixed[1].logprobs is None
    with pytest.raises(ValueError, match="logprobs: must be in \\[0, 20\\]"):
        SamplingParams(logprobs=21)


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_n_samples_equal_single_requests_with_derived_seeds(prefix_caching: bool) -> None:
    kw = dict(enable_prefix_caching=True) if prefix_caching else {}
    base = SamplingParams(max_tokens=6, temperature=1.0, seed=11)
    llm = _single(**kw)
    out = llm.generate([PROMPTS[0]], dataclasses.replace(base, n=3))[0]
    singles = _single(**kw).generate(
        [PROMPTS[0]] * 3, [dataclasses.replace(base, seed=11 + i) for i in range(3)])
    assert [o.output_token_ids for o in out.outputs] == [s.output_token_ids for s in singles]
    assert len({tuple(o.output_token_ids) for o in out.outputs}) > 1
    pc = llm.core.block_manager.prefix_cache
    if prefix_caching:  # samples 1 and 2 found the prompt's full blocks cached
        assert pc is not None and pc.stats.hit_tokens == 2 * 16
    else:
        assert pc is None
    assert sample_request_id("7", 1, 3) == "7-1" and sample_request_id("7", 0, 1) == "7"


def test_stop_strings_across_token_boundaries() -> None:
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=5)
    free = _single(tokenizer=Letters()).generate([PROMPTS[0]], params)[0]
    assert free.text is not None and len(free.text) == 12
    # the stop string spans tokens 3 and 4 and 5; the text ends before it, and the token
    # completing it is the request's last
    stop = free.text[3:6]
    first = free.text.find(stop)
    out = _single(tokenizer=Letters()).generate(
        [PROMPTS[0]], dataclasses.replace(params, stop=(stop, "zzzz")))[0]
    assert out.finish_reason == "stop"
    assert out.text == free.text[:first]
    assert out.output_token_ids == free.output_token_ids[:first + 3]
    with pytest.raises(ValueError, match="stop strings need a tokenizer"):
        _single().generate([PROMPTS[0]], dataclasses.replace(params, stop=("ab",)))


def test_stop_token_ids_and_min_tokens() -> None:
    params = SamplingParams(max_tokens=10, temperature=0.0)
    free = _single().generate([PROMPTS[1]], params)[0].output_token_ids
    target = free[2]
    stopped = _single().generate([PROMPTS[1]], dataclasses.replace(
        params, stop_token_ids=(target,)))[0]
    assert stopped.finish_reason == "stop"
    assert stopped.output_token_ids == free[:free.index(target) + 1]
    llm = _single()
    seen = CodaLogits(llm)
    late = llm.generate([PROMPTS[1]], dataclasses.replace(
        params, stop_token_ids=(target,), min_tokens=6))[0]
    toks = late.output_token_ids
    assert target not in toks[:6] and len(toks) >= 6
    for i, logits in enumerate(seen.rows()):  # greedy over the masked logits
        masked = logits.clone()
        if i < 6:
            masked[target] = float("-inf")
        assert toks[i] == int(masked.argmax())


@pytest.mark.parametrize("penalty", [
    dict(repetition_penalty=1.8), dict(frequency_penalty=2.0), dict(presence_penalty=-2.0),
    dict(repetition_penalty=0.5, frequency_penalty=0.7, presence_penalty=1.1)])
def test_penalties_follow_vllm(penalty: dict[str, float]) -> None:
    llm = _single()
    seen = CodaLogits(llm)
    params = SamplingParams(max_tokens=10, temperature=0.0, **penalty)  # type: ignore[arg-type]
    out = llm.generate([PROMPTS[1]], params)[0].output_token_ids
    plain = _single().generate([PROMPTS[1]], SamplingParams(max_tokens=10))[0].output_token_ids
    assert out != plain
    rep = penalty.get("repetition_penalty", 1.0)
    for i, logits in enumerate(seen.rows()):
        x, done = logits.clone(), out[:i]
        seen_ids = list(set(PROMPTS[1] + done))
        x[seen_ids] = torch.where(x[seen_ids] > 0, x[seen_ids] / rep, x[seen_ids] * rep)
        for t in set(done):
            x[t] -= penalty.get("frequency_penalty", 0.0) * done.count(t)
            x[t] -= penalty.get("presence_penalty", 0.0)
        assert out[i] == int(x.argmax()), i
