"""The simulator, workloads and metrics import no torch (DESIGN.md §1)."""

from __future__ import annotations

import subprocess
import sys


def test_sim_and_its_users_import_no_torch() -> None:
    code = (
        "import sys, sim, sim.driver, sim.cost, sim.exit_model, sim.validity, "
        "loopserve.workloads, loopserve.metrics; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
