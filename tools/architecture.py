"""The architecture's import rules (docs/design.md), read from the source with ``ast``.

Every import of every project module counts, top-level, inside functions and under
``if TYPE_CHECKING:`` (a type-only cycle still ties the two modules together).

    python -m tools.architecture [ROOT]     # prints each violation; exit 1 if any
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("engine", "kernels", "sim", "loopserve", "tools")
# The third-party families the rules speak of: torch's (triton, safetensors) and simpy.
TORCH_FAMILY = ("torch", "triton", "safetensors")
CLOCK_MODULES = ("time", "datetime")


@dataclass(frozen=True)
class Import:
    """One import statement's target as seen from ``module``."""

    module: str  # the importing module, dotted
    target: str  # the imported module, dotted (a submodule when ``from pkg import sub``)
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path) -> dict[str, Path]:
    """Every module of the project's packages under ``root``, by dotted name."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            out[module_name(root, path)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, type_only: bool) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.body:
                yield sub, True
                yield from _walk(sub, True)
            for sub in child.orelse:
                yield sub, type_only
                yield from _walk(sub, type_only)
            continue
        yield child, type_only
        yield from _walk(child, type_only)


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """The imports of one module, resolved against the project's modules."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out: list[Import] = []
    for node, type_only in _walk(tree, False):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append(Import(name, alias.name, node.lineno, type_only))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".") if package else []
                if node.level > 1:
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in modules else base
                out.append(Import(name, target, node.lineno, type_only))
    return out


def _top(target: str) -> str:
    return target.split(".")[0]


def _within(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith(prefix + ".")


def _torch_allowed(module: str) -> bool:
    if _within(module, "engine.core"):
        return False
    return (
        _within(module, "engine")
        or _within(module, "kernels")
        or _within(module, "tools")
        or module == "loopserve.targets.real"
        or _within(module, "loopserve.calibrate")
        or module == "loopserve.commands.profile"  # torch.profiler is what it measures with
    )


def rule_violation(imp: Import) -> str | None:
    """The layer rule an import breaks, or None."""
    src, dst = imp.module, imp.target
    top = _top(dst)
    if top in TORCH_FAMILY and not _torch_allowed(src):
        return f"{top} is imported only by engine (outside engine.core), kernels, " \
               "loopserve.targets.real, loopserve.calibrate, loopserve.commands.profile and tools"
    if top == "simpy" and not (_within(src, "sim") or _within(src, "tools")):
        return "simpy is imported only by sim (and tools' benchmarks)"
    if _within(src, "engine.core"):
        if top in CLOCK_MODULES:
            return "engine.core reads no clock (now is passed in)"
        if top in PACKAGES and not _within(dst, "engine.core"):
            return "engine.core imports nothing of the project outside itself"
    elif _within(src, "sim"):
        if top in PACKAGES and not (_within(dst, "sim") or _within(dst, "engine.core")):
            return "sim imports engine.core and nothing else of the project"
    elif _within(src, "kernels"):
        if top in ("engine", "sim", "loopserve", "tools"):
            return "kernels imports no engine, sim, loopserve or tools"
    elif _within(src, "engine"):
        if top in ("sim", "loopserve", "tools"):
            return "engine imports no sim, loopserve or tools"
    elif _within(src, "loopserve"):
        if top == "tools":
            return "loopserve imports no tools"
    return None


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def check(root: Path) -> list[str]:
    """Every rule violation and import cycle under ``root``, one line each."""
    modules = project_modules(root)
    problems: dict[str, None] = {}  # ordered and without repeats
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for imp in imports_of(name, path, modules):
            why = rule_violation(imp)
            if why is not None:
                rel = path.relative_to(root)
                problems[f"{rel}:{imp.line}: imports {imp.target}: {why}"] = None
            if imp.target in modules and imp.target != name:
                edges[name].add(imp.target)
    for comp in find_cycles(edges):
        problems["import cycle: " + " <-> ".join(comp)] = None
    return list(problems)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else ".").resolve()
    problems = check(root)
    for line in problems:
        print(line)
    print(f"{len(problems)} architecture problem(s) under {root}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
