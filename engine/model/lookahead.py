"""The ``random_lookahead`` exit head: a frozen random Linear(hidden, 1), separate from the
checkpoint, whose sigmoid reads as "exit after one more loop" (docs/design.md)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LookaheadHead(nn.Module):
    """Built on CPU under ``fork_rng`` from ``seed``: the global RNG and the model's weights
    are untouched, and the head is the same on every device."""

    def __init__(self, hidden_size: int, seed: int) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.proj = nn.Linear(hidden_size, 1, bias=True)
        self.seed = seed
        self.requires_grad_(False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Score in fp32, [N]."""
        w, b = self.proj.weight, self.proj.bias
        return torch.sigmoid(F.linear(hidden.float(), w.float(), b.float()))[:, 0]


class LookaheadHeads:
    """The ``random_lookahead`` heads of one runner by seed, each built once on ``device``."""

    def __init__(self, hidden_size: int, device: torch.device) -> None:
        self.hidden_size = hidden_size
        self.device = device
        self._by_seed: dict[int, LookaheadHead] = {}

    def __call__(self, seed: int) -> LookaheadHead:
        head = self._by_seed.get(seed)
        if head is None:
            head = self._by_seed[seed] = LookaheadHead(self.hidden_size, seed).to(self.device)
        return head
