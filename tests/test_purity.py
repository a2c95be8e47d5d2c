"""engine.core stays free of torch, simpy and the clock; the simulator side of the project
imports no torch (DESIGN.md §1)."""

import subprocess
import sys


def _loaded_after(imports: str, candidates: tuple[str, ...]) -> list[str]:
    """Which of ``candidates`` a fresh interpreter has loaded after ``import <imports>``."""
    code = (f"import sys, {imports}; "
            f"print(','.join(m for m in {candidates!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_engine_core_imports_no_torch_or_simpy() -> None:
    assert _loaded_after("engine.core, engine.core.fake_executor",
                         ("torch", "simpy", "numpy")) == []


def test_sim_and_its_users_import_no_torch() -> None:
    imports = ("sim, sim.driver, sim.cost, sim.cost.fit, sim.cost.shape_grid, sim.cost.resolve, "
               "sim.exit_model, sim.validity, loopserve.workloads, loopserve.runs.metrics")
    assert _loaded_after(imports, ("torch",)) == []
    assert _loaded_after(imports, ("simpy",)) == ["simpy"]  # the probe sees what is loaded


def test_engine_core_never_reads_a_clock() -> None:
    import pathlib

    import engine.core

    root = pathlib.Path(engine.core.__file__).parent
    for path in root.glob("*.py"):
        text = path.read_text()
        assert "import time" not in text and "from time" not in text, path
        assert "datetime" not in text, path
