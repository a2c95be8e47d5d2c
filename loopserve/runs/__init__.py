"""Execution of a plan (``loopserve.plan``): the loop over its runs on their target
(``loop``), the same runs as Ray tasks (``ray_runs``, records across processes by
``record_pickling``), signal handling (``interrupts``), and the capacity search and its
probes (``capacity``, ``capacity_probe``)."""
