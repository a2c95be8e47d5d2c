"""Bad input, table-driven: every case exits 2 with one line naming the problem,
no traceback, and nothing written. Grow the table with every new case.
``python -m tests.loopserve.test_bad_input`` prints the tally (cases, exit 2, tracebacks, silent
accepts)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from loopserve.cli import main
from loopserve.runs.footprint import LIMIT_ENV
from tests.scenario_fixtures import TINY, tiny

Setup = Callable[[Path], None]


def _text(name: str, text: str) -> Setup:
    return lambda d: (d / name).write_text(text)


def _bytes(name: str, data: bytes) -> Setup:
    return lambda d: (d / name).write_bytes(data)


def _scenario(name: str = "s.yaml", **changes: object) -> Setup:
    return _text(name, yaml.safe_dump(tiny(**changes), sort_keys=False))


def _poisson(**lengths: object) -> dict[str, object]:
    return {"kind": "poisson", "num_requests": 4, "request_rate": 1.0, "prompt_tokens": 4,
            "output_tokens": 4, **lengths}


def _checkpoint(name: str, weights: bytes | None = None, **config: object) -> Setup:
    """A checkpoint folder of the tiny model's config.json (keys replaced, head_dim
    dropped) and, when given, ``weights`` as its model.safetensors."""
    def run(d: Path) -> None:
        from engine.core.shapes import MODEL_SHAPES
        from engine.model.config import OuroConfig

        cfg = {**OuroConfig.from_shape(MODEL_SHAPES["tiny"]).to_hf_dict(), **config}
        cfg.pop("head_dim", None)
        (d / name).mkdir()
        (d / name / "config.json").write_text(json.dumps(cfg))
        if weights is not None:
            (d / name / "model.safetensors").write_bytes(weights)
    return run


def _both(*setups: Setup) -> Setup:
    def run(d: Path) -> None:
        for s in setups:
            s(d)
    return run


# (id, setup of the input folder, argv with {d} for it, expected fragment of the line)
CASES: list[tuple[str, Setup | None, list[str], str]] = [
    ("missing-file", None, ["run", "{d}/nope.yaml"], "scenario: {d}/nope.yaml: no such file"),
    ("folder-as-scenario", None, ["run", "{d}"], "is a folder; give a scenario YAML file"),
    ("duplicate-key", _text("s.yaml", "name: a\nname: b\n"), ["run", "{d}/s.yaml"],
     "duplicate key 'name'"),
    ("not-utf8", _bytes("s.yaml", b"\xff\xfe\x00bad"), ["run", "{d}/s.yaml"], "not UTF-8 text"),
    ("yaml-syntax", _text("s.yaml", "name: [a\n"), ["run", "{d}/s.yaml"], "YAML syntax error"),
    ("not-a-mapping", _text("s.yaml", "- a\n"), ["run", "{d}/s.yaml"], "must be a YAML mapping"),
    ("unknown-key", _scenario(bogus=1), ["run", "{d}/s.yaml"], "bogus: unknown key"),
    ("bad-set", _scenario(), ["run", "{d}/s.yaml", "--set", "novalue"], "--set: 'novalue'"),
    ("target-tpu", _scenario(), ["run", "{d}/s.yaml", "--target", "tpu"],
     "argument --target: invalid choice: 'tpu'"),
    ("unknown-command", None, ["bogus"], "invalid choice: 'bogus'"),
    ("out-under-a-file", _both(_scenario(), _text("afile", "x")),
     ["run", "{d}/s.yaml", "--out", "{d}/afile/run"], "is a file, not a folder"),
    ("out-not-empty", _both(_scenario(), _text("x", "x")),
     ["run", "{d}/s.yaml", "--out", "{d}"], "exists and is not an empty folder"),
    ("out-unwritable", _scenario(), ["run", "{d}/s.yaml", "--out", "/proc/loopserve-t/run"],
     "--out: cannot write under /proc"),
    ("report-out-unwritable", None, ["report", "{d}", "--out", "/proc/loopserve-t"],
     "--out: cannot write under /proc"),
    # defect 8: silently accepted or badly reported
    ("sweep-repeated-value", _scenario(sweep={"scheduler.max_num_seqs": [16, 16]}),
     ["sweep", "{d}/s.yaml"], "sweep.scheduler.max_num_seqs: 16 listed twice"),
    ("length-dist-unknown-key", _scenario(workload=_poisson(
        prompt_tokens={"dist": "fixed", "value": 4, "bogus": 1})),
     ["run", "{d}/s.yaml"], "workload.prompt_tokens.bogus: unknown key (allowed: dist, value)"),
    ("length-dist-unknown-dist", _scenario(workload=_poisson(
        prompt_tokens={"dist": "fixd", "value": 4})),
     ["run", "{d}/s.yaml"], "workload.prompt_tokens.dist: unknown 'fixd'; use one of"),
    ("binary-trace-csv", _both(_bytes("t.csv", bytes(range(256))), _scenario(
        workload={"kind": "trace", "path": "t.csv"})),
     ["run", "{d}/s.yaml"], "workload.path: trace {d}/t.csv is not UTF-8 text"),
    ("binary-trace-jsonl", _both(_bytes("t.jsonl", bytes(range(256))), _scenario(
        workload={"kind": "trace", "path": "t.jsonl"})),
     ["run", "{d}/s.yaml"], "workload.path: trace {d}/t.jsonl is not UTF-8 text"),
    ("binary-sharegpt", _both(_bytes("g.json", bytes(range(256))), _scenario(
        workload={"kind": "sharegpt", "path": "g.json", "num_requests": 2,
                  "request_rate": 1.0})),
     ["run", "{d}/s.yaml"], "workload.path: {d}/g.json is not UTF-8 text"),
    # defect 6: checkpoint read errors
    ("config-zero-heads", _both(_checkpoint("ck", num_attention_heads=0), _scenario(model="ck")),
     ["run", "{d}/s.yaml"], "model.num_heads: must be an integer >= 1, got 0"),
    # defect 5: sizes past a bound of the schema, or past the memory the machine has (the
    # test caps it at 8 GiB), are refused before any work
    ("num-blocks-1e10", _scenario(cache={"num_blocks": 10**10}), ["run", "{d}/s.yaml"],
     "cache.num_blocks: 10000000000 is past the upper bound; use at most 2147483647"),
    ("max-num-seqs-1e9", _scenario(scheduler={"max_num_seqs": 10**9}), ["run", "{d}/s.yaml"],
     "scheduler.max_num_seqs: 1000000000 is past the upper bound; use at most 65536"),
    ("decode-output-tokens-1e9", _scenario(workload={**TINY["workload"],
                                                     "decode_output_tokens": 10**9}),
     ["run", "{d}/s.yaml"], "workload.decode_output_tokens: 1000000000 is past the upper bound"),
    ("trace-prompt-1e8", _both(_text("t.csv", "arrival_s,prompt_tokens,output_tokens\n"
                                               "0,100000000,4\n"),
                               _scenario(workload={"kind": "trace", "path": "t.csv"})),
     ["run", "{d}/s.yaml"], "t.csv:2: column prompt_tokens: at most 1048576 tokens"),
    ("repeats-1e8", _scenario(repeats=10**8), ["run", "{d}/s.yaml"],
     "repeats: 100000000 is past the upper bound; use at most 1000"),
    ("num-requests-1e9", _scenario(workload=_poisson(num_requests=10**9)), ["run", "{d}/s.yaml"],
     "workload.num_requests: 1000000000 is past the upper bound"),
    ("block-size-1e7-cpu", _scenario(cache={"block_size": 10**7}),
     ["run", "{d}/s.yaml", "--target", "cpu"], "cache.block_size: 10000000 is past the upper"),
    ("kv-bookkeeping-past-memory", _scenario(cache={"num_blocks": 2**31 - 1}),
     ["run", "{d}/s.yaml"], "cache.num_blocks: 2147483647 blocks of 16 tokens need ~128.0 GiB "
     "of host memory (arm atomic), 8.0 GiB available; lower cache.num_blocks"),
    ("kv-tensors-past-memory-cpu", _scenario(cache={"num_blocks": 100_000, "block_size": 1024}),
     ["run", "{d}/s.yaml", "--target", "cpu"], "cache.num_blocks: 100000 blocks of 1024 tokens "
     "need ~24.4 GiB of host memory"),
    ("auto-sized-cache-for-a-1m-prompt", _both(
        _text("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1048576,4\n"),
        _scenario(arms=["A0"], scheduler={"max_num_seqs": 4096},
                  workload={"kind": "trace", "path": "t.csv"})),
     ["run", "{d}/s.yaml"], "cache.num_blocks: sized automatically to 4294983680 blocks"),
    ("records-of-one-run-past-memory", _scenario(workload=_poisson(num_requests=10**7)),
     ["run", "{d}/s.yaml"], "workload.num_requests: one run's records (10000000 requests"),
    ("records-of-the-repeats-past-memory", _scenario(repeats=1000, workload=_poisson(
        num_requests=2000, output_tokens=1000)),
     ["run", "{d}/s.yaml"], "repeats: 1000 repeats x 3 arms of"),
    ("corrupt-safetensors", _both(_checkpoint("ck", weights=b"\xff" * 64), _scenario(model="ck")),
     ["run", "{d}/s.yaml", "--target", "cpu"],
     "model: {d}/ck/model.safetensors: not a readable safetensors file"),
]


@pytest.mark.parametrize(("setup", "argv", "fragment"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: Setup | None, argv: list[str],
    fragment: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LIMIT_ENV, str(8 << 30))  # the memory estimate's cases: any machine
    if setup is not None:
        setup(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    try:
        rc = main([a.replace("{d}", str(tmp_path)) for a in argv])
    except SystemExit as done:  # argparse's usage errors
        rc = done.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("loopserve: error: "), err
    assert fragment.replace("{d}", str(tmp_path)) in lines[0], lines[0]
    assert "Traceback" not in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def tally() -> dict[str, int]:
    """Every case run once: how many end as the table says (exit 2, one line), with a
    traceback (an exception escaping ``main``), or silently accepted (exit 0)."""
    import contextlib
    import io
    import os
    import tempfile

    counts = {"cases": 0, "exit 2": 0, "tracebacks": 0, "silent accepts": 0}
    os.environ[LIMIT_ENV] = str(8 << 30)
    for _, setup, argv, _ in CASES:
        counts["cases"] += 1
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            if setup is not None:
                setup(d)
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err):
                    rc = main([a.replace("{d}", str(d)) for a in argv])
            except SystemExit as done:
                rc = done.code  # type: ignore[assignment]
            except Exception:  # noqa: BLE001 - counted, that is the point
                counts["tracebacks"] += 1
                continue
        counts["exit 2"] += rc == 2
        counts["silent accepts"] += rc == 0
    return counts


if __name__ == "__main__":  # python -m tests.loopserve.test_bad_input
    print("bad input: " + ", ".join(f"{v} {k}" for k, v in tally().items()))
