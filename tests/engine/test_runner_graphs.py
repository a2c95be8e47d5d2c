"""The graph path of RECURRENT core calls on the CPU: ``eager_capture`` replays by running the
forward on the padded static buffers, so everything but the CUDA recording is exercised. The
runner's tokens and exit depths must equal the eager runner's, and the real KV blocks too
(padding rows write only the scratch block, which no request owns)."""

from __future__ import annotations

import pytest
import torch

from engine.core import ExitConfig, SamplingParams
from engine.graphs import eager_capture
from engine.llm import LLM
from engine.runner import ModelRunner
from tests.reference.fixtures import make_llm, outputs_key, tiny_model

# Six prompts on four sequence slots: later prompts' chunks join decode rows at many positions.
PROMPTS = [[3, 1, 4], list(range(10, 31)), [9, 9, 8, 2, 6, 1], [5, 7], list(range(1, 18)),
           list(range(20, 32))]
PARAMS = [
    SamplingParams(max_tokens=6),
    SamplingParams(max_tokens=5, temperature=0.9, top_k=20, seed=3),
    SamplingParams(max_tokens=4, exit=ExitConfig(mode="fixed")),
    SamplingParams(max_tokens=7),
    SamplingParams(max_tokens=3),
    SamplingParams(max_tokens=4),
]
EXIT = ExitConfig(mode="ouro", exit_threshold=0.5)


def _with_graphs(llm: LLM, mode: str, backend: str) -> ModelRunner:
    runner = ModelRunner(llm.runner.model, llm.cfg, None, "cpu", None, backend,
                         cuda_graphs=mode, graph_capture=eager_capture)
    runner.bind(llm.core)
    llm.runner = runner
    return runner


def _run(mode: str | None, backend: str = "triton", arm: str = "mixed"
         ) -> tuple[list[tuple[list[int], list[int]]], LLM]:
    llm = make_llm(tiny_model(gate_std=0.6), arm, EXIT, attention_backend=backend)
    if mode is not None:
        _with_graphs(llm, mode, backend)
    return outputs_key(llm.generate(PROMPTS, PARAMS)), llm


@pytest.mark.parametrize("mode", ["decode", "mixed"])
def test_graph_replay_gives_eager_tokens_depths_and_kv(mode: str) -> None:
    eager, llm_eager = _run(None)
    graphed, llm = _run(mode)
    assert graphed == eager
    assert len({d for _, ds in eager for d in ds[1:]}) > 1, "exit depths should vary"
    graphs = llm.runner.graphs
    assert graphs is not None and graphs.stats.get("replay", 0) > graphs.stats["capture"] > 0
    num_blocks = llm.cfg.cache.num_blocks
    for k, k_ref in zip(llm.runner.kv_cache.k, llm_eager.runner.kv_cache.k, strict=True):
        assert k.shape[0] == num_blocks + 1  # the scratch block of the padding rows
        assert torch.equal(k[:num_blocks], k_ref)


def test_decode_mode_replays_decode_only_calls_and_mixed_mode_more() -> None:
    _, decode = _run("decode")
    _, mixed = _run("mixed")
    assert decode.runner.graphs is not None and mixed.runner.graphs is not None
    assert mixed.runner.graphs.stats["replay"] > decode.runner.graphs.stats["replay"]


def test_torch_backend_cannot_capture_and_runs_eager() -> None:
    eager, _ = _run(None, backend="torch")
    graphed, llm = _run("mixed", backend="torch")
    assert graphed == eager
    graphs = llm.runner.graphs
    assert graphs is not None and graphs.num_graphs == 0
    assert graphs.stats["eager: torch does not capture"] == 1  # asked once, then no fills
    assert graphs.stats["eager: no bucket"] > 1


def test_graph_cap_falls_back_to_eager() -> None:
    eager, _ = _run(None)
    llm = make_llm(tiny_model(gate_std=0.6), "mixed", EXIT, attention_backend="triton")
    runner = _with_graphs(llm, "mixed", "triton")
    assert runner.graphs is not None
    runner.graphs.max_graphs = 1
    assert outputs_key(llm.generate(PROMPTS, PARAMS)) == eager
    assert runner.graphs.num_graphs == 1 and runner.graphs.stats["eager: graph cap reached"] > 0


def test_cuda_graphs_on_a_cpu_runner_is_a_one_line_error() -> None:
    llm = make_llm(tiny_model(), "mixed")
    with pytest.raises(ValueError, match=r"^runner.cuda_graphs: 'decode' needs a CUDA device"):
        ModelRunner(llm.runner.model, llm.cfg, None, "cpu", cuda_graphs="decode")
    with pytest.raises(ValueError, match=r"^runner.cuda_graphs: 'always'; use one of"):
        ModelRunner(llm.runner.model, llm.cfg, None, "cpu", cuda_graphs="always")
