"""``GET /metrics``: Prometheus text (prometheus_client), vLLM's metric names under
``loopserve:``.

Engine-side times (the engine thread's clock, from a request's acceptance by the HTTP side):
``loopserve:time_to_first_token_seconds``, ``loopserve:inter_token_latency_seconds`` and
``loopserve:e2e_request_latency_seconds`` histograms; gauges ``loopserve:num_requests_running``,
``loopserve:num_requests_waiting``, ``loopserve:kv_cache_usage_perc`` and
``loopserve:kv_blocks_in_use``; counters ``loopserve:prompt_tokens_total``,
``loopserve:generation_tokens_total``, ``loopserve:request_success_total`` (label
``finished_reason``: stop | length | abort | error), ``loopserve:core_calls_total`` and
``loopserve:mixed_core_calls_total`` (core calls that carried prompt and decode rows
together), and vLLM's prefix-cache counters ``loopserve:prefix_cache_queries`` and
``loopserve:prefix_cache_hits`` (prompt tokens looked up at admission and found cached;
0 with ``cache.enable_prefix_caching`` off). Every series has a ``model_name`` label.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from engine.core.request import Request

# vLLM's buckets with finer ones below 10 ms added: a CPU or GPU token interval lives there.
_FINE = [0.0005, 0.001, 0.0025, 0.005, 0.0075]
TTFT_BUCKETS = [*_FINE, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [*_FINE, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
               2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
E2E_BUCKETS = [0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
               30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
FINISH_REASONS = ("stop", "length", "abort", "error")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ServerMetrics:
    """One registry per server (several servers can live in one process, as in tests)."""

    def __init__(self, model_name: str, num_blocks: int) -> None:
        self.registry = r = CollectorRegistry()
        self.num_blocks = num_blocks
        m = ["model_name"]
        label = {"model_name": model_name}

        def hist(name: str, doc: str, buckets: list[float]) -> Histogram:
            return Histogram(name, doc, m, buckets=buckets, registry=r).labels(**label)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, m, registry=r).labels(**label)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, m, registry=r).labels(**label)

        self.ttft = hist("loopserve:time_to_first_token_seconds",
                         "Time to first token (engine side, from acceptance).", TTFT_BUCKETS)
        self.itl = hist("loopserve:inter_token_latency_seconds",
                        "Gap between consecutive tokens of a request.", ITL_BUCKETS)
        self.e2e = hist("loopserve:e2e_request_latency_seconds",
                        "Acceptance to finish of a request.", E2E_BUCKETS)
        self.running = gauge("loopserve:num_requests_running", "Requests admitted to the core.")
        self.waiting = gauge("loopserve:num_requests_waiting", "Requests waiting for admission.")
        self.kv_usage = gauge("loopserve:kv_cache_usage_perc", "KV blocks in use, 0 to 1.")
        self.kv_blocks = gauge("loopserve:kv_blocks_in_use", "KV blocks in use.")
        self.prompt_tokens = counter("loopserve:prompt_tokens", "Prompt tokens of finished "
                                     "requests.")
        self.generation_tokens = counter("loopserve:generation_tokens", "Generated tokens.")
        self.core_calls = counter("loopserve:core_calls", "Recurrent core calls executed.")
        self.mixed_core_calls = counter("loopserve:mixed_core_calls",
                                        "Core calls with prompt and decode rows together.")
        self.prefix_queries = counter("loopserve:prefix_cache_queries",
                                      "Prompt tokens looked up in the prefix cache.")
        self.prefix_hits = counter("loopserve:prefix_cache_hits",
                                   "Prompt tokens found in the prefix cache.")
        self._prefix_seen = (0, 0)
        success = Counter("loopserve:request_success", "Finished requests by reason.",
                          [*m, "finished_reason"], registry=r)
        self.finished = {reason: success.labels(model_name=model_name, finished_reason=reason)
                         for reason in FINISH_REASONS}

    def step(self, core_calls: int, mixed: bool, num_tokens: int) -> None:
        if core_calls:
            self.core_calls.inc(core_calls)
            if mixed:
                self.mixed_core_calls.inc(1)
        if num_tokens:
            self.generation_tokens.inc(num_tokens)

    def token_gaps(self, ttfts: Iterable[float], itls: Iterable[float]) -> None:
        for t in ttfts:
            self.ttft.observe(t)
        for t in itls:
            self.itl.observe(t)

    def finish(self, req: Request) -> None:
        self.finished[req.finish_reason or "error"].inc()
        self.prompt_tokens.inc(req.num_prompt_tokens)
        if req.finish_s is not None and req.finish_reason in ("stop", "length"):
            self.e2e.observe(max(0.0, req.finish_s - req.arrival_s))

    def occupancy(self, running: int, waiting: int, used_blocks: int) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_blocks.set(used_blocks)
        self.kv_usage.set(used_blocks / self.num_blocks if self.num_blocks else 0.0)

    def prefix_cache(self, queried_tokens: int, hit_tokens: int) -> None:
        """The engine's running totals; the counters advance by what is new."""
        q0, h0 = self._prefix_seen
        if queried_tokens > q0:
            self.prefix_queries.inc(queried_tokens - q0)
        if hit_tokens > h0:
            self.prefix_hits.inc(hit_tokens - h0)
        self._prefix_seen = (queried_tokens, hit_tokens)

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
