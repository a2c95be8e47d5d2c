"""The seeded executor of the tests and the simulator: results from seeded streams, no
tensors, no time.

Token ids are keyed by (request, position) and gate signals by (request, position, depth),
so neither depends on how work was batched: every arm sees the same tokens and the same
signal trace. A step's duration is the cost model's business, not the executor's.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.core.batch import Batch, ItemKind
from engine.core.request import Stage
from engine.core.results import CodaResult, RecurrentResult, StepResult
from engine.core.stable_seeds import StableSeeds

SignalFn = Callable[[str, int, int], float]
EosFn = Callable[[str, int], bool]


def uniform_signal_fn(seed: int) -> SignalFn:
    """Gate signals uniform in [0, 1) from ``stable_seed(seed, "signal", request, position,
    depth)``: the executor's default stream."""
    seeds = StableSeeds(seed, "signal")

    def signal(request_id: str, position: int, depth: int) -> float:
        return (seeds.at_depth(request_id, position, depth) >> 11) / float(1 << 53)

    return signal


class SeededExecutor:
    """Executes batches instantly from seeded streams, checking the housekeeping contract.

    A sampled token is ``stable_seed(seed, "token", request, position) % vocab_size``; it
    never equals ``eos_token_id`` unless ``eos_fn(request_id, position)`` asks for EOS there.
    ``signal_fn`` gives the gate signal of a decode row that needs one (default:
    ``uniform_signal_fn(seed)``); a decode row that needs none reads 0.0. Prompt-state
    handles are tracked as a runner tracks them (``live_handles``, ``released_handles``): a
    batch that uses a released one raises RuntimeError.
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
        self.signal_fn = signal_fn or uniform_signal_fn(seed)
        self.eos_token_id = eos_token_id
        self.eos_fn = eos_fn
        self.num_signals_read = 0
        self.live_handles: set[int] = set()
        self.released_handles: set[int] = set()
        self._token_seeds = StableSeeds(seed, "token")

    def for_another_engine(self) -> SeededExecutor:
        """An executor of the same streams for another engine: each engine numbers its own
        prompt states, so each tracks its handles apart."""
        return SeededExecutor(self.seed, self.vocab_size, self.signal_fn, self.eos_token_id,
                              self.eos_fn)

    def token(self, request_id: str, position: int) -> int:
        """The token sampled for ``request_id`` at ``position``."""
        tok: int = self._token_seeds.at(request_id, position) % self.vocab_size
        eos = self.eos_token_id
        if eos is None:
            return tok
        if self.eos_fn is not None and self.eos_fn(request_id, position):
            return eos
        return (tok + 1) % self.vocab_size if tok == eos else tok

    def _release(self, batch: Batch) -> None:
        for h in batch.housekeeping.released_handles:
            self.live_handles.discard(h.handle_id)
            self.released_handles.add(h.handle_id)

    def _use_prompt_states(self, batch: Batch) -> None:
        # Only prompt items carry a state (as the runner reads them), and they follow the
        # decode items: walk back from the end until all of them are seen.
        items = batch.items
        prompt = ItemKind.PROMPT
        left = batch.num_prompt_items
        i = len(items)
        while left > 0 and i > 0:
            i -= 1
            it = items[i]
            if it.kind is not prompt:
                continue
            left -= 1
            state = it.prompt_state
            if state is not None:
                if state.handle_id in self.released_handles:
                    raise RuntimeError(f"step {batch.step} uses released prompt state")
                self.live_handles.add(state.handle_id)

    def _signals(self, batch: Batch) -> tuple[float, ...]:
        # One per decode item in order; decode items come first, so the scan stops after the
        # last of them.
        fn = self.signal_fn
        decode = ItemKind.DECODE
        num_decode = batch.num_decode_items
        signals: list[float] = []
        for it in batch.items:
            if len(signals) == num_decode:
                break
            if it.kind is decode:
                signals.append(fn(it.request_id, it.position, it.depth) if it.needs_signal
                               else 0.0)
        self.num_signals_read += len(signals)
        return tuple(signals)

    def execute(self, batch: Batch) -> StepResult:
        """The result ``EngineCore.apply`` expects for ``batch``."""
        if batch.housekeeping.released_handles:
            self._release(batch)
        stage = batch.stage
        if stage is Stage.CODA:
            return CodaResult(
                batch.step, tuple(self.token(it.request_id, it.position) for it in batch.items)
            )
        if stage is Stage.PRELUDE:
            return StepResult(batch.step)
        if batch.num_prompt_items:
            self._use_prompt_states(batch)
        if stage is Stage.RECURRENT:
            if not batch.needs_signals:
                return RecurrentResult(batch.step, None)
            return RecurrentResult(batch.step, self._signals(batch))
        return StepResult(batch.step)
