"""The Ouro model: sizes and names, presets, gate maths, lookahead head, prelude/coda split."""

from __future__ import annotations

import pytest
import torch

from engine.core import ExitConfig
from engine.model import LookaheadHead, OuroForCausalLM, build_model, get_preset
from engine.model.layers import RMSNorm, apply_rope, rope_cos_sin, rope_inv_freq
from tests.reference.fixtures import make_llm, tiny_model

PER_LAYER = [
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight", "input_layernorm.weight", "input_layernorm_2.weight",
    "post_attention_layernorm.weight", "post_attention_layernorm_2.weight",
]


@pytest.mark.parametrize(
    ("name", "num_params", "num_tensors", "num_layers"),
    [("ouro-1.4b", 1_434_652_673, 269, 24), ("ouro-2.6b", 2_667_974_657, 533, 48)],
)
def test_meta_device_parameter_counts_and_hf_names(
    name: str, num_params: int, num_tensors: int, num_layers: int
) -> None:
    with torch.device("meta"):
        model = OuroForCausalLM(get_preset(name))
    state = model.state_dict()
    assert sum(p.numel() for p in model.parameters()) == num_params
    assert len(state) == num_tensors
    expected = {"model.embed_tokens.weight", "model.norm.weight", "model.early_exit_gate.weight",
                "model.early_exit_gate.bias", "lm_head.weight"}
    expected |= {f"model.layers.{i}.{n}" for i in range(num_layers) for n in PER_LAYER}
    assert set(state) == expected
    assert tuple(state["model.layers.0.mlp.down_proj.weight"].shape) == (2048, 5632)
    assert tuple(state["model.early_exit_gate.weight"].shape) == (1, 2048)
    shared = sum(state[k].numel() for k in state if k.startswith("model.layers."))
    assert shared == model.config.to_shape().core_params == 1_233_321_984 * num_layers // 24


def test_preset_shapes_match_the_simulator() -> None:
    from engine.core.shapes import MODEL_SHAPES

    for name, shape in MODEL_SHAPES.items():
        assert get_preset(name).to_shape() == shape, name
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        get_preset("nope")


def test_seeded_weights_are_reproducible_and_seed_dependent() -> None:
    a, b, c = build_model("tiny", seed=3), build_model("tiny", seed=3), build_model("tiny", seed=4)
    for (name, pa), pb, pc in zip(a.state_dict().items(), b.state_dict().values(),
                                  c.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
        if "norm" not in name and not name.endswith("bias"):
            assert not torch.equal(pa, pc), name
    assert a.model.inv_freq.dtype == torch.float32


def test_weights_drawn_on_the_device_follow_the_same_recipe() -> None:
    """``on_device`` (the GPU check's fast init) keeps norms at 1, biases at 0 and the
    N(0, initializer_range) draw; only where the numbers come from differs."""
    from engine.model.alloc import empty_model
    from engine.model.build import init_random_weights

    cfg = get_preset("small")
    a = init_random_weights(empty_model(cfg, "cpu", torch.float32), 5, on_device=True)
    b = init_random_weights(empty_model(cfg, "cpu", torch.float32), 5, on_device=True)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
        if "norm" in name and name.endswith("weight"):
            assert torch.all(pa == 1), name
        elif name.endswith("bias"):
            assert torch.all(pa == 0), name
    w = a.model.layers[0].mlp.gate_proj.weight
    assert float(w.std()) == pytest.approx(cfg.initializer_range, rel=0.05)


def test_rmsnorm_and_rope_follow_the_reference_formulas() -> None:
    x = torch.randn(5, 32)
    norm = RMSNorm(32, 1e-6)
    torch.nn.init.uniform_(norm.weight)
    want = norm.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(norm(x), want)
    # RoPE preserves norms, and q.k depends only on the relative position.
    q, k = torch.randn(1, 2, 8), torch.randn(1, 2, 8)
    inv = rope_inv_freq(8, 10_000.0)

    def dot(pq: int, pk: int) -> torch.Tensor:
        cq, sq = rope_cos_sin(torch.tensor([pq]), inv, torch.float32)
        ck, sk = rope_cos_sin(torch.tensor([pk]), inv, torch.float32)
        return (apply_rope(q, cq, sq) * apply_rope(k, ck, sk)).sum(-1)

    torch.testing.assert_close(dot(7, 3), dot(104, 100))
    assert not torch.allclose(dot(7, 3), dot(7, 4))


def test_gate_is_fp32_sigmoid_of_the_logit() -> None:
    model = tiny_model(gate_std=0.0, gate_bias=0.0)
    lam = model.gate(torch.randn(3, 32))
    assert lam.dtype == torch.float32
    torch.testing.assert_close(lam, torch.full((3,), 0.5))
    bf16 = build_model("tiny", dtype=torch.bfloat16)
    with torch.no_grad():
        bf16.model.early_exit_gate.bias.fill_(7.0)  # bf16 sigmoid would round to exactly 1
    assert bf16.gate(torch.zeros(1, 32, dtype=torch.bfloat16)).item() < 1.0


def test_lookahead_head_is_reproducible_and_leaves_rng_and_weights_alone() -> None:
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    h1 = LookaheadHead(32, ExitConfig(mode="random_lookahead", seed=5).seed)
    assert torch.equal(torch.rand(1), expected_next)  # global RNG untouched
    h2, h3 = LookaheadHead(32, 5), LookaheadHead(32, 6)
    x = torch.randn(4, 32)
    assert torch.equal(h1(x), h2(x)) and not torch.equal(h1(x), h3(x))
    assert h1(x).dtype == torch.float32 and not h1.proj.weight.requires_grad
    # built the way serving builds it, by a runner that holds the model
    head = make_llm(model, "mixed").runner.lookahead_head(ExitConfig(mode="random_lookahead",
                                                                      seed=5))
    assert torch.equal(head(x), h1(x))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_prelude_and_coda_are_embedding_and_untied_head() -> None:
    model = tiny_model()
    ids = torch.tensor([3, 9])
    torch.testing.assert_close(model.prelude(ids), model.model.embed_tokens.weight[ids])
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    h = torch.randn(2, 32)
    torch.testing.assert_close(model.coda(h), h @ model.lm_head.weight.T)
