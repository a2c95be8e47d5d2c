"""One module per subcommand of ``loopserve``. Each registers its parser (``add_parser``) and
runs it (``main(args, argv)``); ``loopserve.cli`` parses and dispatches.

``COMMANDS`` names each subcommand's module and one-line help, in ``loopserve --help``'s order.
The CLI imports only the module of the command it runs, so ``loopserve --help`` loads no
command and ``loopserve run`` none of the server, benchmark, fidelity or calibration code.
"""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("loopserve.commands.run", "run a scenario (all arms, sweep points and repeats)"),
    "sweep": ("loopserve.commands.run",
              "like run, for a scenario that has a sweep or variants section"),
    "capacity": ("loopserve.commands.capacity",
                 "per arm, the highest request rate meeting an SLO"),
    "tune": ("loopserve.commands.tune", "the configuration of the scenario's tune space that "
             "serves the highest rate under an SLO (simulated)"),
    "report": ("loopserve.commands.report", "one report.html comparing one or more run folders"),
    "calibrate": ("loopserve.commands.calibrate",
                  "fit a calibrated cost profile on the real runner"),
    "exit-profile": ("loopserve.commands.exit_profile",
                     "measure per-token exit gates for the simulator"),
    "fidelity": ("loopserve.commands.fidelity",
                 "simulated (calibrated) vs measured on the real target"),
    "serve": ("loopserve.commands.serve", "OpenAI-compatible streaming server on the real engine"),
    "bench": ("loopserve.commands.bench_serve", "benchmarks against a running server"),
    "e2e": ("loopserve.commands.e2e", "every arm through `loopserve serve` beside the simulation"),
    "profile": ("loopserve.commands.profile",
                "host syncs under torch.profiler, per arm, over an untimed run (RFC §6)"),
}


def command_help(name: str) -> str:
    """The one-line help of subcommand ``name``."""
    return COMMANDS[name][1]
