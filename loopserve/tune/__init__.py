"""``loopserve tune``: the scenario's tune space searched for the configuration with the
highest capacity under an SLO (space, search, probes, store, outputs, verification)."""
