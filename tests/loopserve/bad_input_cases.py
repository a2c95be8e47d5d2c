"""The fault-and-bad-input table, by kind (A destinations, B bounds, C one line where a
traceback was, D nothing accepted without effect, E messages that name the right thing).
Each case: an input folder's setup, argv with ``{d}`` for it, and the fragment the one error
line holds (``None``: the command succeeds), and ``keeps``: a glob under ``{d}`` that must
match once the command ends (finished results not lost)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.scenario_fixtures import tiny

Setup = Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # A..E
    setup: Setup | None
    argv: list[str]
    fragment: str | None  # None: exit 0
    keeps: str | None = None


def text(name: str, body: str) -> Setup:
    return lambda d: (d / name).write_text(body)


def data(name: str, body: bytes) -> Setup:
    return lambda d: (d / name).write_bytes(body)


def scenario(name: str = "s.yaml", **changes: object) -> Setup:
    return text(name, yaml.safe_dump(tiny(**changes), sort_keys=False))


def poisson(**fields: object) -> dict[str, object]:
    return {"kind": "poisson", "num_requests": 4, "request_rate": 1.0, "prompt_tokens": 4,
            "output_tokens": 4, **fields}


def both(*setups: Setup) -> Setup:
    def run(d: Path) -> None:
        for s in setups:
            s(d)
    return run


def fifo(name: str) -> Setup:
    return lambda d: os.mkfifo(d / name)


def link(name: str, target: str) -> Setup:
    return lambda d: (d / name).symlink_to(target.replace("{d}", str(d)))


def folder(name: str) -> Setup:
    return lambda d: (d / name).mkdir()


def checkpoint(name: str, weights: bytes | None = None, **config: object) -> Setup:
    """A checkpoint folder of the tiny model's config.json (keys replaced, head_dim dropped)
    and, when given, ``weights`` as its model.safetensors."""
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


def run_folder(name: str) -> Setup:
    """A finished simulated run of the tiny scenario in ``d/name``."""
    def run(d: Path) -> None:
        from loopserve.cli import main

        (d / f"{name}.yaml").write_text(yaml.safe_dump(tiny(repeats=1), sort_keys=False))
        assert main([str(x) for x in ("run", d / f"{name}.yaml", "--out", d / name,
                                      "--no-progress")]) == 0
        (d / f"{name}.yaml").unlink()
    return run


def edit_json(rel: str, change: Callable[[Any], Any]) -> Setup:
    def run(d: Path) -> None:
        p = d / rel
        p.write_text(json.dumps(change(json.loads(p.read_text()))))
    return run


DEEP = "[" * 100_000 + "]" * 100_000
# eight levels of ten aliases each: a few hundred bytes that expand to 10^8 nodes
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True)
) + "name: x\n"
RUN = ["run", "{d}/s.yaml", "--no-progress"]
NAN_PROFILE = {"format": "loopserve-profile/1", "hardware": "h200", "model": "tiny",
               "provenance": {"device": "x", "torch_version": "x", "dtype": "x",
                              "commit": "x", "date": "x"},
               "stages": {"decode": {"features": ["decode_rows"], "coef": [-1e-5],
                                     "intercept_s": 1e-3}}}

# ---- every file reader x every way a file can be wrong -------------------------------------
# reader: (file name, setup putting it in context, argv, field the line names)
READERS: dict[str, tuple[str, Setup, list[str], str]] = {
    "trace-jsonl": ("t.jsonl", scenario(workload={"kind": "trace", "path": "t.jsonl"}), RUN,
                    "workload.path"),
    "sharegpt": ("g.json", scenario(workload={"kind": "sharegpt", "path": "g.json",
                                              "num_requests": 2, "request_rate": 1.0}), RUN,
                 "workload.path"),
    "cost-profile": ("p.json", scenario(cost={"kind": "calibrated", "profile": "p.json"}), RUN,
                     "cost.profile"),
    "exit-profile": ("e.json", scenario(exit={"mode": "ouro", "exit_threshold": 0.5,
                                              "profile": "e.json"}), RUN, "exit.profile"),
    "checkpoint-config": ("ck/config.json", both(folder("ck"), scenario(model="ck")),
                          RUN, "model"),
    "run-summary": ("r/summary.json", both(run_folder("r"), lambda d: (d / "r" /
                                                                         "summary.json").unlink()),
                    ["report", "{d}/r", "--out", "{d}/rep"], "run_dir"),
    "prompts": ("q.json", lambda d: None, ["exit-profile", "--target", "cpu", "--model", "tiny",
                                             "--prompts", "{d}/q.json", "--out", "{d}/e.json"],
                "--prompts"),
    "scenario": ("s.yaml", lambda d: None, RUN, "scenario"),
}
FAULTS: dict[str, tuple[Callable[[str], Setup], str]] = {
    "deep-json": (lambda n: text(n, DEEP), "nested too deep"),
    "fifo": (fifo, "is not a regular file"),
    "dev-zero": (lambda n: link(n, "/dev/zero"), "is not a regular file"),
    "utf16": (lambda n: data(n, "{}".encode("utf-16")), "is UTF-16 text"),
    "binary": (lambda n: data(n, b"{\n\xff\xfe\x00"), ":2:1: not UTF-8 text"),
}
READER_CASES = [
    Case(f"{reader}-{fault}", "C" if fault in ("deep-json", "utf16", "binary") else "B",
         both(ctx, make(name)), argv, f"{field}: " if reader != "scenario" else expect)
    for reader, (name, ctx, argv, field) in READERS.items()
    for fault, (make, expect) in FAULTS.items()
    if not (reader == "scenario" and fault == "deep-json")
]

# ---- every number field of the scenario: .inf, -.inf, .nan --------------------------------
NUMBER_FIELDS: dict[str, dict[str, Any]] = {
    "cost.core_call_s": {},
    "exit.exit_threshold": {"exit": {"mode": "ouro"}},
    "slo.itl_p99_ms": {"slo": {}},
    "slo.ttft_p99_ms": {"slo": {}},
    "workload.request_rate": {"workload": poisson()},
    "workload.burstiness": {"workload": {**poisson(), "kind": "gamma"}},
    "workload.prompt_tokens.median": {"workload": poisson(prompt_tokens={
        "dist": "lognormal", "median": 4.0, "sigma": 1.0, "max": 64})},
    "workload.prompt_tokens.sigma": {"workload": poisson(prompt_tokens={
        "dist": "lognormal", "median": 4.0, "sigma": 1.0, "max": 64})},
}


def _with(path: str, value: float, base: dict[str, Any]) -> Setup:
    doc = {**tiny(), **base}
    node = doc
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return text("s.yaml", yaml.safe_dump(doc, sort_keys=False))


NONFINITE_CASES = [
    Case(f"{path}={name}", "C", _with(path, value, base), RUN, f"{path}: ")
    for path, base in NUMBER_FIELDS.items()
    for name, value in (("inf", float("inf")), ("-inf", float("-inf")), ("nan", float("nan")))
]
