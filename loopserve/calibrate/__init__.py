"""The torch-using half of calibration (docs/design.md): time the real runner on forced shapes
(``measure``), the host gap between real steps (``host_gap``), one whole calibration
(``job``). The host allocator setting it shares with real runs is
``engine.host_allocator``.

The torch-free half, the shape grid, fitting and finding a checked-in profile, lives in
``sim.cost`` (``shape_grid``, ``fit``, ``resolve``), so the simulator never needs this
package. Imported only when a calibration or a real target is asked for.
"""
