"""Per-request seeded sampling (greedy at temperature 0; temperature, top-k, top-p), with
the penalties of ``engine.penalties`` and per-token log-probabilities.

Each token draws from a generator seeded by (request seed, position), so a request's tokens
do not depend on which other rows shared its CODA batch, nor on the device. Log-probabilities
are a log-softmax of the raw logits (before penalties and temperature, as vLLM reports them
by default), computed on the device with their top-k; a step still reads back once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from engine.core.exits import stable_seed
from engine.core.request import SamplingParams, TokenLogprobs
from engine.penalties import TokenHistory, adjust_logits

Logprobs = tuple[TokenLogprobs | None, ...] | None


def token_seed(params: SamplingParams, request_id: str, position: int, default_seed: int) -> int:
    """The generator seed of one token: (seed, position), or (engine seed, request, position)
    when the request brings no seed."""
    if params.seed is not None:
        return stable_seed("sample", params.seed, position)
    return stable_seed("sample", default_seed, request_id, position)


def filtered_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities [V] (fp32) after temperature, top-k and top-p."""
    scaled = logits.float() / params.temperature
    if 0 < params.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, params.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop = before >= params.top_p  # keep the smallest prefix reaching top_p (>= 1 token)
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum()
    return probs


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    request_ids: Sequence[str],
    positions: Sequence[int],
    default_seed: int = 0,
    to_host: Callable[[torch.Tensor], torch.Tensor] = torch.Tensor.cpu,
    histories: Sequence[TokenHistory | None] | None = None,
) -> tuple[tuple[int, ...], Logprobs]:
    """One token per row of ``logits`` [N, V] and, when a row asks, its log-probabilities;
    exactly one ``to_host`` readback: the argmax rows (with the log-probability columns)
    when every row is greedy, else the fp32 logits (argmax on the host then: the upcast is
    exact, so the picks are the same)."""
    kmax = max((p.logprobs for p in params if p.logprobs is not None), default=-1)
    lp = torch.log_softmax(logits.float(), dim=-1) if kmax >= 0 else None  # raw logits
    if histories is not None:
        logits = adjust_logits(logits, params, histories)
    if all(p.temperature == 0.0 for p in params):
        picks = logits.argmax(dim=-1)
        if lp is None:
            return tuple(int(t) for t in to_host(picks).tolist()), None
        chosen = lp.gather(1, picks[:, None])
        top = lp.topk(kmax, dim=-1) if kmax > 0 else None
        host = to_host(_pack(picks[:, None].float(), chosen, top))
        ids = tuple(int(t) for t in host[:, 0].tolist())
        return ids, _unpack(host[:, 1:], ids, params, kmax)
    width = logits.shape[-1]
    if lp is None:
        host = to_host(logits.float())
    else:
        top = lp.topk(kmax, dim=-1) if kmax > 0 else None
        host = to_host(torch.cat([logits.float(), lp, *_top_columns(top)], dim=1))
    out = [0] * len(params)
    for i, p in enumerate(params):
        if p.temperature == 0.0:
            out[i] = int(host[i, :width].argmax())
            continue
        gen = torch.Generator().manual_seed(
            token_seed(p, request_ids[i], positions[i], default_seed))
        out[i] = int(torch.multinomial(filtered_probs(host[i, :width], p), 1,
                                       generator=gen).item())
    if lp is None:
        return tuple(out), None
    chosen_lp = host[:, width:2 * width].gather(1, torch.tensor(out)[:, None])
    return tuple(out), _unpack(torch.cat([chosen_lp, host[:, 2 * width:]], dim=1), out, params,
                               kmax)


def _top_columns(top: torch.return_types.topk | None) -> list[torch.Tensor]:
    """Top-k ids (as fp32: exact below 2**24) and log-probabilities, as columns."""
    return [] if top is None else [top.indices.float(), top.values]


def _pack(picks: torch.Tensor, chosen: torch.Tensor,
          top: torch.return_types.topk | None) -> torch.Tensor:
    return torch.cat([picks, chosen, *_top_columns(top)], dim=1)


def _unpack(host: torch.Tensor, ids: Sequence[int], params: Sequence[SamplingParams],
            kmax: int) -> Logprobs:
    """Rows of [chosen logprob, top ids (kmax), top logprobs (kmax)] as TokenLogprobs."""
    rows = host.tolist()
    out: list[TokenLogprobs | None] = []
    for i, p in enumerate(params):
        if p.logprobs is None:
            out.append(None)
            continue
        row = rows[i]
        top = tuple((int(row[1 + j]), float(row[1 + kmax + j])) for j in range(p.logprobs))
        out.append(TokenLogprobs(ids[i], float(row[0]), top))
    return tuple(out)
