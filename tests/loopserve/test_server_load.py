"""The server under load (bounded, loopback): mass disconnects free everything at once, and
overload answers only 200 or 503 with every 200 complete."""

from __future__ import annotations

import asyncio
import threading

import httpx2
from openai import AsyncOpenAI

from tests.reference import fixtures  # noqa: F401 - one torch thread, as the other engine tests
from tests.server_helpers import Running, running_server


def _steps(srv: Running) -> int:
    return srv.service.engine.core._next_step  # noqa: SLF001 - the engine's step counter


def test_48_streams_with_a_third_dropped_after_two_chunks() -> None:
    with running_server(max_num_seqs=48) as srv:
        aborts: list[tuple[str, int]] = []  # (request id, engine step when the core let go)

        class Watched:
            """The engine thread's view of its core, noting each abort (the compiled core's
            methods cannot be patched)."""

            def __init__(self, core: object) -> None:
                self.core = core

            def __getattr__(self, name: str) -> object:
                return getattr(self.core, name)

            def abort(self, request_id: str, reason: str = "abort") -> bool:
                done = self.core.abort(request_id, reason)  # type: ignore[attr-defined]
                if done and reason == "abort":
                    aborts.append((request_id, _steps(srv)))
                return bool(done)

        srv.service.engine.core = Watched(srv.service.engine.core)  # type: ignore[assignment]
        drops: list[int] = []  # engine step when each dropping client closed

        async def one(client: AsyncOpenAI, i: int) -> tuple[bool, int, int | None]:
            drop = i % 3 == 0
            want = 400 if drop else 6 + i % 9
            stream = await client.completions.create(
                model="tiny", prompt=[i % 60 + 1, 2, 3, 4], max_tokens=want, temperature=0,
                stream=True, stream_options={"include_usage": True})
            n, used = 0, None
            async for c in stream:
                n += bool(c.choices)
                used = c.usage.completion_tokens if c.usage else used
                if drop and n == 2:
                    await stream.close()
                    drops.append(_steps(srv))
                    return True, want, None
            return False, want, used if used == n else -1

        async def main() -> list[tuple[bool, int, int | None]]:
            client = AsyncOpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
            try:
                return await asyncio.wait_for(
                    asyncio.gather(*(one(client, i) for i in range(48))), timeout=120)
            finally:
                await client.close()

        results = asyncio.run(main())
        kept = [(want, used) for dropped, want, used in results if not dropped]
        assert len(kept) == 32 and all(used == want for want, used in kept)
        srv.wait_metric("loopserve:num_requests_running", 0)
        srv.wait_metric("loopserve:kv_blocks_in_use", 0)
        assert srv.metric("loopserve:num_requests_waiting") == 0
        assert len(aborts) == 16 and len(drops) == 16
        # every dropped request left the core within a step of its client's close
        assert max(step for _, step in aborts) <= max(drops) + 1
        assert srv.service.in_flight == 0


def test_30_simultaneous_requests_get_200_or_503_and_every_200_is_complete() -> None:
    with running_server(max_num_seqs=2, max_waiting=3) as srv:
        results: list[tuple[int, str | None, str]] = []
        lock = threading.Lock()
        start = threading.Barrier(30)

        def one(i: int) -> None:
            stream = i % 2 == 0
            body = {"prompt": [i + 1, 2, 3], "max_tokens": 12, "temperature": 0,
                    "stream": stream, "stream_options": {"include_usage": True} if stream
                    else None}
            start.wait()
            with httpx2.Client(timeout=120) as c:
                r = c.post(srv.url + "/v1/completions",
                           json={k: v for k, v in body.items() if v is not None})
            with lock:
                results.append((r.status_code, r.headers.get("retry-after"), r.text))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert len(results) == 30
        assert {s for s, _, _ in results} <= {200, 503}
        ok = [text for s, _, text in results if s == 200]
        busy = [(h, text) for s, h, text in results if s == 503]
        assert busy and len(ok) >= 3
        assert all(h == "1" and '"code":"overloaded"' in text for h, text in busy)
        for text in ok:
            if text.startswith("data: "):
                events = text.strip().split("\n\n")
                assert events[-1] == "data: [DONE]"
                assert sum('"finish_reason":null' in e for e in events) == 11
                assert '"completion_tokens":12' in events[-2]
            else:
                assert '"completion_tokens":12' in text and '"finish_reason":"length"' in text
        srv.wait_metric("loopserve:kv_blocks_in_use", 0)
        srv.wait_metric("loopserve:num_requests_waiting", 0)
