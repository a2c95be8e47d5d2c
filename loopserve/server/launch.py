"""Build a serving stack (model, engine config, runner, tokenizer) and run it on uvicorn.

With a scenario, the engine settings are the scenario's for the chosen arm at its reference
point, exactly what ``loopserve run --target cpu|cuda`` would build (scheduler, cache, exit,
runner threads, dtype and attention backend); without one, the engine's defaults.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from engine.core.config import DEFAULT_ARM, EngineConfig
from engine.tokenizer import load_tokenizer
from loopserve.errors import UserError
from loopserve.server.app import build_app
from loopserve.server.chat_template import ChatTemplateError, load_chat_template
from loopserve.server.engine_thread import EngineThread
from loopserve.server.metrics import ServerMetrics
from loopserve.server.params import Limits
from loopserve.server.service import Service


@dataclass(frozen=True)
class ServeOptions:
    model: str
    scenario: str | None = None
    arm: str = DEFAULT_ARM
    device: str = "cpu"
    seed: int = 0
    served_model_name: str | None = None
    max_waiting: int = 1024
    max_num_seqs: int | None = None
    num_blocks: int | None = None
    enable_prefix_caching: bool = False  # vLLM's flag; with a scenario, overrides its cache
    record: bool = False  # keep the engine's records (benchmarks)
    chat_template: str | None = None  # a jinja2 file overriding the checkpoint's template
    api_key: str | None = field(default=None, repr=False)  # required on /v1/* when set


def _from_scenario(opts: ServeOptions) -> tuple[EngineConfig, Any, Any]:
    from engine.core.config import resolve_arm
    from loopserve.plan import plan_runs
    from loopserve.schema import load_scenario
    from loopserve.targets.real import RealTarget

    assert opts.scenario is not None
    model = str(Path(opts.model).resolve()) if Path(opts.model).is_dir() else opts.model
    sets = [f"model={model}", f"seed={opts.seed}"]
    if opts.enable_prefix_caching:
        sets.append("cache.enable_prefix_caching=true")
    scn = load_scenario(opts.scenario, sets)
    try:
        arm = resolve_arm(opts.arm)
    except ValueError as err:
        raise UserError("--arm", str(err).partition(": ")[2]) from None
    if arm not in scn.arms:
        scn = scn.model_copy(update={"arms": [*scn.arms, arm]})
    if scn.cluster is not None:  # a server is one replica of the fleet it describes
        scn = scn.model_copy(update={"cluster": None})
    plan = plan_runs(scn, opts.device)
    spec = next(s for s in plan.runs if s.arm == arm and s.point_id == plan.reference_point_id)
    target = RealTarget(scn, opts.device)
    return spec.cfg, target.model, target.runner(spec.cfg, opts.seed)


def _from_defaults(opts: ServeOptions) -> tuple[EngineConfig, Any, Any]:
    from engine.llm import build_runner, make_engine_config
    from engine.model.build import build_model

    try:
        model = build_model(opts.model, seed=opts.seed, device=opts.device)
    except (ValueError, OSError, KeyError) as err:
        raise UserError.from_value_error(ValueError(str(err)), "--model") from None
    kwargs: dict[str, Any] = {}
    if opts.max_num_seqs is not None:
        kwargs["max_num_seqs"] = opts.max_num_seqs
    if opts.num_blocks is not None:
        kwargs["num_blocks"] = opts.num_blocks
    if opts.enable_prefix_caching:
        kwargs["enable_prefix_caching"] = True
    try:
        cfg = make_engine_config(model, arm=opts.arm, **kwargs)
    except ValueError as err:
        raise UserError.from_value_error(err, "--arm") from None
    return cfg, model, build_runner(model, cfg, opts.device, seed=opts.seed)


def build_service(opts: ServeOptions) -> Service:
    """The model, its engine thread (not started) and the HTTP-side state."""
    if opts.max_waiting < 1:
        raise UserError("--max-waiting", f"must be >= 1, got {opts.max_waiting}")
    if opts.device == "cuda":
        from loopserve.targets.real import check_device

        check_device("cuda", "--device")
    if opts.api_key is not None and not opts.api_key.strip():
        raise UserError("--api-key", "empty; give a key or leave it unset")
    try:
        template = load_chat_template(opts.model, opts.chat_template)
    except ChatTemplateError as err:
        field_name = "--chat-template" if opts.chat_template else "--model"
        raise UserError(field_name, str(err)) from None
    cfg, model, runner = (_from_scenario if opts.scenario else _from_defaults)(opts)
    try:
        tokenizer = load_tokenizer(opts.model, cfg.model.vocab_size)
    except ValueError as err:
        raise UserError.from_value_error(err, "--model") from None
    name = opts.served_model_name or opts.model
    metrics = ServerMetrics(name, cfg.cache.num_blocks)
    engine = EngineThread(cfg, runner, metrics, record=opts.record, tokenizer=tokenizer)
    limits = Limits(name, cfg, int(model.config.max_position_embeddings))
    return Service(engine, tokenizer, limits, metrics, opts.max_waiting, template,
                   opts.api_key)


class _Server(uvicorn.Server):
    """uvicorn with a ready line on stdout, 503s once shutdown has begun, and our own grace
    period: when it is over the engine fails what is still running, so every stream ends
    with an error event and ``[DONE]`` instead of being cancelled mid-write (uvicorn's own
    cancellation, a few seconds later, is only the backstop)."""

    def __init__(self, config: uvicorn.Config, service: Service, announce: bool,
                 grace_s: float) -> None:
        super().__init__(config)
        self.service = service
        self.announce = announce
        self.grace_s = grace_s
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)
        if self.announce and self.started and sockets:
            host, port = sockets[0].getsockname()[:2]
            print(f"loopserve: serving {self.service.limits.model_name} on "
                  f"http://{host}:{port}", flush=True)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if not self.service.draining and self._loop is not None:
            self.service.draining = True
            engine, loop = self.service.engine, self._loop
            loop.call_soon_threadsafe(loop.call_later, self.grace_s, engine.abort_all,
                                      "aborted: the server shut down before it finished")
        super().handle_exit(sig, frame)


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket (port 0: an ephemeral port). The error names --host
    when the address does not resolve or is not this machine's, else --port."""
    if not 0 <= port <= 65535:
        raise UserError("--port", f"must be in 1-65535, got {port}")
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as err:
        raise UserError("--host", f"cannot resolve {host!r} ({err})") from None
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
    except OSError as err:
        sock.close()
        flag = "--host" if err.errno == errno.EADDRNOTAVAIL else "--port"
        raise UserError(flag, f"cannot bind {host}:{port} ({err.strerror or err})") from None
    return sock


