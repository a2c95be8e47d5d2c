"""``loopserve exit-profile``: measure the model's own exit gates for the simulator.

    loopserve exit-profile --target cpu|cuda --model PRESET_OR_DIR [--out FILE.json]
                           [--prompts FILE] [--num-prompts N] [--max-tokens N] [--seed N]
                           [--regimes ouro@0.5,...|none]
    loopserve exit-profile --target cpu|cuda --scenario SCENARIO.yaml [--repeats N]
                           [--independent]

Runs the real model over a prompt set (generated random-token prompts by default, the right
thing for random-weight presets; ``--prompts`` a ShareGPT-format JSON file, whose human
turns are used, or a text file, one prompt per non-empty line, tokenized with the
checkpoint's tokenizer; ``--scenario`` the requests the scenario's own workload submits, drawn
as its repeats draw them or, ``--independent``, with other seeds) with every token going all D
loops, and writes each decode token's gate values λ_0..λ_{D-1} (``sim.exit_profile``). Then
once more per exit policy of ``--regimes`` (default ouro at thresholds 0.5-0.9; with
``--scenario`` the scenario's own policy and cache layout) with the exits on, keeping each
token's signal at the depths it ran: a simulation of that policy draws those rows
(``sim.exit_regime``). Default output:
``results/profiles/<hardware>-<model>.exits.json``, the sibling a calibrated cost profile of
the same name picks up (``<hardware>-<model>.<scenario>.exits.json`` with ``--scenario``,
which the scenario names as ``exit.profile``). The file appears complete or not at all.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from engine.core.config import ExitConfig
from engine.core.guarded_read import FileReadError, parse_json, read_text
from loopserve.commands import command_help
from loopserve.commands.args import real_target
from loopserve.errors import UserError
from loopserve.outputs.files import atomic_write, check_writable
from loopserve.runs import interrupts
from loopserve.schema.exit_spec import SIGNAL_EXIT_MODES as SIGNAL_MODES
from loopserve.schema.scenario import Scenario
from loopserve.targets.load import check_real
from sim.cost.resolve import PROFILES_DIR, model_label
from sim.exit_profile import exit_profile_json

DEFAULT_REGIMES = "ouro@0.5,ouro@0.6,ouro@0.7,ouro@0.8,ouro@0.9"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``exit-profile`` on the CLI's subparsers."""
    p = sub.add_parser("exit-profile", help=command_help("exit-profile"))
    p.add_argument("--target", required=True, help="cpu | cuda")
    p.add_argument("--model", help="model preset name or checkpoint directory (default: the "
                   "scenario's with --scenario; required otherwise)")
    p.add_argument("--scenario", help="measure on this scenario's workload and exit policy")
    p.add_argument("--repeats", type=int, help="with --scenario: workload draws to measure "
                   "(default the scenario's repeats; each is the draw that repeat runs)")
    p.add_argument("--independent", action="store_true", help="with --scenario: draw the "
                   "workload with other seeds than its runs use (no simulated token then "
                   "replays its own measured row)")
    p.add_argument("--regimes", help="exit policies to measure with the exits on, MODE@THRESHOLD "
                   f"comma-separated, or none (default {DEFAULT_REGIMES}; with --scenario its "
                   "own policy)")
    p.add_argument("--out", help="output .json (default results/profiles/<hw>-<model>.exits.json)")
    p.add_argument("--prompts", help="ShareGPT-format JSON or a text file (one prompt a line)")
    p.add_argument("--num-prompts", type=int, default=96, help="prompts to run (default 96: a "
                   "request's tokens exit alike, so the prompts are the sample size; with 24, "
                   "resampling them moved the exit mix by TV 0.10-0.16 at p95, "
                   "docs/exit-profiles.md)")
    p.add_argument("--max-tokens", type=int, default=48, help="output tokens each (default 48)")
    p.add_argument("--seed", type=int, help="weights and prompt seed (default 0; with "
                   "--scenario the scenario's)")
    p.add_argument("--lookahead-seed", type=int, default=0,
                   help="random_lookahead head seed to record scores for (default 0)")
    p.add_argument("--threads", type=int, default=1, help="CPU torch threads (default 1)")
    p.set_defaults(handler=main)


