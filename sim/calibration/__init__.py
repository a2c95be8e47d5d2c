"""Calibration of the ``calibrated`` cost model (DESIGN.md §9).

``shapes`` (the forced batch grid), ``fit`` (pure numpy fitting) and ``resolve`` (finding a
checked-in profile) import no torch; ``measure``, ``host_gap`` and ``job`` drive the real
runner and are imported only by ``loopserve calibrate`` and ``loopserve fidelity``.
"""