def make_server(service: Service, *, shutdown_timeout_s: float = 10.0,
                announce: bool = False, log_level: str = "warning") -> uvicorn.Server:
    config = uvicorn.Config(build_app(service), log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=round(shutdown_timeout_s) + 5,
                            lifespan="on", http="httptools", loop="uvloop")
    return _Server(config, service, announce, shutdown_timeout_s)


def serve(service: Service, host: str, port: int, *, shutdown_timeout_s: float = 10.0) -> int:
    """Serve until SIGTERM or SIGINT; in-flight requests get ``shutdown_timeout_s`` to finish,
    then are aborted. Returns 0 after a signal-initiated shutdown."""
    sock = bind(host, port)
    server = make_server(service, shutdown_timeout_s=shutdown_timeout_s, announce=True)
    # uvicorn re-raises the signal it handled once it has shut down; with these handlers in
    # place the re-raised SIGTERM or SIGINT (Ctrl-C) is a no-op and the process exits 0: a
    # drained server has nothing to report as interrupted.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    # What exists now lives as long as the server: keep it out of the collector's work, so a
    # full collection cannot land mid-step (see engine/realtime.py, run_realtime).
    gc.collect()
    gc.freeze()
    try:
        server.run(sockets=[sock])
    finally:
        gc.unfreeze()
        sock.close()
    if not server.started:
        print("loopserve: error: server: failed to start (see the log above)", file=sys.stderr)
        return 1
    return 0
