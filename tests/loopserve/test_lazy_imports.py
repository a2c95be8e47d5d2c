"""Each command imports what it uses: ``loopserve --help`` loads no command module, and a
simulated ``loopserve run`` stays within ``MAX_RUN_MODULES`` project modules and loads nothing
of the server, the benchmark client, fidelity or calibration (nor torch). Measured in a fresh
interpreter, since this test process has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.scenario_fixtures import tiny

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("engine", "kernels", "sim", "loopserve", "tools")
MAX_RUN_MODULES = 90  # within 90; lower it whenever a simulated run loads fewer
NOT_IN_A_SIMULATED_RUN = ("loopserve.server", "loopserve.bench", "loopserve.fidelity",
                          "loopserve.calibrate")
HELP_MODULES = {"loopserve", "loopserve.cli", "loopserve.commands", "loopserve.errors",
                "loopserve.runs", "loopserve.runs.interrupts"}
MARK = "MODULES:"
PROBE = f"""
import json, sys
from loopserve.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
mods = sorted(m for m in sys.modules if m.split(".")[0] in {PROJECT!r})
print({MARK!r} + json.dumps({{"rc": rc, "modules": mods, "torch": "torch" in sys.modules}}))
"""


def _loaded(*argv: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    doc: dict[str, object] = json.loads(out.rsplit(MARK, 1)[1])
    return doc


def _under(modules: list[str], prefix: str) -> list[str]:
    return [m for m in modules if m == prefix or m.startswith(prefix + ".")]


def test_help_imports_no_command() -> None:
    doc = _loaded("--help")
    assert doc["rc"] == 0
    assert set(doc["modules"]) <= HELP_MODULES, sorted(set(doc["modules"]) - HELP_MODULES)


def test_a_simulated_run_loads_only_what_it_uses(tmp_path: Path) -> None:
    scn = tmp_path / "tiny.yaml"
    scn.write_text(yaml.safe_dump(tiny(cost={"kind": "roofline"}, repeats=1)))
    doc = _loaded("run", str(scn), "--target", "sim", "--out", str(tmp_path / "out"),
                  "--no-progress")
    assert doc["rc"] == 0 and (tmp_path / "out" / "summary.json").is_file()
    modules = doc["modules"]
    assert isinstance(modules, list)
    for prefix in NOT_IN_A_SIMULATED_RUN:
        assert _under(modules, prefix) == [], prefix
    assert _under(modules, "loopserve.commands") == [
        "loopserve.commands", "loopserve.commands.args",
        "loopserve.commands.run"]
    assert not doc["torch"]
    assert len(modules) <= MAX_RUN_MODULES, modules
