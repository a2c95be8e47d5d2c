"""Read a scenario file, apply ``--set`` overrides and validate it into a ``Scenario``.

Every failure becomes a ``UserError`` naming the field, so the CLI can print one line and
exit 2 before anything is written.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from loopserve.errors import UserError, short_repr
from loopserve.schema.scenario import Scenario
from loopserve.schema.yaml_reader import ScenarioLoader, read_yaml

__all__ = ["load_scenario", "parse_set", "read_yaml", "set_path", "validate"]

# Path-valued fields resolved against the scenario file's folder when not found from the cwd.
_PATH_FIELDS = (("model",), ("cost", "profile"), ("exit", "profile"), ("workload", "path"))
# pydantic's loc names the union member tried last for a sweep value of the wrong type
_SCALAR_TAGS = ("bool", "int", "float", "str")


def parse_set(item: str) -> tuple[str, Any]:
    """``key=value`` with the value parsed as YAML (``4``, ``true``, ``[64, 128]``, ``null``)."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError("--set", f"{item!r}: expected key=value, e.g. workload.decode_population=4")
    try:
        value = yaml.load(raw, Loader=ScenarioLoader)  # noqa: S506
    except yaml.YAMLError:
        raise UserError(key, f"--set value {raw!r} is not valid YAML") from None
    return key, value


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set a dotted field in a raw scenario mapping, creating missing sections.

    Keys of ``sweep`` and ``variants.<name>`` are dotted names themselves, so
    ``sweep.scheduler.prefill_chunk_size`` sets the sweep entry ``scheduler.prefill_chunk_size``.
    A numeric part indexes a list: ``workload.inject.0.prompt_tokens``.
    """
    parts = dotted.split(".")
    if any(not p for p in parts):
        raise UserError(dotted, "bad field path; use dotted names like scheduler.max_num_seqs")
    if parts[0] == "sweep" and len(parts) > 2:
        parts = ["sweep", ".".join(parts[1:])]
    elif parts[0] == "variants" and len(parts) > 3:
        parts = ["variants", parts[1], ".".join(parts[2:])]
    node: Any = data
    for i, key in enumerate(parts[:-1]):
        child = _child(node, key, dotted)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict | list):
            where = ".".join(parts[: i + 1])
            raise UserError(dotted, f"{where} is a {type(child).__name__}, not a section")
        node = child
    if isinstance(node, list):
        node[_index(node, parts[-1], dotted)] = value
    else:
        node[parts[-1]] = value


def _index(node: list[Any], key: str, dotted: str) -> int:
    """A list entry's index from a dotted part (``workload.inject.0.prompt_tokens``)."""
    if not key.isdigit() or int(key) >= len(node):
        raise UserError(dotted, f"{key!r} is not an entry of a list of {len(node)}; use "
                        f"0..{len(node) - 1}")
    return int(key)


def _child(node: dict[str, Any] | list[Any], key: str, dotted: str) -> Any:
    return node[_index(node, key, dotted)] if isinstance(node, list) else node.get(key)


def _resolve_paths(data: dict[str, Any], base: Path) -> None:
    for path in _PATH_FIELDS:
        node: Any = data
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(node.get(path[-1]), str):
            continue
        value = node[path[-1]]
        if Path(value).is_absolute() or Path(value).exists():
            continue
        candidate = base / value
        if candidate.exists():
            node[path[-1]] = str(candidate.resolve())


