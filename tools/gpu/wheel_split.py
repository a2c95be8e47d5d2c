"""FA4's wheels for the GPU machine, split over calls when they exceed what one call carries.

What travels with one device call is at most 64 MiB: the working tree plus the carried
paths. ``nvidia-cutlass-dsl-libs-cu13`` alone is larger, so ``plan_calls`` cuts wheels into
parts and packs parts and whole wheels into calls: ``.whl-fa4/call1/`` ... ``callN/``. Every
call but the last only stashes what it carries into ``/tmp/wheel-stash`` on the warm machine
(``mkdir -p /tmp/wheel-stash && cp .whl-fa4/call1/* /tmp/wheel-stash/``); the last one, the
gpu-check itself, carries ``.whl`` and ``.whl-fa4/callN``, and its ``wheels`` stage joins each
split wheel from its parts (checked against ``manifest.json``'s sha256) before installing.
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
CALL_LIMIT = 64 * MIB
MARGIN = 1 * MIB  # for files the tree gains between planning and the call
STASH_DIR = Path("/tmp/wheel-stash")
MANIFEST = "manifest.json"
# flash-attn-4 and what it needs that the GPU image lacks (it has torch, einops,
# cuda-bindings, protobuf; typing-extensions travels in .whl). CUDA 13 flavour only.
FA4_PINS = (
    "flash-attn-4==4.0.0b40", "nvidia-cutlass-dsl==4.8.1", "nvidia-cutlass-dsl-libs-base==4.8.1",
    "nvidia-cutlass-dsl-libs-core==4.8.1", "nvidia-cutlass-dsl-libs-cu13==4.8.1",
    "apache-tvm-ffi==0.1.15.post2", "torch-c-dlpack-ext==0.1.5", "quack-kernels==0.6.5",
)


@dataclass(frozen=True)
class Piece:
    """A whole wheel (``part`` None) or part ``part`` (from 1) of a split one."""

    wheel: str
    size: int
    part: int | None = None

    @property
    def file_name(self) -> str:
        return self.wheel if self.part is None else f"{self.wheel}.part{self.part}"


def tree_bytes(repo: Path) -> int:
    """Bytes of the working tree that travels: tracked plus untracked files git does not
    ignore."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=repo, capture_output=True, check=True).stdout
    paths = {p for p in out.decode().split("\0") if p}
    return sum((repo / p).stat().st_size for p in paths if (repo / p).is_file())


def plan_calls(wheels: dict[str, int], tree: int, base: int, limit: int = CALL_LIMIT,
               margin: int = MARGIN) -> list[list[Piece]]:
    """The calls' pieces, in run order (the last call also carries ``base`` bytes of
    ``.whl``): wheels larger than the last call's room are cut into parts of at most that,
    then the pieces, largest first, go into the first call with room (the last first)."""
    room = limit - tree - margin
    last_room = room - base
    if last_room <= 0:
        raise ValueError(f"the tree ({tree / MIB:.1f} MiB) and .whl ({base / MIB:.1f} MiB) "
                         f"leave no room under {limit / MIB:.0f} MiB a call")
    pieces: list[Piece] = []
    for name, size in sorted(wheels.items()):
        if size <= last_room:
            pieces.append(Piece(name, size))
            continue
        n = -(-size // last_room)
        step = -(-size // n)
        pieces += [Piece(name, min(step, size - i * step), i + 1) for i in range(n)]
    calls: list[list[Piece]] = [[]]
    free = [last_room]
    for piece in sorted(pieces, key=lambda p: (-p.size, p.file_name)):
        i = next((i for i, f in enumerate(free) if piece.size <= f), None)
        if i is None:
            calls.append([])
            free.append(room)
            i = len(calls) - 1
        calls[i].append(piece)
        free[i] -= piece.size
    return calls[1:] + calls[:1]  # stash calls first, the gpu-check last


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def write_calls(src: Path, dest: Path, calls: list[list[Piece]]) -> list[Path]:
    """Write each call's pieces into ``dest/call<k>/`` (old ones removed) and the manifest
    into the last; the call folders in run order."""
    for old in dest.glob("call*"):
        shutil.rmtree(old)
    parts = sorted((p for c in calls for p in c if p.part is not None),
                   key=lambda p: (p.wheel, p.part))
    offsets: dict[str, int] = {}
    start: dict[str, int] = {}
    manifest: dict[str, dict[str, object]] = {}
    for p in parts:
        start[p.file_name] = offsets.get(p.wheel, 0)
        offsets[p.wheel] = start[p.file_name] + p.size
        entry = manifest.setdefault(p.wheel, {"sha256": sha256(src / p.wheel), "parts": []})
        entry["parts"].append(p.file_name)  # type: ignore[attr-defined]
    folders = []
    for k, pieces in enumerate(calls, start=1):
        folder = dest / f"call{k}"
        folder.mkdir(parents=True)
        folders.append(folder)
        for p in pieces:
            if p.part is None:
                shutil.copy2(src / p.wheel, folder / p.wheel)
                continue
            with (src / p.wheel).open("rb") as f:
                f.seek(start[p.file_name])
                (folder / p.file_name).write_bytes(f.read(p.size))
    (folders[-1] / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return folders


def gather(final: Path, stash: Path, joined: Path) -> tuple[list[Path], list[str]]:
    """The FA4 wheels to install on the device: whole wheels carried now or stashed by an
    earlier call, and each split wheel joined from its parts into ``joined``; plus what is
    missing or corrupt (those wheels are left out)."""
    found = {p.name: p for d in (stash, final) if d.is_dir() for p in d.iterdir()}
    wheels = sorted((p for n, p in found.items() if n.endswith(".whl")), key=lambda p: p.name)
    problems: list[str] = []
    manifest_file = final / MANIFEST
    manifest = json.loads(manifest_file.read_text()) if manifest_file.is_file() else {}
    for wheel, entry in sorted(manifest.items()):
        missing = [n for n in entry["parts"] if n not in found]
        if missing:
            problems.append(f"{wheel}: parts {', '.join(missing)} missing (run the stash "
                            f"call(s) first on the same warm machine; docs/gpu.md)")
            continue
        joined.mkdir(parents=True, exist_ok=True)
        out = joined / wheel
        with out.open("wb") as f:
            for name in entry["parts"]:
                f.write(found[name].read_bytes())
        if sha256(out) != entry["sha256"]:
            problems.append(f"{wheel}: joined parts do not match its sha256")
            out.unlink()
            continue
        wheels.append(out)
    return wheels, problems
