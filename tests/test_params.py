"""Parameter counts beyond the property suite's (properties/test_parameter_totals.py): every preset and
the suite's drawn configs against transformers (kept out of the suite, whose runs import torch and
transformers only for a model that needs them), the tied classifier, and the breakdown's rows."""

from __future__ import annotations

import math

import pytest
from hypothesis import given

from tests import needs
from verifier.formats import hf
from verifier.model.config import ModelConfig
from verifier.model.params import count_parameters, parameter_table
from verifier.model.presets import PRESETS, preset
from verifier.model.weights import weight_shapes
from verifier.properties.strategies import configs


def _size_of_weight_set(config: ModelConfig) -> int:
    return sum(math.prod(shape) for shape in weight_shapes(config).values())


@needs.transformers
@pytest.mark.parametrize("name", list(PRESETS))
def test_formula_equals_weight_set_and_transformers_for_preset(name: str) -> None:
    config = preset(name)
    assert count_parameters(config) == _size_of_weight_set(config)
    assert count_parameters(config) == hf.parameter_count(config.to_transformers())


@needs.transformers
@given(config=configs())
def test_formula_equals_weight_set_equals_transformers_meta_count(config: ModelConfig) -> None:
    """The configs the suite draws (every family, published shapes and free ones, their switches): the
    formula, the size of the weight set and transformers' count on the meta device, less what it holds
    that computes nothing, agree."""
    formula = parameter_table(config).total
    meta = hf.parameter_count(config.to_transformers()) - hf.inert_parameters(config)
    assert formula == _size_of_weight_set(config) == meta, (
        f"{config!r}: formula {formula:,}, weight set {_size_of_weight_set(config):,}, transformers on the meta "
        f"device {meta:,}"
    )


def test_untying_the_classifier_adds_vocab_times_d_model() -> None:
    tied = preset("llama2c-stories15M")
    untied = tied.replace(tie_embeddings=False)
    assert count_parameters(untied) - count_parameters(tied) == 32000 * 288


def test_breakdown_rows_sum_to_the_total_and_shares_to_one() -> None:
    table = parameter_table(preset("gpt2"))
    assert sum(r.count for r in table.rows) == table.total
    assert sum(table.share(r) for r in table.rows) == pytest.approx(1.0)
    by_name = {r.component: r.count for r in table.rows}
    assert by_name["token embedding"] == 38_597_376
    assert by_name["position embedding"] == 786_432


def test_fused_matrices_count_what_separate_ones_count() -> None:
    """Phi-3 stores q/k/v and gate/up as one matrix each: the same parameters as Llama's separate ones."""
    llama = ModelConfig(family="llama", vocab_size=100, n_ctx=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                        d_ff=96, norm_eps=1e-5, tie_embeddings=False)  # fmt: skip
    phi3 = llama.replace(family="phi3", fused_qkv=True, fused_gate_up=True)
    assert count_parameters(phi3) == count_parameters(llama) == _size_of_weight_set(phi3)
    rows = {r.component: r.shape for r in parameter_table(phi3).rows}
    assert rows["attention q, k, v (fused)"] == "2 x ([128, 64])"  # (4 + 2 * 2) heads of 16
    assert rows["MLP (gate and up fused, down)"] == "2 x ([192, 64] + [64, 96])"


def test_moe_layers_count_experts_router_and_shared_expert_dense_layers_one_mlp() -> None:
    """Qwen2-MoE with layer 1 of 3 dense: written out by hand, per component."""
    d, f, fe, fs, E = 8, 12, 4, 6, 3
    config = ModelConfig(family="qwen2_moe", vocab_size=10, n_ctx=16, d_model=d, n_layers=3, n_heads=2, n_kv_heads=2,
                         d_ff=f, norm_eps=1e-6, tie_embeddings=True, qkv_bias=True, n_experts=E, top_k=2,
                         d_expert=fe, d_shared_expert=fs, dense_layers=(1,))  # fmt: skip
    rows = {r.component: r.count for r in parameter_table(config).rows}
    assert rows["MLP (gate, up, down)"] == 1 * 3 * d * f
    assert rows["MLP (3 SwiGLU experts: gate, up, down)"] == 2 * E * 3 * d * fe
    assert rows["expert router"] == 2 * E * d
    assert rows["shared expert (gate, up, down) and its gate"] == 2 * (3 * d * fs + d)
    table = parameter_table(config)
    assert table.total == _size_of_weight_set(config)
    assert table.active == table.total - 2 * (E - 2) * 3 * d * fe  # one idle expert on each MoE layer
