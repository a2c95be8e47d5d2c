"""The one reader of versioned profile files (sim.profile_file): cost profiles and exit
profiles fail the same way, one line naming the file, the reason and the fix."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sim.cost.profile import PROFILE_FORMAT, load_profile
from sim.exit_profile import EXIT_PROFILE_FORMAT, load_exit_profile

ROOT = Path(__file__).resolve().parents[2]
LOADERS: list[tuple[Callable[[Any], Any], str, str, str]] = [
    (load_profile, PROFILE_FORMAT, "cost.profile", "re-run calibration"),
    (load_exit_profile, EXIT_PROFILE_FORMAT, "exit.profile", "loopserve exit-profile"),
]


@pytest.mark.parametrize("load, fmt, where, fix", LOADERS)
@pytest.mark.parametrize("text, reason", [
    ("", "not valid JSON (line 1, column 1: "),
    ('{"format": "F", "model": "tiny"', "not valid JSON (line 1, column "),
    ("[1, 2]", "format is 'list', expected"),
    ('{"format": "other/9"}', "format is 'other/9', expected"),
    ('{"format": "F"}', "invalid "),
    ("\udcff", "cannot read the file"),
])
def test_both_profiles_fail_alike(tmp_path: Path, load: Callable[[Any], Any], fmt: str,
                                  where: str, fix: str, text: str, reason: str) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(text.replace("F", fmt).encode("utf-8", "surrogateescape"))
    with pytest.raises(ValueError) as err:
        load(path)
    msg = str(err.value)
    assert msg.startswith(f"{where}: {path}: {reason}") and "\n" not in msg
    if "JSON" in reason:
        assert msg.endswith(fix)
    if reason == "invalid ":
        assert "(+" in msg  # several fields missing: the first named, the rest counted


@pytest.mark.parametrize("module", ["sim/cost/profile.py", "sim/exit_profile.py"])
def test_no_profile_module_parses_json_itself(module: str) -> None:
    """The reading lives in sim/profile_file.py only (no second copy to drift apart)."""
    tree = ast.parse((ROOT / module).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "json" not in imported
