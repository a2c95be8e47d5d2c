"""The SimPy simulator: driver, cost models, exit signals and run validity.

Importing ``sim`` never imports torch. The per-step modules (driver, step clock, exit model,
roofline cost) load from the mypyc build when it is fresh: ``engine.core`` is imported before
any of them, which installs the build (``engine/_native.py``, requirement 2).
"""

import engine.core  # noqa: F401  (first: installs the build; engine/_native.py, requirement 2)
from engine.core.shapes import MODEL_SHAPES, get_shape
from sim.cost import CostModel, make_cost_model
from sim.driver import simulate
from sim.errors import SimulationDeadlock
from sim.exit_model import make_signal_fn
from sim.validity import NO_MIXED_CALL, check, injection_problem

__all__ = [
    "MODEL_SHAPES",
    "NO_MIXED_CALL",
    "CostModel",
    "SimulationDeadlock",
    "check",
    "get_shape",
    "injection_problem",
    "make_cost_model",
    "make_signal_fn",
    "simulate",
]
