"""Runs of a scenario: planning (``plan``: points, configs, cost models, sources, all
validated before anything runs), the loop over points, repeats and arms (``loop``), the sweep
grid (``sweep``), per-run metrics (``metrics``) and summary.json's rows (``summary``)."""
