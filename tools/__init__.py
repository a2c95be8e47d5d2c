"""Developer tools (benchmarks); run as ``python -m tools.<name>`` from the repo root."""