def validate(data: dict[str, Any]) -> Scenario:
    """Validate a raw mapping; the first pydantic error becomes a one-line UserError."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise _user_error(err, data) from None


def load_scenario(path: str | Path, sets: Sequence[str] = ()) -> Scenario:
    """Read, override (``--set``, applied before validation) and validate a scenario file."""
    data = read_yaml(path)
    for item in sets:
        key, value = parse_set(item)
        set_path(data, key, value)
    base = Path(path).resolve().parent
    _resolve_paths(data, base)
    return validate(data).located(base)


# ---- error rendering ---------------------------------------------------------------------
def _user_error(err: ValidationError, data: dict[str, Any]) -> UserError:
    e = _best_error(err.errors(include_url=False), data)
    kind = e["type"]
    # the key named last is the error's subject only when it is missing or unknown
    loc = (_input_path if kind in ("extra_forbidden", "missing") else _known_path)(e["loc"], data)
    msg = str(e["msg"])
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], data)
        hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        msg = "unknown key" + (f"; did you mean {hint[0]!r}?" if hint else "")
        if allowed:
            msg += f" (allowed: {', '.join(allowed)})"
    elif kind == "missing":
        msg = "required field is missing"
    elif kind == "less_than_equal":
        most = e.get("ctx", {}).get("le")
        msg = f"{short_repr(e.get('input'))} is past the upper bound; use at most {most}"
    elif kind == "union_tag_invalid":
        ctx = e.get("ctx", {})
        loc = [*loc, ctx.get("discriminator", "kind").strip("'")]
        msg = f"unknown {ctx.get('tag')!r}; use one of {ctx.get('expected_tags')}"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
        head, sep, rest = msg.partition(": ")
        if sep and head.replace(".", "").replace("_", "").isalnum() and " " not in head:
            loc, msg = loc + head.split("."), rest
    elif e["loc"] and e["loc"][-1] in _SCALAR_TAGS:
        msg = f"expected a scalar (number, string or boolean), got {short_repr(e.get('input'))}"
    elif "input" in e and kind not in ("union_tag_invalid",):
        msg = f"{msg}, got {short_repr(e['input'])}"
    field = ".".join(str(p) for p in loc) or "scenario"
    return UserError(field, msg)


# a branch of a union that wanted another kind of input than the one given
_SCALAR_MISMATCH = ("int_type", "float_type", "bool_type", "string_type", "int_parsing")
_MAPPING_MISMATCH = ("model_attributes_type", "model_type", "dict_type")


def _best_error(errors: list[Any], data: dict[str, Any]) -> Any:
    """The error to report: the first one, unless it comes from a union branch that wanted
    another kind of input (``prompt_tokens: {dist: fixed, bogus: 1}`` fails the int branch
    first); then the deepest error of the same field from a branch that fits the input."""
    first = errors[0]
    field = _known_path(first["loc"], data)
    same = [e for e in errors if _known_path(e["loc"], data)[: len(field)] == field]

    def fits(e: Any) -> bool:
        given = e.get("input")
        if e["type"] in _SCALAR_MISMATCH:
            return not isinstance(given, (dict, list))
        if e["type"] in _MAPPING_MISMATCH:
            return isinstance(given, dict)
        return True

    fitting = [e for e in same if fits(e)]
    if not fitting or fits(first):
        return first
    return max(fitting, key=lambda e: len(_input_path(e["loc"], data)))



def _known_path(loc: tuple[Any, ...], data: Any) -> list[Any]:
    """The keys of ``loc`` present in the input (the field an error is about)."""
    path = _input_path(loc, data)
    node = data
    for i, part in enumerate(path):
        if not isinstance(node, (dict, list)) or (isinstance(node, dict) and part not in node):
            return path[:i]
        node = node[part]
    return path


def _input_path(loc: tuple[Any, ...], data: Any) -> list[Any]:
    """Drop pydantic's union-member tags from ``loc``, keeping only real input keys."""
    out: list[Any] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            out.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            out.append(part)
            node = node[part]
        elif not isinstance(node, (dict, list)) or isinstance(part, int):
            continue
        elif isinstance(node, dict) and part not in node and part == loc[-1]:
            out.append(part)  # the missing or unknown key itself
    return out


def _allowed_keys(loc: list[Any], data: dict[str, Any]) -> list[str]:
    """Field names of the model at ``loc`` (best effort; [] when not a model)."""
    model: Any = Scenario
    node: Any = data
    skip_key = False
    for part in loc:
        node = node.get(part) if isinstance(node, dict) else None
        if skip_key:
            skip_key = False
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        model = _pick_model(field.annotation, node)
        if typing.get_origin(model) is dict:
            model, skip_key = typing.get_args(model)[1], True
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def _pick_model(annotation: Any, node: Any) -> Any:
    """Unwrap Optional/Annotated/discriminated unions to the member the input selects."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _pick_model(typing.get_args(annotation)[0], node)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        for m in members:
            m = _pick_model(m, node)
            if not (isinstance(m, type) and issubclass(m, BaseModel)):
                continue
            for tag in ("kind", "dist"):  # the schema's discriminators
                given = node.get(tag) if isinstance(node, dict) else None
                if tag in m.model_fields and given in typing.get_args(
                        m.model_fields[tag].annotation):
                    return m
        return members[0] if len(members) == 1 else None
    return annotation
