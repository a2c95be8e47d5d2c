"""Faults and bad input, table-driven by kind (``tests/loopserve/bad_input_cases.py``):
every case that must fail exits 2 with one line naming the problem, no traceback and nothing
written; every case that must succeed exits 0 with its results where ``keeps`` says. Grow the
table with every new case. ``python -m tests.loopserve.test_bad_input`` prints the tally per
kind (cases, exit 2, tracebacks, silent accepts, partial writes, losses)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopserve.plan.footprint import LIMIT_ENV
from tests.loopserve.bad_input_cases import (
    ALIAS_BOMB,
    NAN_PROFILE,
    NONFINITE_CASES,
    READER_CASES,
    RUN,
    Case,
    both,
    checkpoint,
    data,
    edit_json,
    folder,
    link,
    poisson,
    run_folder,
    scenario,
    text,
)
from tests.loopserve.bad_input_tally import run_case, tally
from tests.scenario_fixtures import TINY

MAX_LINE_CHARS = 400  # loopserve.errors.MAX_MESSAGE_CHARS and the prefix

# the first round, by kind: (id, kind, setup, argv, fragment)
FIRST_ROUND = [
    ("missing-file", "C", None, ["run", "{d}/nope.yaml"], "scenario: {d}/nope.yaml: no such file"),
    ("folder-as-scenario", "C", None, ["run", "{d}"], "is a folder; give a scenario YAML file"),
    ("duplicate-key", "D", text("s.yaml", "name: a\nname: b\n"), ["run", "{d}/s.yaml"],
     "duplicate key 'name'"),
    ("not-utf8", "C", data("s.yaml", b"a: \xff\x00bad"), ["run", "{d}/s.yaml"], "not UTF-8 text"),
    ("yaml-syntax", "C", text("s.yaml", "name: [a\n"), ["run", "{d}/s.yaml"], "YAML syntax error"),
    ("not-a-mapping", "C", text("s.yaml", "- a\n"), ["run", "{d}/s.yaml"],
     "must be a YAML mapping"),
    ("unknown-key", "D", scenario(bogus=1), ["run", "{d}/s.yaml"], "bogus: unknown key"),
    ("bad-set", "E", scenario(), ["run", "{d}/s.yaml", "--set", "novalue"], "--set: 'novalue'"),
    ("target-tpu", "E", scenario(), ["run", "{d}/s.yaml", "--target", "tpu"],
     "argument --target: invalid choice: 'tpu'"),
    ("unknown-command", "E", None, ["bogus"], "invalid choice: 'bogus'"),
    ("out-under-a-file", "A", both(scenario(), text("afile", "x")),
     ["run", "{d}/s.yaml", "--out", "{d}/afile/run"], "is a file, not a folder"),
    ("out-not-empty", "A", both(scenario(), text("x", "x")),
     ["run", "{d}/s.yaml", "--out", "{d}"], "exists and is not an empty folder"),
    ("out-unwritable", "A", scenario(), ["run", "{d}/s.yaml", "--out", "/proc/loopserve-t/run"],
     "--out: cannot write under /proc"),
    ("report-out-unwritable", "A", None, ["report", "{d}", "--out", "/proc/loopserve-t"],
     "--out: cannot write under /proc"),
    # defect 8: silently accepted or badly reported
    ("sweep-repeated-value", "D", scenario(sweep={"scheduler.max_num_seqs": [16, 16]}),
     ["sweep", "{d}/s.yaml"], "sweep.scheduler.max_num_seqs: 16 listed twice"),
    ("length-dist-unknown-key", "E", scenario(workload=poisson(
        prompt_tokens={"dist": "fixed", "value": 4, "bogus": 1})),
     ["run", "{d}/s.yaml"], "workload.prompt_tokens.bogus: unknown key (allowed: dist, value)"),
    ("length-dist-unknown-dist", "E", scenario(workload=poisson(
        prompt_tokens={"dist": "fixd", "value": 4})),
     ["run", "{d}/s.yaml"], "workload.prompt_tokens.dist: unknown 'fixd'; use one of"),
    ("binary-trace-csv", "C", both(data("t.csv", bytes(range(256))), scenario(
        workload={"kind": "trace", "path": "t.csv"})),
     ["run", "{d}/s.yaml"], "workload.path: trace {d}/t.csv:2:118: not UTF-8 text"),
    ("binary-trace-jsonl", "C", both(data("t.jsonl", bytes(range(256))), scenario(
        workload={"kind": "trace", "path": "t.jsonl"})),
     ["run", "{d}/s.yaml"], "workload.path: trace {d}/t.jsonl:2:118: not UTF-8 text"),
    ("binary-sharegpt", "C", both(data("g.json", bytes(range(256))), scenario(
        workload={"kind": "sharegpt", "path": "g.json", "num_requests": 2,
                  "request_rate": 1.0})),
     ["run", "{d}/s.yaml"], "workload.path: {d}/g.json:2:118: not UTF-8 text"),
    # defect 6: checkpoint read errors
    ("config-zero-heads", "E", both(checkpoint("ck", num_attention_heads=0), scenario(model="ck")),
     ["run", "{d}/s.yaml"], "model.num_heads: must be an integer >= 1, got 0"),
    # defect 5: sizes past a bound of the schema, or past the memory the machine has (the
    # test caps it at 8 GiB), are refused before any work
    ("num-blocks-1e10", "B", scenario(cache={"num_blocks": 10**10}), ["run", "{d}/s.yaml"],
     "cache.num_blocks: 10000000000 is past the upper bound; use at most 2147483647"),
    ("max-num-seqs-1e9", "B", scenario(scheduler={"max_num_seqs": 10**9}), ["run", "{d}/s.yaml"],
     "scheduler.max_num_seqs: 1000000000 is past the upper bound; use at most 65536"),
    ("decode-output-tokens-1e9", "B", scenario(workload={**TINY["workload"],
                                                     "decode_output_tokens": 10**9}),
     ["run", "{d}/s.yaml"], "workload.decode_output_tokens: 1000000000 is past the upper bound"),
    ("trace-prompt-1e8", "B", both(text("t.csv", "arrival_s,prompt_tokens,output_tokens\n"
                                               "0,100000000,4\n"),
                               scenario(workload={"kind": "trace", "path": "t.csv"})),
     ["run", "{d}/s.yaml"], "t.csv:2: column prompt_tokens: at most 1048576 tokens"),
    ("repeats-1e8", "B", scenario(repeats=10**8), ["run", "{d}/s.yaml"],
     "repeats: 100000000 is past the upper bound; use at most 1000"),
    ("num-requests-1e9", "B", scenario(workload=poisson(num_requests=10**9)), ["run", "{d}/s.yaml"],
     "workload.num_requests: 1000000000 is past the upper bound"),
    ("block-size-1e7-cpu", "B", scenario(cache={"block_size": 10**7}),
     ["run", "{d}/s.yaml", "--target", "cpu"], "cache.block_size: 10000000 is past the upper"),
    ("kv-bookkeeping-past-memory", "B", scenario(cache={"num_blocks": 2**31 - 1}),
     ["run", "{d}/s.yaml"], "cache.num_blocks: 2147483647 blocks of 16 tokens need ~128.0 GiB "
     "of host memory (arm atomic), 8.0 GiB available; lower cache.num_blocks"),
    ("kv-tensors-past-memory-cpu", "B", scenario(cache={"num_blocks": 100_000, "block_size": 1024}),
     ["run", "{d}/s.yaml", "--target", "cpu"], "cache.num_blocks: 100000 blocks of 1024 tokens "
     "need ~"),
    ("auto-sized-cache-for-a-1m-prompt", "B", both(
        text("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1048576,4\n"),
        scenario(arms=["A0"], scheduler={"max_num_seqs": 4096},
                  workload={"kind": "trace", "path": "t.csv"})),
     ["run", "{d}/s.yaml"], "cache.num_blocks: sized automatically to 4294983680 blocks"),
    ("records-of-one-run-past-memory", "B", scenario(workload=poisson(num_requests=10**7)),
     ["run", "{d}/s.yaml"], "workload.num_requests: one run's records (10000000 requests"),
    ("records-of-the-repeats-past-memory", "B", scenario(repeats=1000, workload=poisson(
        num_requests=2000, output_tokens=1000)),
     ["run", "{d}/s.yaml"], "repeats: 1000 repeats x 3 arms of"),
    ("corrupt-safetensors", "C", both(checkpoint("ck", weights=b"\xff" * 64), scenario(model="ck")),
     ["run", "{d}/s.yaml", "--target", "cpu"],
     "model: {d}/ck/model.safetensors: not a readable safetensors file"),
]


def yaml_text(**raw: str) -> str:
    """The tiny scenario as YAML with top-level values written verbatim (``seed="1:30"``)."""
    import yaml

    doc = {k: v for k, v in TINY.items() if k not in raw}
    return yaml.safe_dump(doc, sort_keys=False) + "".join(f"{k}: {v}\n" for k, v in raw.items())


CASES: list[Case] = [Case(*row) for row in FIRST_ROUND] + [
    # A: every destination checked before any work, staged on its filesystem, never lost
    Case("out-symlink-to-empty-folder", "A", both(scenario(), folder("target"),
                                                  link("out", "{d}/target")),
         [*RUN, "--out", "{d}/out"], None, keeps="target/summary.json"),
    Case("out-dangling-symlink", "A", both(scenario(), link("out", "{d}/new")),
         [*RUN, "--out", "{d}/out"], None, keeps="new/summary.json"),
    Case("out-empty-folder", "A", both(scenario(), folder("o")), [*RUN, "--out", "{d}/o"],
         None, keeps="o/summary.json"),
    Case("capacity-out-under-a-file", "A", both(scenario(workload=poisson()),
                                                text("afile", "x")),
         ["capacity", "{d}/s.yaml", "--slo", "itl_p99_ms=10", "--out", "{d}/afile/c"],
         "is a file, not a folder"),
    Case("calibrate-out-under-a-file", "A", text("afile", "x"),
         ["calibrate", "--target", "cpu", "--model", "tiny", "--out", "{d}/afile/x.json"],
         "--out: cannot create {d}/afile/x.json: {d}/afile is a file, not a folder"),
    Case("exit-profile-out-under-a-file", "A", text("afile", "x"),
         ["exit-profile", "--target", "cpu", "--model", "tiny", "--out", "{d}/afile/e.json"],
         "--out: cannot create {d}/afile/e.json: {d}/afile is a file, not a folder"),
    Case("exit-profile-out-a-folder", "A", folder("e.json"),
         ["exit-profile", "--target", "cpu", "--model", "tiny", "--out", "{d}/e.json"],
         "--out: {d}/e.json is a folder; name a .json file"),
    Case("report-replaces-another-runs-report", "A", both(run_folder("a"), run_folder("b")),
         ["report", "{d}/a", "{d}/b"], "--out: {d}/a/report.html exists; give another --out"),
    Case("report-out-is-a-file", "A", both(run_folder("a"), text("afile", "x")),
         ["report", "{d}/a", "--out", "{d}/afile"], "--out: {d}/afile is a file"),
    # B: sizes bounded where they enter
    Case("sweep-1e8-points", "B", scenario(sweep={
        f"scheduler.{k}": list(range(1, 101)) for k in (
            "max_num_seqs", "max_num_batched_tokens", "prefill_chunk_size")} | {
        "cache.block_size": list(range(1, 101))}),
         RUN, "sweep: 100000000 points (variants x the sweep lists) is past the upper bound"),
    Case("yaml-alias-bomb", "B", text("s.yaml", ALIAS_BOMB), RUN,
         "more than 100000 YAML nodes once its aliases are expanded"),
    Case("request-rate-1e-10", "B", scenario(workload=poisson(request_rate=1e-10)), RUN,
         "workload.request_rate: Input should be greater than or equal to 0.000001"),
    Case("scenario-past-1-mib", "B", text("s.yaml", "#" * (2 << 20)), RUN,
         "bytes is past the bound of 1048576 bytes"),
    # C: one line where a traceback was
    Case("lognormal-sigma-40", "C", scenario(workload=poisson(prompt_tokens={
        "dist": "lognormal", "median": 4.0, "sigma": 40.0, "max": 64})), RUN,
         "workload.prompt_tokens.sigma: 40.0 is past the upper bound; use at most 10.0"),
    Case("report-summary-wrong-shape", "C", both(run_folder("r"), edit_json(
        "r/summary.json", lambda s: {**s, "medians": [{"arm": 3}]})),
         ["report", "{d}/r", "--out", "{d}/rep"], "r/summary.json: not the shape a loopserve"),
    Case("report-summary-a-list", "C", both(run_folder("r"), text("r/summary.json", "[]")),
         ["report", "{d}/r", "--out", "{d}/rep"], "summary.json: not the shape"),
    Case("profile-json-syntax", "C", both(text("p.json", '{"format": \n  "x",,}'), scenario(
        cost={"kind": "calibrated", "profile": "p.json"})), RUN,
         "not valid JSON (line 2, column 7: Expecting property name"),
    Case("trace-jsonl-bad-line", "C", both(text("t.jsonl", '{"arrival_s": 0, "prompt_tokens": '
                                                '1, "output_tokens": 1}\n{"a": }\n'),
                                           scenario(workload={"kind": "trace",
                                                              "path": "t.jsonl"})),
         RUN, "t.jsonl:2: column 7: not valid JSON (Expecting value)"),
    Case("trace-csv-nul-byte", "C", both(text("t.csv", "arrival_s,prompt_tokens,output_tokens\n"
                                              "0,1,1\n0,\x00,1\n"),
                                         scenario(workload={"kind": "trace", "path": "t.csv"})),
         RUN, "t.csv:3: column prompt_tokens: expected an integer >= 1, got '\\x00'"),
    Case("trace-csv-huge-field", "C", both(text("t.csv", "arrival_s,prompt_tokens,output_tokens\n"
                                                "0,1,1\n0,1," + "9" * 200_000 + "\n"),
                                           scenario(workload={"kind": "trace", "path": "t.csv"})),
         RUN, "t.csv:3: not a CSV row (field larger than field limit"),
    # D: anything accepted has an effect, or is refused with the reason
    Case("profile-negative-coefficient", "D", both(text("p.json", json.dumps(
        NAN_PROFILE)), scenario(cost={"kind": "calibrated", "profile": "p.json"})), RUN,
         "coefficient -1e-05 is negative; re-run calibration"),
    Case("profile-nan-coefficient", "D", both(text("p.json", json.dumps(
        NAN_PROFILE).replace("-1e-05", "NaN")), scenario(
        cost={"kind": "calibrated", "profile": "p.json"})), RUN, "NaN is no JSON number"),
    Case("exit-profile-under-fixed", "D", scenario(exit={"mode": "fixed", "profile": "e.json"}),
         RUN, "exit.profile: an exit profile drives the signal modes"),
    Case("sweep-16-and-16.0", "D", scenario(sweep={"exit.exit_threshold": [0.5, 1, 1.0]}),
         RUN, "sweep.exit.exit_threshold: 1.0 listed twice (as 1)"),
    Case("arm-overrides-alias-collision", "D", scenario(arm_overrides={
        "A0": {"max_num_seqs": 2}, "atomic": {"max_num_seqs": 3}}), RUN,
         "arm_overrides.atomic: names the same arm as A0 (atomic); merge them"),
    Case("goodput-key-twice", "D", scenario(), [*RUN, "--goodput", "ttft:100", "ttft:200"],
         "--goodput: ttft given twice (100 and 200); give each once"),
    Case("goodput-inf", "C", scenario(), [*RUN, "--goodput", "ttft:inf"],
         "--goodput: 'ttft:inf': the SLO must be a finite number >= 0 ms"),
    Case("slo-key-twice", "D", scenario(workload=poisson()),
         ["capacity", "{d}/s.yaml", "--slo", "itl_p99_ms=10,itl_p99_ms=20"],
         "--slo: itl_p99_ms given twice (10 and 20); give each once"),
    Case("yaml-yes-is-no-boolean", "D", text("s.yaml", yaml_text(outputs="{tokens: yes}")),
         RUN, "outputs.tokens: Input should be a valid boolean, got 'yes'"),
    Case("yaml-sexagesimal-seed", "D", text("s.yaml", yaml_text(seed="1:30")), RUN,
         "seed: Input should be a valid integer, got '1:30'"),
    Case("yaml-underscore-digits", "D", text("s.yaml", yaml_text(seed="1_000")), RUN,
         "seed: Input should be a valid integer, got '1_000'"),
    Case("yaml-leading-zero-is-decimal", "D", text("s.yaml", yaml_text(seed="010")),
         [*RUN, "--out", "{d}/o"], None, keeps="o/scenario.yaml"),
    Case("scenario-utf8-bom", "D", data("s.yaml", b"\xef\xbb\xbf" + yaml_text().encode()),
         [*RUN, "--out", "{d}/o"], None, keeps="o/summary.json"),
    # E: the message names the field or file, the position, the limit, on a short line
    Case("huge-list-in-a-message", "E", scenario(exit={"mode": "ouro",
                                                       "lambdas": [2.0] * 50_000}), RUN,
         "exit.lambdas: each mean λ must lie strictly between 0 and 1, got [2.0,"),
    Case("checkpoint-config-corrupt", "E", both(folder("ck"), text("ck/config.json", "{,"),
                                                scenario(model="ck")), RUN,
         "model: checkpoint config {d}/ck/config.json:1:2: not valid JSON"),
    *READER_CASES,
    *NONFINITE_CASES,
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.kind}-{c.id}" for c in CASES])
def test_fault_or_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: Case,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LIMIT_ENV, str(8 << 30))  # the memory estimate's cases: any machine
    outcome = run_case(case, tmp_path)
    assert outcome["traceback"] is None, outcome["traceback"]
    err = outcome["err"]
    if case.fragment is None:
        assert outcome["rc"] == 0, err
    else:
        lines = err.splitlines()
        assert outcome["rc"] == 2, err
        assert len(lines) == 1 and lines[0].startswith("loopserve: error: "), err[:2000]
        assert len(lines[0]) <= MAX_LINE_CHARS + len(str(tmp_path)), lines[0]
        assert case.fragment.replace("{d}", str(tmp_path)) in lines[0], lines[0]
    assert not outcome["partial"], f"written: {outcome['partial']}"
    assert not outcome["lost"], f"nothing matches {case.keeps}"


if __name__ == "__main__":  # python -m tests.loopserve.test_bad_input
    for kind, c in tally(CASES).items():
        print(f"{kind}: " + ", ".join(f"{v} {k}" for k, v in c.items()))
