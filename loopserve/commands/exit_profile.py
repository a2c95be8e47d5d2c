"""``loopserve exit-profile``: measure the model's own exit gates for the simulator.

    loopserve exit-profile --target cpu|cuda --model PRESET_OR_DIR [--out FILE.json]
                           [--prompts FILE] [--num-prompts N] [--max-tokens N] [--seed N]

Runs the real model over a prompt set (generated random-token prompts by default, the right
thing for random-weight presets; ``--prompts`` a ShareGPT-format JSON file, whose human
turns are used, or a text file, one prompt per non-empty line, tokenized with the
checkpoint's tokenizer) with every token going all D loops, and writes each decode token's
gate values λ_0..λ_{D-1} (``sim.exit_profile``). Default output:
``results/profiles/<hardware>-<model>.exits.json``, the sibling a calibrated cost profile of
the same name picks up. The file appears complete or not at all.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from loopserve.errors import UserError
from loopserve.outputs.files import atomic_write
from loopserve.targets.load import check_real
from sim.cost.resolve import PROFILES_DIR, model_label
from sim.exit_profile import exit_profile_json


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``exit-profile`` on the CLI's subparsers."""
    p = sub.add_parser("exit-profile", help="measure per-token exit gates for the simulator")
    p.add_argument("--target", required=True, help="cpu | cuda")
    p.add_argument("--model", required=True, help="model preset name or checkpoint directory")
    p.add_argument("--out", help="output .json (default results/profiles/<hw>-<model>.exits.json)")
    p.add_argument("--prompts", help="ShareGPT-format JSON or a text file (one prompt a line)")
    p.add_argument("--num-prompts", type=int, default=24, help="prompts to run (default 24)")
    p.add_argument("--max-tokens", type=int, default=64, help="output tokens each (default 64)")
    p.add_argument("--seed", type=int, default=0, help="weights and prompt seed (default 0)")
    p.add_argument("--lookahead-seed", type=int, default=0,
                   help="random_lookahead head seed to record scores for (default 0)")
    p.add_argument("--threads", type=int, default=1, help="CPU torch threads (default 1)")
    p.set_defaults(handler=main)


def _prompt_texts(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError("--prompts", f"cannot read {path} ({exc.strerror or exc})") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError("--prompts", f"{path} is not valid JSON (line {exc.lineno})") from None
        turns = (e.get("conversations") for e in data if isinstance(e, dict)) \
            if isinstance(data, list) else iter(())
        out = [t[0]["value"] for t in turns if isinstance(t, list) and t
               and isinstance(t[0], dict) and t[0].get("from") == "human"
               and isinstance(t[0].get("value"), str) and t[0]["value"].strip()]
    else:
        out = [line for line in text.splitlines() if line.strip()]
    if not out:
        raise UserError("--prompts", f"{path} holds no prompts (ShareGPT human turns, or "
                        "one prompt a line)")
    return out


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Validate, measure, write; UserError on bad input (exit 2 by the CLI)."""
    started = time.time()
    if args.target not in ("cpu", "cuda"):
        raise UserError("--target", f"unknown target {args.target!r}; use cpu or cuda")
    for flag, value in (("--num-prompts", args.num_prompts), ("--max-tokens", args.max_tokens),
                        ("--threads", args.threads)):
        if value < 1:
            raise UserError(flag, f"must be >= 1, got {value}")
    if args.max_tokens < 2:
        raise UserError("--max-tokens", "must be >= 2 (the first token always runs all loops)")
    out = Path(args.out) if args.out else None
    if out is not None and out.suffix != ".json":
        raise UserError("--out", f"{out}: name a .json file")
    check_real(args.target)
    from loopserve.calibrate.exits import generated_prompts, hardware_of, measure_exit_profile
    from loopserve.schema.build import model_shape

    try:
        shape = model_shape(args.model)
    except UserError as err:
        raise UserError("--model", err.message) from None
    if args.prompts:
        from loopserve.server.tokenizer import load_tokenizer

        texts = _prompt_texts(Path(args.prompts))[: args.num_prompts]
        try:
            tok = load_tokenizer(args.model, shape.vocab_size)
        except ValueError as err:
            raise UserError("--model", str(err)) from None
        prompts = [tok.encode(t)[-512:] or [1] for t in texts]
        source = f"file: {Path(args.prompts).name} ({len(prompts)} prompts, {type(tok).__name__})"
    else:
        prompts = generated_prompts(args.num_prompts, shape.vocab_size, args.seed)
        source = (f"generated: {len(prompts)} random-token prompts of 16-128 tokens, seed "
                  f"{args.seed}")
    try:
        prof = measure_exit_profile(
            model=args.model, prompts=prompts, prompt_source=source, max_tokens=args.max_tokens,
            target=args.target, seed=args.seed, lookahead_seed=args.lookahead_seed,
            threads=args.threads, command=argv)
    except (ValueError, OSError, KeyError) as err:
        raise UserError.from_value_error(ValueError(str(err)), "--model") from None
    hw = hardware_of(args.target)
    dest = out or PROFILES_DIR / f"{hw}-{model_label(args.model)}.exits.json"
    atomic_write(dest, exit_profile_json(prof))
    print(f"exit profile: {dest}  ({prof.provenance.num_tokens} tokens, "
          f"{time.time() - started:.1f} s)")
    return 0
