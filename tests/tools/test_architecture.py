"""The import rules of docs/design.md, read from every project module with ``ast``
(``tools/architecture.py``), and proof that the checker catches each kind of violation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.architecture import check, imports_of, project_modules

ROOT = Path(__file__).resolve().parents[2]


def test_the_project_follows_its_import_rules() -> None:
    assert check(ROOT) == []


def test_every_package_is_scanned() -> None:
    names = set(project_modules(ROOT))
    for expected in ("engine.core.engine_core", "sim.driver", "kernels.attention.base",
                     "loopserve.cli", "tools.architecture"):
        assert expected in names


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for pkg in ("engine", "engine/core", "sim", "kernels", "loopserve", "loopserve/targets",
                "loopserve/report", "tools"):
        init = tmp_path / pkg / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        if not init.exists():
            init.write_text("")
    return tmp_path


CLEAN = {
    "engine/core/batch.py": "from engine.core import request\n",
    "engine/core/request.py": "import dataclasses\n",
    "engine/runner.py": "import torch\nfrom engine.core.batch import Batch\nimport kernels\n",
    "sim/driver.py": "import simpy\nfrom engine.core.batch import Batch\nfrom . import cost\n",
    "sim/cost.py": "from engine.core import request\n",
    "kernels/attn.py": "import torch\nimport triton\n",
    "loopserve/targets/real.py": "import torch\nimport engine.runner\nimport sim.driver\n",
    "loopserve/report/plots.py": "import matplotlib\nfrom loopserve.targets import real\n",
    "tools/bench.py": "import simpy\nimport torch\nimport loopserve.report.plots\n",
}


def test_a_clean_synthetic_tree_passes(tmp_path: Path) -> None:
    assert check(_tree(tmp_path, CLEAN)) == []


PLANTED = [
    ("engine/core/bad.py", "from loopserve.targets import real\n",
     "engine.core imports nothing of the project outside itself"),
    ("engine/core/bad.py", "def f():\n    import sim.driver\n",  # inside a function
     "engine.core imports nothing of the project outside itself"),
    ("engine/core/bad.py", "import time\n", "engine.core reads no clock"),
    ("engine/core/bad.py", "import torch\n", "torch is imported only by"),
    ("engine/core/bad.py", "from ..runner import X\n",  # relative, up out of the core
     "engine.core imports nothing of the project outside itself"),
    ("sim/bad.py", "from engine.runner import ModelRunner\n",
     "sim imports engine.core and nothing else"),
    ("sim/bad.py", "import loopserve.report.plots\n", "sim imports engine.core and nothing else"),
    ("sim/bad.py", "import torch\n", "torch is imported only by"),
    ("kernels/bad.py", "from engine.core import batch\n", "kernels imports no engine"),
    ("engine/bad.py", "import sim.driver\n", "engine imports no sim, loopserve or tools"),
    ("engine/bad.py", "from loopserve.report import plots\n",
     "engine imports no sim, loopserve or tools"),
    ("loopserve/report/bad.py", "import torch\n", "torch is imported only by"),
    ("loopserve/report/bad.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    import torch\n", "torch is imported only by"),
    ("loopserve/bad.py", "import simpy\n", "simpy is imported only by sim"),
    ("loopserve/bad.py", "import tools.bench\n", "loopserve imports no tools"),
]


@pytest.mark.parametrize(("path", "text", "why"), PLANTED)
def test_a_planted_violation_is_found(tmp_path: Path, path: str, text: str, why: str) -> None:
    problems = check(_tree(tmp_path, {**CLEAN, path: text}))
    assert len(problems) == 1, problems
    assert problems[0].startswith(path) and why in problems[0]


def test_an_import_cycle_is_found(tmp_path: Path) -> None:
    files = {**CLEAN,
             "loopserve/report/a.py": "from loopserve.report import b\n",
             "loopserve/report/b.py": "def f():\n    from loopserve.report.c import x\n",
             "loopserve/report/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from loopserve.report.a import y\n"}
    assert check(_tree(tmp_path, files)) == [
        "import cycle: loopserve.report.a <-> loopserve.report.b <-> loopserve.report.c"
    ]


def test_from_package_import_submodule_resolves_to_the_submodule(tmp_path: Path) -> None:
    root = _tree(tmp_path, CLEAN)
    modules = project_modules(root)
    targets = {i.target for i in imports_of("sim.driver", modules["sim.driver"], modules)}
    assert targets == {"simpy", "engine.core.batch", "sim.cost"}


# The hard limit. Past about 300 lines a file is a candidate to split where its concepts
# split; it is never a number to squeeze code under.
MAX_FILE_LINES = 400


def test_no_source_file_is_over_400_lines() -> None:
    long = {str(path.relative_to(ROOT)): n for path in project_modules(ROOT).values()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert long == {}


def test_the_top_of_loopserve_holds_only_the_cli_and_subpackages() -> None:
    top = sorted(p.name for p in (ROOT / "loopserve").iterdir()
                 if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    modules = [name for name in top if name.endswith(".py")]
    assert modules == ["__init__.py", "__main__.py", "cli.py", "errors.py"]
