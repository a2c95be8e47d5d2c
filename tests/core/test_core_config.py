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
    assert [resolve_arm(a) for a in ("A0", "a1", "A2", "mixed", "A3", "wavefront")] == [
        "atomic", "per_depth", "mixed", "mixed", "wavefront", "wavefront",
    ]
    with pytest.raises(ValueError, match="scheduler.arm.*A0\\|A1\\|A2\\|A3"):
        resolve_arm("A4")


def test_wavefront_guard_and_prompt_state_bound() -> None:
    """The wavefront arm keeps the mixed guard; its prompt-state bound counts the chunks a
    request can have in flight: distinct depths, and full chunks but the last in a budget."""
    with pytest.raises(ValueError, match="scheduler.max_num_batched_tokens: the wavefront arm"):
        SchedulerConfig(arm="wavefront", prefill_chunk_size=128, max_num_seqs=8,
                        max_num_batched_tokens=134)
    with pytest.raises(ValueError, match="scheduler.cuda_graphs: not supported with the "
                                         "wavefront arm"):
        SchedulerConfig(arm="wavefront", cuda_graphs=True)
    with pytest.raises(ValueError, match="scheduler.prompt_shortcut"):
        SchedulerConfig(arm="wavefront", prompt_shortcut=True)

    def bound(arm: str, chunk: int, budget: int) -> tuple[int, int]:
        cfg = EngineConfig(TINY, SchedulerConfig(arm=arm, prefill_chunk_size=chunk,
                                                 max_num_seqs=8, max_num_batched_tokens=budget))
        return cfg.scheduler.max_chunks_in_flight(TINY.num_depths), cfg.max_prompt_states

    assert bound("mixed", 64, 512) == (1, 8)
    assert bound("wavefront", 64, 512) == (4, 32)  # 8 chunks fit a step; 4 depths
    assert bound("wavefront", 128, 256) == (2, 16)  # two full chunks
    assert bound("wavefront", 128, 257) == (3, 24)  # two full and a last chunk of one token
    assert bound("wavefront", 128, 135) == (2, 16)


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
