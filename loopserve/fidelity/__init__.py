"""``loopserve fidelity``'s pieces: both worlds' runs (``world``: ``WorldRun``, the simulated
world; ``measured``: the real one, torch), their comparison (``compare``, the fidelity.json
document) with its sections (``batches``, ``drift``, ``tail``, ``targets``), and the report
(``report``)."""
