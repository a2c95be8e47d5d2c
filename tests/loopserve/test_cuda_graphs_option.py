"""``runner.cuda_graphs`` is refused on a CPU target with one line and exit 2, before any
model is built, and an unknown mode is refused by the schema."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from loopserve.cli import main
from tests.scenario_fixtures import tiny


@pytest.mark.parametrize(("mode", "fragment"), [
    ("decode", "runner.cuda_graphs: 'decode' needs --target cuda, not cpu; set cuda_graphs: off"),
    ("always", "runner.cuda_graphs"),
])
def test_cuda_graphs_on_cpu_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               mode: str, fragment: str) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(tiny(runner={"cuda_graphs": mode})))
    rc = main(["run", str(tmp_path / "s.yaml"), "--target", "cpu",
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and fragment in lines[0], err
    assert not (tmp_path / "out").exists()
