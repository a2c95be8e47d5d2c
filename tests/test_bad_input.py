"""Bad input, table-driven (issue 13): every case exits 2 with one line naming the problem,
no traceback, and nothing written. Grow the table with every new case."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from loopserve.cli import main
from tests.scenario_fixtures import tiny

Setup = Callable[[Path], None]


def _text(name: str, text: str) -> Setup:
    return lambda d: (d / name).write_text(text)


def _bytes(name: str, data: bytes) -> Setup:
    return lambda d: (d / name).write_bytes(data)


def _scenario(name: str = "s.yaml", **changes: object) -> Setup:
    return _text(name, yaml.safe_dump(tiny(**changes), sort_keys=False))


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
]


@pytest.mark.parametrize(("setup", "argv", "fragment"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: Setup | None, argv: list[str],
    fragment: str,
) -> None:
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
