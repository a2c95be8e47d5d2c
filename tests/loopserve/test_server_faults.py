"""A batch that raises inside the server: its requests finish with an error in OpenAI's shape
(500 before the response starts, an error event in a stream), the server keeps serving, and
the metrics and the engine's records count the failure as every other driver does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai import OpenAI

from engine.core import Batch
from tests.reference import fixtures  # noqa: F401 - one torch thread, as the other engine tests
from tests.server_helpers import Running, running_server


def _fail_next_batch(srv: Running) -> list[int]:
    """Make the runner raise on the next batch it executes; the failed steps' numbers."""
    runner = srv.service.engine.runner
    real: Callable[[Batch], Any] = runner.execute
    failed: list[int] = []

    def execute(batch: Batch) -> Any:
        if not failed:
            failed.append(batch.step)
            raise RuntimeError("boom")
        return real(batch)

    runner.execute = execute  # type: ignore[method-assign]
    return failed


def test_a_failed_batch_answers_openai_errors_and_the_server_goes_on() -> None:
    with running_server(record=True) as srv:
        client = OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        failed = _fail_next_batch(srv)
        with pytest.raises(openai.InternalServerError) as err:
            client.completions.create(model="tiny", prompt=[1, 2, 3], max_tokens=4)
        assert failed and err.value.status_code == 500
        failed_steps = list(failed)
        assert err.value.body == {"message": "RuntimeError: boom", "type": "server_error",
                                  "param": None, "code": "engine_error"}

        failed = _fail_next_batch(srv)
        with pytest.raises(openai.APIError, match="RuntimeError: boom"):
            for _ in client.completions.create(model="tiny", prompt=[4, 5, 6], max_tokens=4,
                                               stream=True):
                pass
        assert failed
        failed_steps += failed

        ok = client.completions.create(model="tiny", prompt=[7, 8, 9], max_tokens=4,
                                       temperature=0)
        assert ok.choices[0].finish_reason == "length" and ok.usage is not None
        assert ok.usage.completion_tokens == 4

        assert srv.metric("loopserve:request_success_total", finished_reason="error") == 2
        assert srv.metric("loopserve:request_success_total", finished_reason="length") == 1
        srv.wait_metric("loopserve:kv_blocks_in_use", 0)
        records = srv.service.engine.records
        assert records is not None
        reasons = [r.finish_reason for r in records.requests]
        assert reasons == ["error", "error", "length"]
        steps = [s.step for s in records.steps]
        assert steps == sorted(set(steps)) and set(failed_steps) <= set(steps)
        assert len(records.tokens) == 4  # the served request's; the failed ones made none
        assert sum(s.core_calls for s in records.steps) == srv.metric("loopserve:core_calls_total")
