"""The simulator's executor: results from seeded streams, no tensors, no time.

Token ids follow ``engine.core.fake_executor.FakeExecutor`` exactly (keyed by request and
position), so the simulator and the fake executor agree token for token. Gate signals come
from a ``SignalFn`` keyed by (request, position, depth), independent of how work was batched.
The step's duration is the cost model's business, not the executor's.
"""

from __future__ import annotations

from collections.abc import Callable
from hashlib import blake2b

from engine.core.batch import Batch, ItemKind
from engine.core.exits import stable_seed
from engine.core.fake_executor import SignalFn
from engine.core.request import Stage
from engine.core.results import CodaResult, RecurrentResult, StepResult

EosFn = Callable[[str, int], bool]


def _default_signal(seed: int) -> SignalFn:
    def signal(request_id: str, position: int, depth: int) -> float:
        return (stable_seed(seed, "signal", request_id, position, depth) >> 11) / float(1 << 53)

    return signal


class SimExecutor:
    """Executes batches instantly from seeded streams.

    ``signal_fn`` gives the gate signal of a decode row (default: FakeExecutor's uniform
    stream). Sampled tokens never equal ``eos_token_id`` unless ``eos_fn(request_id,
    position)`` asks for EOS there.
    """

    def __init__(
        self,
        seed: int = 0,
        vocab_size: int = 64,
        signal_fn: SignalFn | None = None,
        eos_token_id: int | None = None,
        eos_fn: EosFn | None = None,
    ) -> None:
        if vocab_size < 2:
            raise ValueError(f"vocab_size: must be >= 2, got {vocab_size!r}")
        if eos_fn is not None and eos_token_id is None:
            raise ValueError("eos_fn: needs an eos_token_id to emit")
        self.seed = seed
        self.vocab_size = vocab_size
        self.signal_fn = signal_fn or _default_signal(seed)
        self.eos_token_id = eos_token_id
        self.eos_fn = eos_fn
        self.num_signals_read = 0
        self._token_prefix: dict[str, str] = {}

    def token(self, request_id: str, position: int) -> int:
        """The token sampled for ``request_id`` at ``position`` (FakeExecutor's stream)."""
        # stable_seed(seed, "token", request_id, position) hashes repr() of that tuple; the
        # repr's request part is cached per request (a third of the cost, per token).
        prefix = self._token_prefix.get(request_id)
        if prefix is None:
            prefix = self._token_prefix[request_id] = repr((self.seed, "token", request_id))[:-1]
        digest = blake2b(f"{prefix}, {position!r})".encode(), digest_size=8).digest()
        tok = int.from_bytes(digest, "little") % self.vocab_size
        eos = self.eos_token_id
        if eos is None:
            return tok
        if self.eos_fn is not None and self.eos_fn(request_id, position):
            return eos
        return (tok + 1) % self.vocab_size if tok == eos else tok

    def execute(self, batch: Batch) -> StepResult:
        """The result ``EngineCore.apply`` expects for ``batch``."""
        stage = batch.stage
        if stage is Stage.CODA:
            return CodaResult(
                batch.step, tuple(self.token(it.request_id, it.position) for it in batch.items)
            )
        if stage is Stage.RECURRENT:
            if not batch.needs_signals:
                return RecurrentResult(batch.step, None)
            items = batch.items
            fn = self.signal_fn
            signals = tuple(
                fn(it.request_id, it.position, it.depth) if it.needs_signal else 0.0
                for it in items if it.kind is ItemKind.DECODE
            )
            self.num_signals_read += len(signals)
            return RecurrentResult(batch.step, signals)
        return StepResult(batch.step)
