"""engine.core stays free of torch, simpy and the clock; the simulator side of the project
imports no torch (DESIGN.md §1)."""

import subprocess
import sys


def test_engine_core_imports_no_torch_or_simpy() -> None:
    code = (
        "import sys, engine.core, engine.core.fake_executor; "
        "bad = [m for m in ('torch', 'simpy', 'numpy') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_sim_and_its_users_import_no_torch() -> None:
    code = (
        "import sys, sim, sim.driver, sim.cost, sim.exit_model, sim.validity, "
        "loopserve.workloads, loopserve.metrics; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_engine_core_never_reads_a_clock() -> None:
    import pathlib

    import engine.core

    root = pathlib.Path(engine.core.__file__).parent
    for path in root.glob("*.py"):
        text = path.read_text()
        assert "import time" not in text and "from time" not in text, path
        assert "datetime" not in text, path
