"""`loopserve bench serve` on faults and bad input: every network wait times out, a bad
stream or `/v1/models` is one line naming the URL, nothing listening or a malformed URL is
exit 2, no success is exit 1, a cut stream is a failure, the result's destination is checked
before any request, and dataset files that are not regular, too large, not UTF-8 or nested
too deeply are one line naming the file."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopserve.bench import datasets
from loopserve.bench.stub import Stub, running_stub
from loopserve.cli import main

RANDOM = ["--dataset-name", "random", "--random-input-len", "6", "--random-output-len", "3",
          "--no-progress"]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["bench", "serve", *argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") <= 1, err
    return rc, err.strip()


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A socket that accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_a_server_that_never_answers_times_out(silent_listener: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    t = time.monotonic()
    rc, err = _run(["--base-url", silent_listener, *RANDOM, "--read-timeout", "0.5"], capsys)
    assert rc == 2 and time.monotonic() - t < 10
    assert err == (f"loopserve: error: --base-url: {silent_listener}/v1/models did not answer "
                   "within 0.5 s (--read-timeout)")


def test_requests_that_hang_fail_after_the_read_timeout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = time.monotonic()
    with running_stub(Stub(fault="hang")) as url:
        rc, err = _run(["--base-url", url, *RANDOM, "--num-prompts", "3", "--read-timeout",
                        "0.5", "--result-file", str(tmp_path / "r.json")], capsys)
    assert rc == 1 and time.monotonic() - t < 10
    assert err == (f"loopserve: bench serve: no request succeeded; first error: {url}"
                   "/v1/completions: no answer within 0.5 s (--read-timeout)")
    assert json.loads((tmp_path / "r.json").read_text())["failed"] == 3


@pytest.mark.parametrize(("fault", "message"), [
    ("malformed", "malformed SSE event b'{\"choices\": ['"),
    ("not-object", "malformed SSE event b'5'"),
    ("cut", "the stream ended without a finish reason or [DONE]"),
])
@pytest.mark.parametrize("backend", ["openai", "openai-chat"])
def test_bad_streams_fail_the_request_in_one_line(
        fault: str, message: str, backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    with running_stub(Stub(fault=fault)) as url:
        rc, err = _run(["--base-url", url, *RANDOM, "--num-prompts", "2", "--backend",
                        backend], capsys)
    endpoint = "/v1/chat/completions" if backend == "openai-chat" else "/v1/completions"
    assert rc == 1
    assert err == (f"loopserve: bench serve: no request succeeded; first error: {url}"
                   f"{endpoint}: {message}")


@pytest.mark.parametrize("fault", ["models-empty", "models-html"])
def test_a_bad_models_list_names_the_url(fault: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    stub = Stub(fault=fault)
    with running_stub(stub) as url:
        rc, err = _run(["--base-url", url, *RANDOM], capsys)
        assert rc == 2 and err.startswith(
            f"loopserve: error: --base-url: {url}/v1/models answered no model id")
        assert "--goodput" not in err and stub.received == []
        rc, _ = _run(["--base-url", url, "--model", "stub", *RANDOM, "--num-prompts", "1"],
                     capsys)
        assert rc == 0  # with --model the list is not needed


@pytest.mark.parametrize(("url", "message"), [
    ("http://127.0.0.1:9", "nothing answers at http://127.0.0.1:9 ("),
    ("localhost:8000", "'localhost:8000' is not an http(s) URL"),
    ("htp://127.0.0.1:8000", "'htp://127.0.0.1:8000' is not an http(s) URL"),
    ("http://:80", "'http://:80' is not an http(s) URL"),
    ("http://127.0.0.1:99999", "'http://127.0.0.1:99999' is not an http(s) URL (Port out of"),
])
def test_nothing_listening_or_a_malformed_url_is_exit_2(
        url: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _run(["--base-url", url, "--model", "m", *RANDOM], capsys)
    assert rc == 2 and err.startswith(f"loopserve: error: --base-url: {message}"), err


def test_every_base_url_is_probed_first(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with running_stub(Stub()) as good:
        rc, err = _run(["--base-url", good, "--base-url", "http://127.0.0.1:9", "--model",
                        "stub", *RANDOM, "--num-prompts", "2"], capsys)
    assert rc == 2 and "nothing answers at http://127.0.0.1:9" in err  # probed first


@pytest.mark.parametrize("case", ["file-is-dir", "dir-is-file", "under-a-file"])
def test_result_destinations_are_checked_before_any_request(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    flags = {"file-is-dir": ["--result-file", str(tmp_path / "dir")],
             "dir-is-file": ["--result-dir", str(tmp_path / "file")],
             "under-a-file": ["--result-file", str(tmp_path / "file" / "r.json")]}[case]
    stub = Stub()
    with running_stub(stub) as url:
        rc, err = _run(["--base-url", url, *RANDOM, "--num-prompts", "2", *flags], capsys)
    assert rc == 2 and err.startswith(f"loopserve: error: {flags[0]}: "), err
    assert stub.received == [] and (tmp_path / "file").read_text() == "x"


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "fifo")
    return tmp / "fifo"


@pytest.mark.parametrize(("make", "message"), [
    (_fifo, "is not a regular file"),
    (lambda tmp: Path("/dev/zero"), "/dev/zero is not a regular file"),
    (lambda tmp: tmp, "(Is a directory)"),
    (lambda tmp: tmp / "absent.json", "cannot read"),
    (lambda tmp: (tmp / "big.json").write_text("[" + " " * 5000 + "]") and tmp / "big.json",
     "has 5002 bytes, over the limit of 5000"),
    (lambda tmp: (tmp / "deep.json").write_text("[" * 2400 + "]" * 2400)
     and tmp / "deep.json", "deep.json nests JSON too deeply"),
    (lambda tmp: (tmp / "latin.json").write_bytes(b'["\xe9"]') and tmp / "latin.json",
     "latin.json is not UTF-8 (byte 2)"),
    (lambda tmp: (tmp / "trunc.json").write_text('[{"a":') and tmp / "trunc.json",
     "trunc.json is not valid JSON (line 1 column 7"),
])
def test_dataset_files_pass_one_guard(make: object, message: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(datasets, "MAX_DATASET_BYTES", 5000)
    path = make(tmp_path)  # type: ignore[operator]
    t = time.monotonic()
    with running_stub(Stub()) as url:
        rc, err = _run(["--base-url", url, "--dataset-name", "sharegpt", "--dataset-path",
                        str(path), "--no-progress"], capsys)
    assert rc == 2 and err.startswith("loopserve: error: --dataset-path: ") and message in err
    assert time.monotonic() - t < 10 and len(err) < 300, err


def test_deep_json_is_refused_even_under_a_raised_recursion_limit(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text("[" * 2400 + "]" * 2400)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)  # as some libraries do on import
    try:
        with pytest.raises(ValueError, match="^--dataset-path: .*deep.json nests JSON too dee"):
            datasets.read_json_file(tmp_path / "deep.json", "--dataset-path")
        assert sys.getrecursionlimit() == 100_000
    finally:
        sys.setrecursionlimit(old)
