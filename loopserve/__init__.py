"""loopserve: the user-facing layer (scenarios, CLI, runs, outputs, plots, report).

Heavy modules (pandas, matplotlib, the simulator, torch) are imported lazily by the modules
that need them, so ``import loopserve`` stays cheap.
"""

__version__ = "0.1.0"
