"""``loopserve fidelity``'s pieces: both worlds' runs (``world``: ``WorldRun``, the simulated
world; ``measured``: the real one, torch), their comparison (``compare``, the fidelity.json
document) with its sections (``arm_errors``, ``batches``, ``exits``, ``tail``, ``targets``;
``machine``: the measured machine's own drift, the one place fidelity handles it), and the
report (``report``)."""