def _prompt_texts(path: Path) -> list[str]:
    try:
        text = read_text(path)
        data = parse_json(text, path) if path.suffix == ".json" else None
    except FileReadError as exc:
        raise UserError("--prompts", str(exc)) from None
    if path.suffix == ".json":
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


def parse_regimes(text: str, lookahead_seed: int) -> list[ExitConfig]:
    """``MODE@THRESHOLD,...`` (or ``none``) as exit configs; UserError naming --regimes."""
    if text.strip() == "none":
        return []
    out = []
    for item in text.split(","):
        mode, at, value = item.strip().partition("@")
        if mode not in SIGNAL_MODES or not at:
            raise UserError("--regimes", f"{item.strip()!r}: write MODE@THRESHOLD with MODE one "
                            f"of {'|'.join(SIGNAL_MODES)}, e.g. ouro@0.8 (or none)")
        try:
            threshold = float(value)
        except ValueError:
            raise UserError("--regimes", f"{item.strip()!r}: the threshold must be a number, "
                            "e.g. ouro@0.8") from None
        if not 0.0 <= threshold <= 1.0 and mode != "random_lookahead":
            raise UserError("--regimes", f"{item.strip()!r}: a gate threshold lies in [0, 1]")
        cfg = ExitConfig(mode=mode, exit_threshold=threshold, seed=lookahead_seed)  # type: ignore[arg-type]
        if cfg in out:
            raise UserError("--regimes", f"{item.strip()!r} is listed twice")
        out.append(cfg)
    return out


