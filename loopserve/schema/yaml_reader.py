"""Scenario YAML read the way a user expects: YAML 1.2's core-schema scalars, a key given
twice refused, a bound on nodes once aliases are expanded, and the file read through the
guarded reader (``engine.core.guarded_read``); every failure a ``UserError`` naming the file
and the line and column."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from engine.core.guarded_read import FileReadError, read_text
from loopserve.errors import UserError

MAX_SCENARIO_BYTES = 1 << 20  # a scenario is a few KB; a bigger file is not one
# the most nodes a scenario may hold once its aliases are expanded: a few KB of nested
# aliases otherwise expand to 10^8 nodes (real scenarios hold a few hundred)
MAX_YAML_NODES = 100_000
# YAML 1.2's core schema, read as a user expects: only true/false are booleans (yes, no, on,
# off stay strings and the schema names them), 010 is ten, and 1:30 is a string, where YAML
# 1.1 (PyYAML's default) reads a boolean, eight and ninety
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


class ScenarioLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalars that rejects a key given twice in one
    mapping (the last one would win)."""

    yaml_implicit_resolvers: dict[Any, Any] = {}

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node))  # type: ignore[no-untyped-call]
        if text.startswith("0o"):
            return int(text[2:], 8)
        return int(text, 16) if text.startswith("0x") else int(text, 10)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # <<: *anchor, keys given override
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


for _tag, _pattern, _first in (
    ("bool", _BOOL, "tTfF"), ("int", _INT, "-+0123456789"), ("float", _FLOAT, "-+.0123456789"),
    ("null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]),
    ("merge", re.compile(r"^(?:<<)$"), "<"),
):
    ScenarioLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", _pattern, list(_first))
ScenarioLoader.add_constructor("tag:yaml.org,2002:int", ScenarioLoader.construct_yaml_int)


def _count_nodes(data: Any, limit: int) -> int:
    """Nodes of ``data`` with aliases expanded (shared objects counted each time they are
    reached), stopping past ``limit``."""
    count, stack = 0, [data]
    while stack and count <= limit:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The scenario file as a mapping; missing files and YAML syntax errors are UserErrors."""
    p = Path(path)
    if p.is_dir():
        raise UserError("scenario", f"{p} is a folder; give a scenario YAML file")
    try:
        text = read_text(p, MAX_SCENARIO_BYTES)
        data = yaml.load(text, Loader=ScenarioLoader)  # noqa: S506
    except FileReadError as err:
        raise UserError("scenario", str(err)) from None
    except RecursionError:
        raise UserError("scenario", f"{p}: YAML nested too deep; a scenario nests a few "
                        "levels") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        problem = getattr(err, "problem", None) or str(err)
        raise UserError("scenario", f"{where}: YAML syntax error: {problem}") from None
    if not isinstance(data, dict):
        raise UserError("scenario", f"{p}: must be a YAML mapping (name: ..., arms: ...)")
    if _count_nodes(data, MAX_YAML_NODES) > MAX_YAML_NODES:
        raise UserError("scenario", f"{p}: more than {MAX_YAML_NODES} YAML nodes once its "
                        "aliases are expanded; write the values out")
    return data


