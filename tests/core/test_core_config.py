"""Config validation: the mixed guard, rejections with reasons, field-named errors."""

import pytest

from engine.core.config import (
    MIXED_REJECTIONS,
    CacheConfig,
    EngineConfig,
    SchedulerConfig,
    resolve_arm,
)
from tests.helpers import TINY


def test_arm_aliases() -> None:
    assert [resolve_arm(a) for a in ("A0", "a1", "A2", "mixed")] == [
        "atomic", "per_depth", "mixed", "mixed",
    ]
    with pytest.raises(ValueError, match="scheduler.arm.*A0\\|A1\\|A2"):
        resolve_arm("A3")


def test_mixed_guard_boundary_and_message() -> None:
    SchedulerConfig(arm="mixed", prefill_chunk_size=128, max_num_seqs=8, max_num_batched_tokens=135)
    with pytest.raises(ValueError) as err:
        SchedulerConfig(arm="mixed", prefill_chunk_size=128, max_num_seqs=8,
                        max_num_batched_tokens=134)
    msg = str(err.value)
    assert msg.startswith("scheduler.max_num_batched_tokens")
    for part in ("128", "8", "134", "256"):
        assert part in msg
    # the RFC's defaults (chunk 128, 8 seqs, budget 128) fail; A0/A1 only need chunk <= budget
    with pytest.raises(ValueError, match="256"):
        SchedulerConfig(arm="A2", prefill_chunk_size=128, max_num_seqs=8,
                        max_num_batched_tokens=128)
    for arm in ("atomic", "per_depth"):
        SchedulerConfig(arm=arm, prefill_chunk_size=128, max_num_seqs=8, max_num_batched_tokens=128)
        with pytest.raises(ValueError, match="scheduler.prefill_chunk_size"):
            SchedulerConfig(arm=arm, prefill_chunk_size=129, max_num_batched_tokens=128)


def test_derive_chunk_policy() -> None:
    cfg = SchedulerConfig(arm="mixed", prefill_chunk_size=128, max_num_seqs=8,
                          max_num_batched_tokens=128, chunk_policy="derive")
    assert cfg.effective_chunk_size == 121
    ok = SchedulerConfig(arm="mixed", prefill_chunk_size=64, max_num_seqs=8,
                         max_num_batched_tokens=128, chunk_policy="derive")
    assert ok.effective_chunk_size == 64
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        SchedulerConfig(arm="mixed", max_num_seqs=8, max_num_batched_tokens=4,
                        prefill_chunk_size=4, chunk_policy="derive")


# RFC §5's list, written out literally: dropping an entry from the implementation fails here.
RFC_REJECTIONS = (
    "async_scheduling", "cuda_graphs", "speculative_decoding", "pd_disaggregation",
    "enable_preemption", "no_refill", "prefill_uva", "static_buffers", "padding",
)


def test_the_rfc_rejection_list_is_implemented() -> None:
    assert set(RFC_REJECTIONS) <= set(MIXED_REJECTIONS)


@pytest.mark.parametrize("option", RFC_REJECTIONS)
def test_every_unsupported_option_is_rejected_with_its_reason(option: str) -> None:
    with pytest.raises(ValueError) as err:
        SchedulerConfig(arm="mixed", **{option: True})
    msg = str(err.value)
    assert msg.startswith(f"scheduler.{option}: not supported with the mixed arm: ")
    assert msg.endswith(f"set {option}: false") and len(msg) > 60  # a reason in between
    with pytest.raises(ValueError, match=f"scheduler.{option}: not implemented"):
        SchedulerConfig(arm="atomic", **{option: True})


def test_shared_layout_only_for_atomic() -> None:
    EngineConfig(TINY, SchedulerConfig(arm="atomic"), CacheConfig(layout="shared"))
    for arm in ("per_depth", "mixed"):
        with pytest.raises(ValueError, match="cache.layout.*atomic"):
            EngineConfig(TINY, SchedulerConfig(arm=arm), CacheConfig(layout="shared"))


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"max_num_seqs": 0}, "scheduler.max_num_seqs"),
        ({"max_num_batched_tokens": -1}, "scheduler.max_num_batched_tokens"),
        ({"policy": "lifo"}, "scheduler.policy"),
        ({"chunk_policy": "maybe"}, "scheduler.chunk_policy"),
        ({"max_admission_bypasses": -1}, "scheduler.max_admission_bypasses"),
        ({"prompt_shortcut": True, "arm": "atomic"}, "scheduler.prompt_shortcut"),
    ],
)
def test_bad_scheduler_values_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SchedulerConfig(**kwargs)


def test_bad_cache_values() -> None:
    with pytest.raises(ValueError, match="cache.block_size"):
        CacheConfig(block_size=0)
    with pytest.raises(ValueError, match="cache.layout.*last_exited\\|shared"):
        CacheConfig(layout="paged")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cache.enable_prefix_caching: needs layout last_exited"):
        CacheConfig(layout="shared", enable_prefix_caching=True)
    assert not CacheConfig().enable_prefix_caching  # off by default: today's results stay
