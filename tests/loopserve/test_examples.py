"""Every example in examples/ runs and prints exactly its expected output (``NAME.out``
beside ``NAME.py``), as SimPy checks its examples."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_every_example_has_its_expected_output() -> None:
    assert len(EXAMPLES) >= 3
    for path in EXAMPLES:
        assert path.with_suffix(".out").is_file(), f"{path.name} has no expected output"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_prints_its_expected_output(path: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # From another folder, so an example cannot lean on the working directory.
    out = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == path.with_suffix(".out").read_text()
