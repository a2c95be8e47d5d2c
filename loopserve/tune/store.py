"""The tune folder's probe store: every finished probe appended to ``probes.jsonl`` as it
arrives, so a rerun with the same ``--out`` after an interrupt reads them back instead of
running them again.

``search.json`` fingerprints what a probe's result depends on (the scenario, the criterion,
the target); a folder holding another search's probes is refused rather than mixed in.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from loopserve.errors import UserError
from loopserve.tune.probe import ProbeResult
from loopserve.tune.space import Config

PROBES = "probes.jsonl"
FINGERPRINT = "search.json"


def fingerprint(inputs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


class ProbeStore:
    """Probes by (configuration, rate), backed by ``dest/probes.jsonl``."""

    def __init__(self, dest: Path, inputs: dict[str, Any]) -> None:
        self.dest = dest
        self.path = dest / PROBES
        self.kept: dict[tuple[str, float], ProbeResult] = {}
        digest = fingerprint(inputs)
        mark = dest / FINGERPRINT
        if mark.is_file():
            if json.loads(mark.read_text()).get("fingerprint") != digest:
                raise UserError("--out", f"{dest} holds a search of another scenario, SLO or "
                                "target; give a new folder to start a new search")
        elif dest.exists() and any(dest.iterdir()):
            raise UserError("--out", f"{dest} exists and is not an empty folder or an "
                            "interrupted search; pick a new one")
        dest.mkdir(parents=True, exist_ok=True)
        mark.write_text(json.dumps({"fingerprint": digest}) + "\n")
        if self.path.is_file():
            text = self.path.read_text()
            if not text.endswith("\n"):  # the line an interrupt cut short
                text = text[:text.rfind("\n") + 1]
                self.path.write_text(text)
            for line in text.splitlines():
                entry = json.loads(line)
                self.kept[entry["config"], float(entry["probe"]["rate"])] = \
                    ProbeResult.from_json(entry["probe"])

    def get(self, config: Config, rate: float) -> ProbeResult | None:
        return self.kept.get((config.key, rate))

    def add(self, config: Config, result: ProbeResult) -> None:
        self.kept[config.key, result.rate] = result
        with self.path.open("a") as f:
            f.write(json.dumps({"config": config.key, "probe": result.to_json()}) + "\n")
            f.flush()
