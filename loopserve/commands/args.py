"""Flags shared by the commands: numeric ones checked by hand, so a bad value is one line
naming the flag (argparse's own type errors print the whole usage), the scenario
commands' --out / --set / --no-progress, and vLLM's benchmark flags (--goodput,
--percentile-metrics, --metric-percentiles) that run, capacity and bench serve take."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

from loopserve.errors import UserError
from loopserve.outputs.vllm_results import METRICS


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


def parse_goodput(items: Sequence[str]) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` -> ``{"ttft": 500.0, "tpot": 50.0}`` (milliseconds);
    ValueError naming ``--goodput`` on a bad item."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or name not in ("ttft", "tpot", "e2el"):
            raise ValueError(f"--goodput: {item!r} must be ttft:MS, tpot:MS or e2el:MS")
        try:
            ms = float(value)
        except ValueError:
            raise ValueError(f"--goodput: {item!r}: {value!r} is not a number of ms") from None
        if not 0 <= ms < float("inf"):
            raise ValueError(f"--goodput: {item!r}: the SLO must be a finite number >= 0 ms")
        if name in out:  # the last would win without a word
            raise ValueError(f"--goodput: {name} given twice ({out[name]:g} and {ms:g}); "
                             "give each once")
        out[name] = ms
    return out


def parse_percentiles(text: str) -> tuple[float, ...]:
    """``"50,90,99"`` -> ``(50.0, 90.0, 99.0)`` (repeats dropped); ValueError naming
    ``--metric-percentiles`` unless every item is a number in [0, 100]."""
    out: list[float] = []
    for item in (part.strip() for part in text.split(",")):
        try:
            p = float(item)
        except ValueError:
            raise ValueError(f"--metric-percentiles: {item!r} is not a number; use e.g. "
                             "50,90,99") from None
        if not 0 <= p <= 100:
            raise ValueError(f"--metric-percentiles: {item} is outside [0, 100]")
        if p not in out:
            out.append(p)
    return tuple(out)


def parse_metrics(text: str) -> tuple[str, ...]:
    """``"ttft,itl"`` -> ``("ttft", "itl")`` (repeats dropped); ValueError naming
    ``--percentile-metrics`` on an unknown or empty name."""
    out: list[str] = []
    for name in (part.strip() for part in text.split(",")):
        if name not in METRICS:
            raise ValueError(f"--percentile-metrics: unknown metric {name!r}; use "
                             f"{','.join(METRICS)}")
        if name not in out:
            out.append(name)
    return tuple(out)
