"""Synthetic ShareGPT-format conversations (for tests and the shipped e2e sample; nothing is
downloaded): seeded, English-like words, prompt and reply lengths drawn log-normally.

    python -m loopserve.bench.synthetic OUT.json NUM_CONVERSATIONS [SEED]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

WORDS = ("the loop runs each token through shared layers four times and an exit gate decides "
         "after every pass whether it may leave early while prompt chunks advance one depth "
         "per step beside the decode rows of a mixed batch so neither waits for the other "
         "cache blocks hold keys and values per depth plane scheduler budget chunk request "
         "latency throughput arrival stream server client model engine").split()


def conversations(n: int, seed: int = 0, *, prompt_words: float = 40.0,
                  reply_words: float = 30.0) -> list[dict[str, object]]:
    """``n`` two-turn conversations; word counts are log-normal around the given medians."""
    rng = np.random.default_rng(seed)

    def text(median: float) -> str:
        k = int(np.clip(np.rint(np.exp(rng.normal(np.log(median), 0.6))), 2, 200))
        return " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), size=k))

    return [{"id": f"synthetic-{i}", "conversations": [
        {"from": "human", "value": text(prompt_words)},
        {"from": "gpt", "value": text(reply_words)}]} for i in range(n)]


def write(path: str | Path, n: int, seed: int = 0, **kwargs: float) -> Path:
    p = Path(path)
    p.write_text(json.dumps(conversations(n, seed, **kwargs), indent=1) + "\n")
    return p


if __name__ == "__main__":
    write(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
