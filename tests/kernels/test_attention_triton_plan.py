"""The Triton kernel's launch plan (host side, no kernel run) and its sm_90 build.

The plan must cover every prompt row exactly once with causal key ranges, and every decode
sequence's keys with its splits; the build (ahead of time, for an H100/H200, with the
compiler Triton's wheel carries) must keep the hot kernel free of spills, on 128-bit
pipelined loads and the tensor cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.attention.triton_plan import WORK_FIELDS, SplitPolicy, choose_block_m, plan_launch


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 20000), max_size=64),
       st.lists(st.integers(1, 3000).flatmap(lambda c: st.tuples(st.just(c), st.integers(1, c))),
                max_size=4),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([0, 40, 64, 256]))
def test_the_plan_covers_every_row_and_key(decode: list[int], prompts: list[tuple[int, int]],
                                           group: int, split_keys: int) -> None:
    ctx = decode + [c for c, _ in prompts]
    qlen = [1] * len(decode) + [n for _, n in prompts]
    if not ctx:
        return
    plan = plan_launch(ctx, qlen, len(decode), group=group, num_kv_heads=2, tile_n=64,
                       policy=SplitPolicy(split_keys=split_keys))
    assert plan.block_m in (max(16, group), max(64, group)) and plan.block_q * group <= plan.block_m
    covered: list[int] = []
    his = []
    for i in range(plan.num_prompt_items):
        seq, row0, rows, pos0, lo, hi, _, _ = plan.work[i * WORK_FIELDS:(i + 1) * WORK_FIELDS]
        assert len(decode) <= seq and 1 <= rows <= plan.block_q and lo == 0
        assert hi == pos0 + rows <= ctx[seq]  # the tile's last query sees keys < hi
        covered += range(row0, row0 + rows)
        his.append(hi)
    assert sorted(covered) == list(range(len(decode), sum(qlen)))
    assert his == sorted(his, reverse=True)  # longest first
    if plan.num_splits > 1:
        assert plan.chunk % 64 == 0 and plan.num_splits <= 64
        assert (plan.num_splits - 1) * plan.chunk < max(decode) <= plan.num_splits * plan.chunk
        # The chunk is the policy's, whatever the batch, up to 64 chunks of context.
        assert plan.chunk == (64 if split_keys <= 64 else split_keys) or max(decode) > 64 * (
            64 if split_keys <= 64 else split_keys)
    assert plan.num_parts == (len(decode) * plan.num_splits if plan.num_splits > 1 else 0)
    if split_keys == 0 or not decode:
        assert plan.num_splits == 1


def test_block_m_takes_two_values_per_group() -> None:
    assert {choose_block_m(1, q) for q in range(1, 600)} == {16, 64}
    assert {choose_block_m(4, q) for q in range(1, 600)} == {16, 64}
    assert choose_block_m(32, 1) == 32


def test_the_kernels_build_for_sm90_without_spills() -> None:
    code = ("import json; from kernels.attention.triton_aot import compile_attention, "
            "compile_helpers, Variant; print(json.dumps([compile_attention(Variant()), "
            "compile_attention(Variant(block_m=64)), compile_helpers()]))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300, check=True)
    decode, prompt, helpers = json.loads(out.stdout.strip().splitlines()[-1])
    for r in (decode, prompt, *helpers.values()):
        assert r["registers"] > 0 and r["stack_bytes"] == 0
        assert not r["ops"].get("LDL") and not r["ops"].get("STL")
    for r in (decode, prompt):
        # K/V tiles arrive through 16-byte cp.async copies, and the dots use tensor cores
        # (wgmma for the prompt-sized tile).
        assert any(k.startswith("LDGSTS") and k.endswith("128") for k in r["ops"]), r["ops"]
        assert r["ops"].get("HMMA", 0) + r["ops"].get("HGMMA", 0) > 0
    assert prompt["ops"].get("HGMMA", 0) > 0
