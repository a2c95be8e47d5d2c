"""Per-request seeded sampling (greedy at temperature 0; temperature, top-k, top-p).

Each token draws from a generator seeded by (request seed, position), so a request's tokens
do not depend on which other rows shared its CODA batch, nor on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from engine.core.exits import stable_seed
from engine.core.request import SamplingParams


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
) -> list[int]:
    """One token per row of ``logits`` [N, V], with exactly one ``to_host`` readback: the
    argmax rows when every row is greedy, else the fp32 logits (argmax on the host then:
    the upcast is exact, so the picks are the same)."""
    if all(p.temperature == 0.0 for p in params):
        return [int(t) for t in to_host(logits.argmax(dim=-1)).tolist()]
    host = to_host(logits.float())
    out = [0] * len(params)
    for i, p in enumerate(params):
        if p.temperature == 0.0:
            out[i] = int(host[i].argmax())
            continue
        gen = torch.Generator().manual_seed(
            token_seed(p, request_ids[i], positions[i], default_seed))
        out[i] = int(torch.multinomial(filtered_probs(host[i], p), 1, generator=gen).item())
    return out
