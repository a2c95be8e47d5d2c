"""engine.core stays free of torch, simpy and the clock; the simulator side of the project
imports no torch (docs/design.md)."""

import pathlib
import subprocess
import sys


def _loaded_after(imports: str, candidates: tuple[str, ...]) -> list[str]:
    """Which of ``candidates`` a fresh interpreter has loaded after ``import <imports>``."""
    code = (f"import sys, {imports}; "
            f"print(','.join(m for m in {candidates!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def _all_modules(package: str) -> str:
    """Every module of ``package`` (found on disk, so a new one cannot be missed), joined
    for an import statement."""
    root = pathlib.Path(__file__).resolve().parents[2]
    names = []
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return ", ".join(names)


def test_engine_core_imports_no_torch_or_simpy() -> None:
    assert _loaded_after(_all_modules("engine.core"), ("torch", "simpy", "numpy")) == []


def test_all_of_sim_imports_no_torch() -> None:
    imports = _all_modules("sim")
    assert "sim.cost" in imports and "sim.driver" in imports
    assert _loaded_after(imports, ("torch", "triton")) == []
    assert _loaded_after(imports, ("simpy",)) == ["simpy"]  # the probe sees what is loaded


def test_the_simulator_path_of_the_user_layer_imports_no_torch() -> None:
    imports = ("loopserve.cli, loopserve.workloads, loopserve.stats.metrics, "
               "loopserve.targets.sim, loopserve.report.page")
    assert _loaded_after(imports, ("torch",)) == []


def test_engine_core_never_reads_a_clock() -> None:
    import engine.core

    root = pathlib.Path(engine.core.__file__).parent
    for path in root.glob("*.py"):
        text = path.read_text()
        assert "import time" not in text and "from time" not in text, path
        assert "datetime" not in text, path
