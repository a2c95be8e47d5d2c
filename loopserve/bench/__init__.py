"""``loopserve bench serve``: datasets, the async HTTP client, vLLM's result keys."""
