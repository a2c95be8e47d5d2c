"""flash-attn-4's wheels over several device calls: the plan keeps every call under the
limit, and the last call's ``wheels`` stage joins split wheels byte for byte (or says what is
missing)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tools.gpu.wheel_split import CALL_LIMIT, MANIFEST, MARGIN, MIB, gather, plan_calls, write_calls

# Sizes of the pinned wheels (bytes), as pip downloaded them.
FA4_SIZES = {
    "flash_attn_4-4.0.0b40-py3-none-any.whl": 568_634,
    "nvidia_cutlass_dsl-4.8.1-py3-none-any.whl": 10_510,
    "nvidia_cutlass_dsl_libs_base-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl": 3_050_567,
    "nvidia_cutlass_dsl_libs_core-4.8.1-py3-none-any.whl": 1_635_096,
    "nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl": 91_954_433,
    "apache_tvm_ffi-0.1.15.post2-cp312-cp312-manylinux_2_28_x86_64.whl": 3_312_304,
    "torch_c_dlpack_ext-0.1.5-cp312-cp312-manylinux_2_28_x86_64.whl": 897_846,
    "quack_kernels-0.6.5-py3-none-any.whl": 729_615,
}


def test_the_real_sizes_take_two_calls_each_under_the_limit() -> None:
    tree, base = 12 * MIB, 3 * MIB
    calls = plan_calls(FA4_SIZES, tree, base)
    assert len(calls) == 2
    for k, pieces in enumerate(calls):
        carried = tree + sum(p.size for p in pieces) + (base if k == len(calls) - 1 else 0)
        assert carried <= CALL_LIMIT - MARGIN
    big = "nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    parts = [p for c in calls for p in c if p.wheel == big]
    assert sorted(p.part for p in parts) == [1, 2]  # type: ignore[type-var]
    assert sum(p.size for p in parts) == FA4_SIZES[big]
    whole = {p.wheel for c in calls for p in c if p.part is None}
    assert whole == set(FA4_SIZES) - {big}


def test_no_room_is_refused() -> None:
    with pytest.raises(ValueError, match="leave no room"):
        plan_calls(FA4_SIZES, 60 * MIB, 3 * MIB)


def test_split_wheels_join_byte_for_byte_and_missing_parts_are_named(tmp_path: Path) -> None:
    src = tmp_path / "download"
    src.mkdir()
    blobs = {"big-1.0-py3-none-any.whl": os.urandom(3000), "small-1.0-py3-none-any.whl":
             os.urandom(300)}
    for name, data in blobs.items():
        (src / name).write_bytes(data)
    calls = plan_calls({n: len(d) for n, d in blobs.items()}, tree=100, base=200, limit=1500,
                       margin=0)
    assert len(calls) >= 3 and all(sum(p.size for p in c) <= 1400 for c in calls)
    folders = write_calls(src, tmp_path / "fa4", calls)
    assert (folders[-1] / MANIFEST).is_file()
    stash = tmp_path / "stash"
    stash.mkdir()
    for folder in folders[:-1]:  # what the earlier calls stash on the warm machine
        for f in folder.iterdir():
            shutil.copy2(f, stash / f.name)
    wheels, problems = gather(folders[-1], stash, tmp_path / "joined")
    assert problems == []
    assert {p.name: p.read_bytes() for p in wheels} == blobs
    # A stash call that did not run: the split wheel is left out, and said so.
    first_part = next(p for p in sorted(stash.iterdir()) if ".part" in p.name)
    first_part.unlink()
    wheels, problems = gather(folders[-1], stash, tmp_path / "joined2")
    assert "big-1.0-py3-none-any.whl" not in {p.name for p in wheels}
    assert len(problems) == 1 and first_part.name in problems[0]
    # A corrupt part: the sha256 check refuses the joined wheel.
    first_part.write_bytes(b"x" * len(first_part.name))
    _, problems = gather(folders[-1], stash, tmp_path / "joined3")
    assert problems and "sha256" in problems[0]
