"""Logit adjustments that depend on a request's tokens so far (vLLM's semantics).

``repetition_penalty`` first (tokens in the prompt or the output: positive logits divided
by it, negative ones multiplied), then ``frequency_penalty`` times each output token's count
and ``presence_penalty`` once per distinct output token are subtracted. ``min_tokens`` masks
EOS and ``stop_token_ids`` until the request has that many tokens. Everything runs on the
logits' device; rows that ask for none of it are not touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from engine.core.batch import ScheduledItem
from engine.core.request import Request, SamplingParams
from engine.uploads import upload_ints


@dataclass(frozen=True, slots=True)
class TokenHistory:
    """A row's prompt and the output tokens sampled before this one."""

    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]


def token_histories(
    items: Sequence[ScheduledItem], params: Sequence[SamplingParams],
    requests: Mapping[str, Request] | None,
) -> list[TokenHistory | None] | None:
    """The tokens each CODA row's penalties or min_tokens look at (None for rows that ask
    for neither), or None when no row does (the sampler then never copies the logits)."""
    if requests is None or not any(p.has_penalties or p.min_tokens for p in params):
        return None
    out: list[TokenHistory | None] = []
    for item, p in zip(items, params, strict=True):
        req = requests.get(item.request_id)
        if not (p.has_penalties or p.min_tokens) or req is None or (
                req.generation != item.generation):
            out.append(None)
            continue
        out.append(TokenHistory(req.prompt_token_ids, req.output_token_ids[:item.output_index]))
    return out


def needs_adjustment(params: SamplingParams, history: TokenHistory | None) -> bool:
    if params.has_penalties:
        return True
    return history is not None and len(history.output_token_ids) < params.min_tokens


def _blocked(params: SamplingParams) -> list[int]:
    ids = list(params.stop_token_ids)
    if params.eos_token_id is not None and not params.ignore_eos:
        ids.append(params.eos_token_id)
    return ids


def adjust_logits(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    histories: Sequence[TokenHistory | None],
) -> torch.Tensor:
    """``logits`` [N, V], or an fp32 copy with the penalties and min_tokens masks applied to
    the rows that ask for them."""
    rows = [i for i, (p, h) in enumerate(zip(params, histories, strict=True))
            if needs_adjustment(p, h)]
    if not rows:
        return logits
    out = logits.float().clone()
    vocab, device = out.shape[-1], out.device
    for i in rows:
        p, h = params[i], histories[i]
        if h is None:
            continue
        row = out[i]
        output = list(h.output_token_ids)
        if p.repetition_penalty != 1.0:
            seen = torch.zeros(vocab, dtype=torch.bool, device=device)
            seen[upload_ints(list(h.prompt_token_ids) + output, device)] = True
            scaled = torch.where(row > 0, row / p.repetition_penalty,
                                 row * p.repetition_penalty)
            row = torch.where(seen, scaled, row)
        if output and (p.frequency_penalty != 0.0 or p.presence_penalty != 0.0):
            counts = torch.bincount(upload_ints(output, device), minlength=vocab)[:vocab]
            row = row - p.frequency_penalty * counts.float()
            row = row - p.presence_penalty * (counts > 0).float()
        if len(output) < p.min_tokens:
            blocked = [t for t in _blocked(p) if 0 <= t < vocab]
            if blocked:
                row = row.index_fill(0, upload_ints(blocked, device), float("-inf"))
        out[i] = row
    return out