def _scenario_workload(scn: Scenario, repeats: int, independent: bool, vocab_size: int
                       ) -> tuple[list[list[int]], list[int], list[tuple[int, str]], str]:
    """Every request the scenario's workload submits in each of ``repeats`` runs (its repeat
    seeds; ``independent``: other seeds, so no row is a simulated token's own): prompts,
    output lengths, (seed, request id) per prompt, and a provenance line."""
    from engine.core.exits import stable_seed
    from loopserve.plan.sweep import repeat_seed

    prompts, counts, sources = [], [], []
    seeds = [stable_seed(scn.seed, "exit-profile", r) >> 1 if independent
             else repeat_seed(scn.seed, r) for r in range(repeats)]
    for seed in seeds:
        for spec in scn.workload.build(seed=seed, vocab_size=vocab_size,
                                       exit_trace=None).all_specs():
            prompts.append(list(spec.prompt_token_ids))
            counts.append(spec.params.max_tokens)
            sources.append((seed, spec.request_id))
    which = "independent seeds" if independent else "the seeds its repeats run"
    return prompts, counts, sources, (f"scenario {scn.name}: its {scn.workload.kind} workload, "
                                      f"{len(prompts)} requests from {repeats} draws ({which})")


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Validate, measure, write; UserError on bad input (exit 2 by the CLI)."""
    started = time.time()
    real_target(args.target)
    for flag, value in (("--num-prompts", args.num_prompts), ("--max-tokens", args.max_tokens),
                        ("--threads", args.threads)):
        if value < 1:
            raise UserError(flag, f"must be >= 1, got {value}")
    if args.max_tokens < 2:
        raise UserError("--max-tokens", "must be >= 2 (the first token always runs all loops)")
    out = Path(args.out).resolve() if args.out else None
    if out is not None and out.suffix != ".json":
        raise UserError("--out", f"{out}: name a .json file")
    if out is not None and out.is_dir():
        raise UserError("--out", f"{out} is a folder; name a .json file")
    check_writable(out or PROFILES_DIR / "x.json", "--out")  # before the measuring
    if args.scenario is None and args.model is None:
        raise UserError("--model", "is required (a preset or checkpoint directory), or give "
                        "--scenario to measure on a scenario's model and workload")
    if args.scenario is not None and args.prompts:
        raise UserError("--prompts", "cannot be combined with --scenario (which brings its "
                        "own workload); drop one")
    if args.scenario is not None and args.seed is not None:
        raise UserError("--seed", "cannot be combined with --scenario (its weights and "
                        "workload follow the scenario's seed); drop --seed or set seed in it")
    for flag, given in (("--repeats", args.repeats is not None),
                        ("--independent", args.independent)):
        if given and args.scenario is None:
            raise UserError(flag, "only applies with --scenario")
    if args.repeats is not None and args.repeats < 1:
        raise UserError("--repeats", f"must be >= 1, got {args.repeats}")
    regimes = parse_regimes(args.regimes or ("none" if args.scenario else DEFAULT_REGIMES),
                            args.lookahead_seed)
    check_real(args.target)
    with interrupts.importing():
        from loopserve.calibrate.exits import generated_prompts, hardware_of, measure_exit_profile
        from loopserve.schema.build import exit_config, model_shape

    layout, counts, scn, sources = "last_exited", None, None, None
    if args.scenario is not None:
        from loopserve.schema.load import load_scenario

        scn = load_scenario(args.scenario, [])
    model = args.model if scn is None else args.model or scn.model
    try:
        shape = model_shape(model)
    except UserError as err:
        raise UserError("--model", err.message) from None
    if scn is not None:
        prompts, counts, sources, source = _scenario_workload(
            scn, args.repeats or scn.repeats, args.independent, shape.vocab_size)
        own = exit_config(scn)
        if own.mode not in SIGNAL_MODES:
            raise UserError("--scenario", f"{scn.name} uses exit mode {own.mode}, which reads "
                            "no gate; measure a scenario whose exit.mode is one of "
                            f"{'|'.join(SIGNAL_MODES)}")
        regimes = [own, *(r for r in regimes if r != own)]
        layout = scn.cache.layout
    if args.prompts:
        from engine.tokenizer import load_tokenizer

        texts = _prompt_texts(Path(args.prompts))[: args.num_prompts]
        try:
            tok = load_tokenizer(model, shape.vocab_size)
        except ValueError as err:
            raise UserError("--model", str(err)) from None
        prompts = [tok.encode(t)[-512:] or [1] for t in texts]
        source = f"file: {Path(args.prompts).name} ({len(prompts)} prompts, {type(tok).__name__})"
    elif scn is None:
        prompts = generated_prompts(args.num_prompts, shape.vocab_size, args.seed or 0)
        source = (f"generated: {len(prompts)} random-token prompts of 16-128 tokens, seed "
                  f"{args.seed or 0}")
    try:
        prof = measure_exit_profile(
            model=model, prompts=prompts, prompt_source=source,
            max_tokens=counts if counts is not None else args.max_tokens,
            target=args.target, seed=scn.seed if scn is not None else args.seed or 0,
            lookahead_seed=args.lookahead_seed,
            threads=args.threads, command=argv, regimes=regimes, layout=layout,
            sources=sources)
    except (ValueError, OSError, KeyError) as err:
        raise UserError.from_value_error(ValueError(str(err)), "--model") from None
    hw = hardware_of(args.target)
    name = f"{hw}-{model_label(model)}" + (f".{scn.name}" if scn is not None else "")
    if args.independent:
        name += ".independent"
    dest = out or PROFILES_DIR / f"{name}.exits.json"
    atomic_write(dest, exit_profile_json(prof))
    labels = ", ".join(r.label for r in prof.regimes or ()) or "none"
    print(f"exit profile: {dest}  ({prof.provenance.num_tokens} tokens; regimes: {labels}; "
          f"{time.time() - started:.1f} s)")
    return 0
