"""Flags shared by the commands: numeric ones checked by hand, so a bad value is one line
naming the flag (argparse's own type errors print the whole usage), and the scenario
commands' --out / --set / --no-progress."""

from __future__ import annotations

import argparse
import math

from loopserve.errors import UserError


def number(flag: str, text: str, low: float, *, integer: bool = False,
           allow_inf: bool = False, fix: str = "") -> float:
    """``text`` as a number >= ``low`` (an int when ``integer``); UserError otherwise, ending
    in ``fix`` (e.g. "e.g. --seed 0") when given."""
    hint = f"; {fix}" if fix else ""
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise UserError(flag, f"{text!r} is not {kind}{hint}") from None
    if math.isnan(value) or (math.isinf(value) and not allow_inf) or value < low:
        raise UserError(flag, f"must be {'an integer' if integer else 'a number'} >= {low:g}"
                        f"{' or inf' if allow_inf else ''}, got {text}{hint}")
    return value


def integer(flag: str, text: str, low: int, fix: str = "") -> int:
    return int(number(flag, text, low, integer=True, fix=fix))


def real_target(target: str) -> None:
    """``--target`` of a command that runs the real engine: cpu or cuda; UserError otherwise."""
    if target not in ("cpu", "cuda"):
        raise UserError("--target", f"unknown target {target!r}; use cpu or cuda")


def flag_error(err: ValueError, default: str) -> UserError:
    """A ``ValueError("--flag: message")`` as the UserError naming that flag."""
    flag, sep, message = str(err).partition(": ")
    return UserError(flag, message) if sep and flag.startswith("--") else UserError(
        default, str(err))


def add_scenario_flags(p: argparse.ArgumentParser, out_help: str,
                       progress_help: str = "hide the progress bar") -> None:
    """``--out``, ``--set KEY=VALUE`` (repeatable) and ``--no-progress``, as every command
    that runs a scenario takes them."""
    p.add_argument("--out", help=out_help)
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a dotted scenario field, value parsed as YAML (repeatable)")
    p.add_argument("--no-progress", action="store_true", help=progress_help)
