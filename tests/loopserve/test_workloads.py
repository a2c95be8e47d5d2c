"""Workloads: each kind builds the arrivals its spec describes, deterministically."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from engine.core import TokenEvent
from loopserve.workloads import (
    InterferenceWorkload,
    approx_tokens,
    build_source,
    load_trace,
    parse_workload,
)


def _event(rid: str, index: int, t: float = 1.0) -> TokenEvent:
    return TokenEvent(rid, index, t, 0, 4)


# ---- interference ------------------------------------------------------------------------
def test_interference_decoders_at_zero_and_injections_on_decode_progress() -> None:
    spec = {"kind": "interference", "decode_population": 3, "decode_prompt_tokens": 10,
            "decode_output_tokens": 50,
            "inject": [{"at_decode_tokens": 5, "prompt_tokens": 100, "output_tokens": 4},
                       {"at_decode_tokens": 20, "prompt_tokens": 60}]}
    src = build_source(spec, seed=0, vocab_size=32)
    timed = src.initial()
    assert [s.request_id for s in timed] == ["decode-0", "decode-1", "decode-2"]
    assert all(s.arrival_s == 0.0 and not s.injected for s in timed)
    assert all(len(s.prompt_token_ids) == 10 and s.params.max_tokens == 50 for s in timed)
    assert all(s.params.ignore_eos for s in timed)
    assert src.on_token(_event("decode-0", 4)) == []
    assert src.on_token(_event("decode-1", 5)) == []
    (first,) = src.on_token(_event("decode-0", 5))
    assert (first.request_id, first.injected, first.arrival_s) == ("inject-0", True, None)
    assert len(first.prompt_token_ids) == 100 and first.params.max_tokens == 4
    (second,) = src.on_token(_event("decode-0", 20))
    assert second.request_id == "inject-1" and second.params.max_tokens == 16
    # stateless: the same source serves a second run identically
    assert src.on_token(_event("decode-0", 5)) == [first]
    again = build_source(spec, seed=0, vocab_size=32)
    assert again.initial() == timed
    assert build_source(spec, seed=1, vocab_size=32).initial() != timed


def test_interference_rejects_unreachable_points_unknown_keys_and_wrong_types() -> None:
    base = {"kind": "interference", "decode_output_tokens": 8,
            "inject": [{"at_decode_tokens": 8, "prompt_tokens": 4}]}
    with pytest.raises(ValidationError, match="never reached"):
        parse_workload(base)
    with pytest.raises(ValidationError, match="Extra inputs"):
        parse_workload({**base, "inject": [{"at_decode_tokens": 1, "prompt_tokens": 4}],
                        "population": 3})
    with pytest.raises(ValidationError, match="integer"):
        parse_workload({"kind": "interference", "decode_population": "8",
                        "inject": [{"at_decode_tokens": 1, "prompt_tokens": 4}]})
    with pytest.raises(ValidationError, match="kind"):
        parse_workload({"kind": "closed_loop"})
    assert isinstance(parse_workload({"kind": "interference", "inject": [
        {"at_decode_tokens": 64, "prompt_tokens": 2048}]}), InterferenceWorkload)


# ---- poisson / gamma ---------------------------------------------------------------------
def _rate(kind: str, n: int, **extra: object) -> dict[str, object]:
    return {"kind": kind, "num_requests": n, "request_rate": 20.0, "prompt_tokens": 16,
            "output_tokens": {"dist": "uniform", "low": 2, "high": 9}, **extra}


def _gaps(spec: dict[str, object], seed: int = 0) -> np.ndarray:
    times = [s.arrival_s for s in build_source(spec, seed=seed, vocab_size=64).initial()]
    assert times[0] == 0.0 and times == sorted(times)
    return np.diff(np.asarray(times, dtype=float))


def test_poisson_arrivals_have_the_requested_rate_and_are_seeded() -> None:
    gaps = _gaps(_rate("poisson", 8000))
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.05)
    assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1.0, rel=0.1)  # exponential CV
    a = build_source(_rate("poisson", 50), seed=3, vocab_size=64).initial()
    b = build_source(_rate("poisson", 50), seed=3, vocab_size=64).initial()
    c = build_source(_rate("poisson", 50), seed=4, vocab_size=64).initial()
    assert a == b and a != c
    assert [s.request_id for s in a] == [f"req-{i}" for i in range(50)]
    assert {s.params.max_tokens for s in a} <= set(range(2, 10))
    assert all(len(s.prompt_token_ids) == 16 and max(s.prompt_token_ids) < 64 for s in a)


def test_gamma_burstiness_sets_the_gap_variability() -> None:
    bursty = _gaps(_rate("gamma", 8000, burstiness=0.25))
    assert bursty.mean() == pytest.approx(1 / 20.0, rel=0.08)
    assert (bursty.std() / bursty.mean()) ** 2 == pytest.approx(4.0, rel=0.15)
    poissonish = build_source(_rate("gamma", 30, burstiness=1.0), seed=0, vocab_size=64)
    plain = build_source(_rate("poisson", 30), seed=0, vocab_size=64)
    assert poissonish.initial() == plain.initial()


def test_length_distributions() -> None:
    spec = _rate("poisson", 4000)
    spec["prompt_tokens"] = {"dist": "lognormal", "median": 200, "sigma": 0.8,
                             "min": 10, "max": 1500}
    spec["output_tokens"] = {"dist": "fixed", "value": 7}
    specs = build_source(spec, seed=0, vocab_size=64).initial()
    prompts = np.array([len(s.prompt_token_ids) for s in specs])
    assert np.median(prompts) == pytest.approx(200, rel=0.05)
    assert prompts.min() >= 10 and prompts.max() <= 1500 and (prompts == 1500).any()
    assert {s.params.max_tokens for s in specs} == {7}
    with pytest.raises(ValidationError, match="low 9 exceeds high 2"):
        parse_workload({**spec, "output_tokens": {"dist": "uniform", "low": 9, "high": 2}})
    with pytest.raises(ValidationError):
        parse_workload({**spec, "output_tokens": {"dist": "lognormal", "median": 5, "sigma": 1}})
    with pytest.raises(ValidationError):
        parse_workload({**spec, "output_tokens": 0})


def test_exit_trace_pattern_covers_every_token() -> None:
    src = build_source({**_rate("poisson", 3), "output_tokens": 5}, seed=0, vocab_size=64,
                       exit_trace=[4, 2, 3])
    assert {s.params.exit_trace for s in src.initial()} == {(4, 2, 3, 2, 3)}


# ---- trace -------------------------------------------------------------------------------
def test_trace_csv_and_jsonl(tmp_path: Path) -> None:
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("arrival_s,prompt_tokens,output_tokens,exit_depths\n"
                        "0.5,10,3,4;2;3\n0.0,20,2,\n")
    specs = build_source({"kind": "trace", "path": str(csv_path)}, seed=0,
                         vocab_size=64).initial()
    assert [(s.request_id, s.arrival_s, len(s.prompt_token_ids), s.params.max_tokens)
            for s in specs] == [("trace-1", 0.0, 20, 2), ("trace-0", 0.5, 10, 3)]
    assert specs[1].params.exit_trace == (4, 2, 3) and specs[0].params.exit_trace is None
    jl = tmp_path / "t.jsonl"
    jl.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2, '
                  '"exit_depths": [4, 1], "request_id": "x"}\n\n'
                  '{"arrival_s": 1.5, "prompt_tokens": 3, "output_tokens": 1}\n')
    rows = load_trace(jl)
    assert [(r.request_id, r.arrival_s, r.exit_depths, r.line) for r in rows] == [
        ("x", 0.0, (4, 1), 1), ("trace-1", 1.5, None, 3)]


@pytest.mark.parametrize(
    "name, text, where",
    [
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n0.1,abc,1\n",
         ":3: column prompt_tokens"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n-1,1,1\n", ":2: column arrival_s"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,0\n", ":2: column output_tokens"),
        ("t.csv", "arrival_s,prompt_tokens\n0,1\n", ":1: column output_tokens"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens,prio\n0,1,1,2\n", ":2: column prio"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1,9\n", ":2: column 4"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens,exit_depths\n0,1,3,4;2\n",
         ":2: column exit_depths"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens,exit_depths\n0,1,1,4;x\n",
         ":2: column exit_depths"),
        ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n{"arrival_s":\n',
         ":2: column"),
        ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": 2.5, "output_tokens": 1}\n',
         ":1: column prompt_tokens"),
        ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1, '
         '"request_id": "a"}\n{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1, '
         '"request_id": "a"}\n', ":2: column request_id"),
    ],
)
def test_bad_trace_row_names_file_line_and_column(
    tmp_path: Path, name: str, text: str, where: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        build_source({"kind": "trace", "path": str(path)}, seed=0, vocab_size=64)
    assert str(err.value).startswith(f"{path}{where}")
    assert "\n" not in str(err.value)


def test_missing_or_empty_trace_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="trace .*nope.csv: no such file"):
        load_trace(tmp_path / "nope.csv")
    (tmp_path / "e.csv").write_text("arrival_s,prompt_tokens,output_tokens\n")
    with pytest.raises(ValueError, match="no requests"):
        load_trace(tmp_path / "e.csv")


# ---- sharegpt ----------------------------------------------------------------------------
def test_sharegpt_lengths_caps_and_cycling(tmp_path: Path) -> None:
    data = [
        {"conversations": [{"from": "human", "value": "x" * 40},
                           {"from": "gpt", "value": "y" * 9}]},
        {"conversations": [{"from": "gpt", "value": "skipped: gpt first"},
                           {"from": "human", "value": "?"}]},
        {"conversations": [{"from": "human", "value": "only one turn"}]},
        {"id": "no conversations"},
        {"conversations": [{"from": "human", "value": "z" * 5000},
                           {"from": "gpt", "value": "w" * 4000}, {"from": "human", "value": ""}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    spec = {"kind": "sharegpt", "path": str(path), "num_requests": 6, "request_rate": 5.0,
            "max_prompt_tokens": 512, "max_output_tokens": 300}
    specs = build_source(spec, seed=0, vocab_size=64).initial()
    lengths = [(len(s.prompt_token_ids), s.params.max_tokens) for s in specs]
    assert sorted(set(lengths)) == [(10, 3), (512, 300)]  # ceil(40/4), ceil(9/4); capped
    assert lengths.count((10, 3)) == 3  # two usable conversations, cycled
    assert specs == build_source(spec, seed=0, vocab_size=64).initial()
    assert approx_tokens("") == 1 and approx_tokens("abcde") == 2


def test_sharegpt_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    spec = {"kind": "sharegpt", "path": str(path), "num_requests": 2, "request_rate": 1.0}
    path.write_text('[{"conversations": ')
    with pytest.raises(ValueError, match="not valid JSON"):
        build_source(spec, seed=0, vocab_size=64)
    path.write_text('[{"conversations": [{"from": "gpt", "value": "a"}]}]')
    with pytest.raises(ValueError, match="no conversation"):
        build_source(spec, seed=0, vocab_size=64)


# ---- shared prefixes ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["poisson", "gamma"])
def test_shared_prefix_heads_prompts_and_keeps_arrivals_and_lengths(kind: str) -> None:
    spec = {"kind": kind, "num_requests": 40, "request_rate": 5.0,
            "prompt_tokens": {"dist": "uniform", "low": 4, "high": 30}, "output_tokens": 3}
    shared = {**spec, "shared_prefix": {"tokens": 8, "num_prefixes": 3}}
    plain = build_source(spec, seed=2, vocab_size=64).initial()
    cached = build_source(shared, seed=2, vocab_size=64).initial()
    assert [(s.arrival_s, len(s.prompt_token_ids)) for s in cached] == [
        (s.arrival_s, len(s.prompt_token_ids)) for s in plain]
    for a, b in zip(plain, cached, strict=True):
        assert a.prompt_token_ids[8:] == b.prompt_token_ids[8:]  # only the head changes
    heads = {s.prompt_token_ids[:8] for s in cached if len(s.prompt_token_ids) >= 8}
    assert len(heads) == 3  # every prefix drawn, none other
    assert build_source(shared, seed=2, vocab_size=64).initial() == cached
    assert build_source(shared, seed=3, vocab_size=64).initial() != cached
    short = [s for s in cached if len(s.prompt_token_ids) < 8]
    assert all(any(h[:len(s.prompt_token_ids)] == s.prompt_token_ids for h in heads)
               for s in short)


def test_shared_prefix_applies_to_injected_prompts_only() -> None:
    spec = {"kind": "interference", "decode_population": 2, "decode_prompt_tokens": 10,
            "decode_output_tokens": 20,
            "inject": [{"at_decode_tokens": i, "prompt_tokens": 30} for i in range(4)],
            "shared_prefix": {"tokens": 16}}
    src = build_source(spec, seed=0, vocab_size=64)
    plain = build_source({k: v for k, v in spec.items() if k != "shared_prefix"},
                         seed=0, vocab_size=64)
    assert src.initial() == plain.initial()
    injected = [src.on_token(_event("decode-0", i))[0].prompt_token_ids for i in range(4)]
    assert len({p[:16] for p in injected}) == 1 and len({p[16:] for p in injected}) == 4
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        parse_workload({**spec, "shared_prefix": {"tokens": 0}})
