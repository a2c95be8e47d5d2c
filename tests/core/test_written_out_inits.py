"""The ``__init__``s written out for the mypyc build (``engine/_native.py``, 1) take every
field in order, with the class's defaults where it declares them, and set each one:
compiled or from source."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import pkgutil
import types
import typing
from typing import Any

import pytest

import engine.core
from engine.core.batch import Batch

# Constructors that compute fields rather than take them.
DERIVED = {Batch}


def written_out() -> list[type]:
    """Every ``@dataclass(init=False)`` class of engine.core (found, so a new one is held to
    the rule too), less ``DERIVED``."""
    found: dict[str, type] = {}
    for info in pkgutil.iter_modules(engine.core.__path__):
        module = importlib.import_module(f"engine.core.{info.name}")
        for obj in vars(module).values():
            if (isinstance(obj, type) and obj.__module__ == module.__name__
                    and dataclasses.is_dataclass(obj) and not obj.__dataclass_params__.init
                    and obj not in DERIVED):
                found[obj.__qualname__] = obj
    return [found[k] for k in sorted(found)]


def _value(hint: Any, i: int) -> Any:
    """A value of type ``hint`` that differs from the ones other ``i`` give. Compiled, the
    hints are erased to their classes (``tuple``; ``type`` for a union)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return _value(options[0], i) if len(options) == 1 else None
    if origin is tuple:
        return (_value(args[0], i),)
    if hint is tuple:
        return (1000 + i,)
    if hint is bool:
        return True
    if hint is int:
        return 1000 + i
    if hint is float:
        return 0.25 + i
    if hint is str:
        return f"value-{i}"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return list(hint)[-1]
    return None


def _fields(cls: type) -> list[tuple[str, Any, Any]]:
    """(name, value to pass, default or MISSING) per field, in order."""
    hints = typing.get_type_hints(cls)
    return [(f.name, _value(hints[f.name], i), f.default)
            for i, f in enumerate(dataclasses.fields(cls))]


def test_the_hot_classes_are_found() -> None:
    names = {cls.__name__ for cls in written_out()}
    assert {"ScheduledItem", "FinalizeOp", "StepResult", "RecurrentResult", "CodaResult",
            "TokenEvent", "StepRecord"} <= names


@pytest.mark.parametrize("cls", written_out(), ids=lambda c: c.__name__)
def test_init_takes_every_field_in_order(cls: type) -> None:
    fields = _fields(cls)
    by_position = cls(*[value for _, value, _ in fields])
    by_keyword = cls(**{name: value for name, value, _ in fields})
    for name, value, _ in fields:
        assert getattr(by_position, name) == value, name
        assert getattr(by_keyword, name) == value, name


@pytest.mark.parametrize("cls", written_out(), ids=lambda c: c.__name__)
def test_init_has_the_fields_defaults(cls: type) -> None:
    fields = _fields(cls)
    required = {name: value for name, value, default in fields
                if default is dataclasses.MISSING}
    obj = cls(**required)
    for name, _, default in fields:
        if default is not dataclasses.MISSING:
            assert getattr(obj, name) == default, name
    with pytest.raises(TypeError):
        cls(*[value for _, value, _ in fields], None)  # no parameter past the fields
