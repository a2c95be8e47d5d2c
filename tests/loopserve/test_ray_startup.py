"""Ray's own start-up failures (a bare Exception on a start-up timeout) become one line
naming the flag, with the driver's signal handlers restored."""

from __future__ import annotations

import signal
import types

import pytest

from loopserve.errors import UserError
from loopserve.runs import ray_runs
from loopserve.runs.ray_runs import RayOptions, ray_session

TIMEOUT_TEXT = ("The current node timed out during startup. This could happen because some "
                "of the raylet failed to startup or the GCS has become overloaded.\n"
                "  (and many more lines)")


def test_a_start_up_timeout_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def init(**kwargs: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # ray.init installs its own
        raise Exception(TIMEOUT_TEXT)  # noqa: TRY002 - what Ray raises

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setattr(ray_runs, "require_ray", lambda flag: fake)
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(UserError) as err, ray_session(RayOptions(workers=2)):
        pass
    text = str(err.value)
    assert text.startswith("--workers: could not start Ray (Exception): The current node timed")
    assert len(text.splitlines()) == 1 and "many more lines" not in text
    assert signal.getsignal(signal.SIGTERM) == handler
