"""``loopserve serve``: the OpenAI-compatible HTTP server over the real engine."""
