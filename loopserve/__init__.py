"""loopserve: the user-facing layer (scenarios, CLI, runs, outputs, plots, report).

``cli`` parses and dispatches to ``commands``; ``schema`` and ``workloads`` read scenarios;
``runs`` plans and executes them on a ``targets`` target; ``outputs`` writes and reads run
folders; ``report`` renders them; ``fidelity`` and ``calibrate`` compare the simulator with
the real engine. Imports sit at module tops; torch loads only when a real target or a
calibration is asked for (``loopserve.targets.load``, ``loopserve.commands``).
"""

__version__ = "0.1.0"
