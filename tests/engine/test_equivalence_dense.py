"""The cached, paged, packed engine equals a dense no-cache forward at every depth."""

from __future__ import annotations

import pytest
import torch

from engine.core import ExitConfig, SamplingParams
from tests.reference.dense import dense_hidden
from tests.reference.fixtures import ARMS, HiddenRecorder, make_llm, tiny_model

PROMPTS = [list(range(3, 14)), [5, 9, 2], [7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5, 2, 3]]
TRACES = [(4, 1, 3, 2, 4, 1, 2), (4, 4, 1, 1, 3, 4, 2), (4, 2, 4, 1, 2, 3, 1)]
D = 4


def _run(arm: str, finalize: bool = True) -> tuple[object, HiddenRecorder, list]:
    model = tiny_model()
    llm = make_llm(model, arm, ExitConfig(mode="trace"))
    rec = HiddenRecorder()
    llm.runner.hidden_hook = rec
    if not finalize:
        llm.runner.kv_cache.finalize = lambda ops, kv: 0  # type: ignore[method-assign]
    params = [SamplingParams(max_tokens=7, exit_trace=t) for t in TRACES]
    return model, rec, llm.generate(PROMPTS, params)


def _max_error(model: object, rec: HiddenRecorder, outs: list) -> float:
    worst = 0.0
    for o, prompt in zip(outs, PROMPTS, strict=True):
        tokens = prompt + o.output_token_ids[:-1]
        loops = [D] * len(prompt) + o.exit_depths[1:]
        dense = dense_hidden(model, tokens, loops)  # type: ignore[arg-type]
        expected = {(o.request_id, p, d) for d in range(D) for p in dense[d]}
        ran = {k for k in rec.rows if k[0] == o.request_id}
        assert ran == expected, "engine ran a different set of (position, depth) rows"
        for d in range(D):
            for p, h in dense[d].items():
                worst = max(worst, (rec.rows[(o.request_id, p, d)] - h).abs().max().item())
        # Greedy tokens are the dense argmax at each producing position's last depth.
        for k, tok in enumerate(o.output_token_ids):
            pos = len(prompt) - 1 + k
            logits = model.coda(dense[loops[pos] - 1][pos][None])  # type: ignore[attr-defined]
            assert int(logits.argmax()) == tok
    return worst


@pytest.mark.parametrize("arm", ARMS)
def test_cached_packed_model_matches_dense_reference_at_every_depth(arm: str) -> None:
    model, rec, outs = _run(arm)
    assert [o.exit_depths for o in outs] == [list(t) for t in TRACES]
    assert _max_error(model, rec, outs) < 1e-4


def test_without_finalize_copies_the_history_read_at_min_d_e_breaks() -> None:
    # Teeth for the test above: skipping the early-exit KV copy must be visible.
    model, rec, outs = _run("mixed", finalize=False)
    with pytest.raises(AssertionError):
        assert _max_error(model, rec, outs) < 1e-4


def test_dense_reference_with_all_depths_matches_plain_recurrence() -> None:
    # Sanity of the reference itself: without exits, depth d+1 of the last token only
    # depends on depth d of the prefix, so truncating the sequence changes nothing before it.
    model = tiny_model()
    tokens = [4, 8, 15, 16, 23, 42]
    full = dense_hidden(model, tokens, [D] * 6)
    prefix = dense_hidden(model, tokens[:4], [D] * 4)
    for d in range(D):
        for p in range(4):
            torch.testing.assert_close(full[d][p], prefix[d][p])
