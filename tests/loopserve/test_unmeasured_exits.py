"""A simulation whose adaptive exits no measured exit profile drives says so: one note on
stderr, in env.json and in the report header, naming the command that measures one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopserve.cli import main
from tests.scenario_fixtures import tiny, write_scenario

COMMAND = "loopserve exit-profile --scenario SCENARIO --target cpu|cuda"


@pytest.mark.parametrize(("exit_spec", "noted"), [
    ({"mode": "ouro", "exit_threshold": 0.5}, True),
    ({"mode": "ouro", "exit_threshold": 0.5, "lambdas": [0.5, 0.5, 0.5, 0.9]}, False),
    ({"mode": "fixed"}, False),
])
def test_unmeasured_adaptive_exits_are_noted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], exit_spec: dict[str, object],
    noted: bool,
) -> None:
    scn = write_scenario(tmp_path, tiny(repeats=1, exit=exit_spec))
    assert main(["run", str(scn), "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    env = json.loads((tmp_path / "r" / "env.json").read_text())
    html = (tmp_path / "r" / "report.html").read_text()
    assert (COMMAND in err) is noted, err
    assert any("note" in m for m in env["exit_model"].values()) is noted
    assert (COMMAND in html) is noted
    if noted:
        assert [line for line in err.splitlines() if "note:" in line] == [
            f"loopserve: note: {json.loads(json.dumps(env['exit_model']['0']['note']))}"]
