"""bf16 and CUDA equivalence of A0/A1/A2 (RFC §6): CUDA fp32 must match exactly as on CPU;
bf16 (CPU always, CUDA when present) reports the first divergent token and exit depth. CUDA
cases are marked gpu and skipped without CUDA (run by make gpu-check)."""

from __future__ import annotations

import pytest
import torch

from engine.core import ExitConfig, SamplingParams
from engine.model import build_model
from tests.reference.divergence import divergence_report, first_divergence
from tests.reference.fixtures import ARMS, make_llm, outputs_key

CUDA = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]

PROMPTS = [[(13 * i + 7 * r) % 64 for i in range(5 + 9 * r)] for r in range(6)]
TRACE = (4, 2, 3, 1, 4, 2, 1, 3, 4, 2, 2, 1)


def _model(device: str, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    model = build_model("tiny", seed=0, device=device, dtype=dtype)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        w = model.model.early_exit_gate.weight
        w.copy_((torch.randn(w.shape, generator=gen) * 0.6).to(w))
    return model


def _runs(device: str, dtype: torch.dtype, exit_cfg: ExitConfig,  # type: ignore[no-untyped-def]
          params: list[SamplingParams]):
    model = _model(device, dtype)
    return {
        arm: outputs_key(make_llm(model, arm, exit_cfg, device=device, dtype=dtype)
                         .generate(PROMPTS, params))
        for arm in ARMS
    }


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_fp32_arms_identical_for_adaptive_and_sampled_requests() -> None:
    params = [SamplingParams(max_tokens=10, temperature=0.8 * (r % 2), seed=r)
              for r in range(len(PROMPTS))]
    runs = _runs("cuda", torch.float32, ExitConfig(mode="ouro", exit_threshold=0.5), params)
    report = divergence_report("atomic", runs["atomic"], "per_depth", runs["per_depth"])
    report += divergence_report("atomic", runs["atomic"], "mixed", runs["mixed"])
    report += divergence_report("atomic", runs["atomic"], "wavefront", runs["wavefront"])
    assert not report, "\n".join(report)


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_arms_agree_and_report_first_divergence(device: str) -> None:
    params = [SamplingParams(max_tokens=12, exit_trace=TRACE) for _ in PROMPTS]
    runs = _runs(device, torch.bfloat16, ExitConfig(mode="trace"), params)
    report = []
    matched = total = 0
    for arm in ("per_depth", "mixed", "wavefront"):
        report += divergence_report("atomic", runs["atomic"], arm, runs[arm])
        for a, b in zip(runs["atomic"], runs[arm], strict=True):
            d = first_divergence(a, b)
            matched += len(a[0]) if d is None else d[0]
            total += len(a[0])
    print("\n".join(report) or f"bf16 on {device}: A0, A1, A2 and A3 identical")
    # Trace exits fix the depths; greedy tokens may drift after a near-tie in bf16, but
    # the bulk of every run must agree before its first divergence.
    assert all(a[1] == b[1] for arm in ARMS for a, b in zip(runs["atomic"], runs[arm],
                                                             strict=True))
    assert matched >= 0.8 * total, "\n".join(report)
