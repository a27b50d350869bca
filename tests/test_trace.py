"""The life of a tensor: stages, shapes, the weights each stage meets, RoPE, the KV cache, padding, the plot."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verifier.analysis.trace import Life, Step, TraceError, life_of_a_tensor, padding_effect, render, to_json
from verifier.analysis.trace_plot import DATA_COLOUR, TABLE_COLOUR, WEIGHT_COLOUR, plot
from verifier.model import stages
from verifier.model.config import ModelConfig, RopeScaling
from verifier.model.presets import preset
from verifier.model.weights import Weights, init_weights, weight_shapes
from verifier.plugin.interface import Constraints
from verifier.properties.strategies import configs, drawing_for
from verifier.reference import NumpyModel
from verifier.reference import layers as L


def _life(config: ModelConfig, tokens: list[int], **kw) -> tuple[Life, Weights]:
    weights = init_weights(config, seed=1, scale=0.2)
    return life_of_a_tensor("test", config, weights, tokens, weights_source="seeded", **kw), weights


GPT2_TWO_LAYERS = preset("gpt2").replace(n_layers=2)


@pytest.fixture(scope="module")
def gpt2_weights() -> Weights:
    return init_weights(GPT2_TWO_LAYERS)


@pytest.fixture(scope="module")
def gpt2_two_layers(gpt2_weights: Weights) -> Life:
    """GPT-2 small's sizes (two of its twelve layers) on "The capital of France is"'s ids."""
    tokens = [464, 3139, 286, 4881, 318]
    return life_of_a_tensor("gpt2", GPT2_TWO_LAYERS, gpt2_weights, tokens, weights_source="seeded")


def test_gpt2_shapes_are_the_articles(gpt2_two_layers: Life) -> None:
    shapes = {s.stage: s.shape for s in gpt2_two_layers.steps}
    assert shapes["embed"] == (5, 768)
    assert shapes["layers.0.q"] == shapes["layers.0.k"] == shapes["layers.0.v"] == (12, 5, 64)
    assert shapes["layers.0.scores"] == shapes["layers.0.probs"] == (12, 5, 5)
    assert shapes["layers.0.attn"] == shapes["layers.0.attn_out"] == (5, 768)
    assert shapes["layers.0.mlp_up"] == shapes["layers.0.mlp_act"] == (5, 3072)
    assert shapes["layers.0.resid_mlp"] == (5, 768)
    assert shapes["logits"] == (5, 50257)
    text = render(gpt2_two_layers)
    for shown in ("12 x [5, 64]", "12 x [5, 5]", "[5, 3072]", "[5, 50257]", "c_attn.weight[:, 768:1536] [768, 768]"):
        assert shown in text, shown
    assert "layers 1-1: the same steps, 1 more times" in text


def test_the_predicted_token_is_the_argmax_of_the_last_row(gpt2_two_layers: Life, gpt2_weights: Weights) -> None:
    logits = NumpyModel(GPT2_TWO_LAYERS, gpt2_weights).logits(np.array(gpt2_two_layers.tokens))
    assert gpt2_two_layers.prediction.token == int(logits[-1].argmax())
    assert gpt2_two_layers.prediction.logit == pytest.approx(float(logits[-1].max()), rel=1e-6)


@pytest.mark.parametrize("layers", ["first", "all"])
def test_steps_are_the_stages_of_the_layers_shown_in_compute_order(layers: str) -> None:
    config = preset("llama2c-stories260K")
    life, _ = _life(config, [1, 5, 9, 3], layers=layers)
    n = config.n_layers if layers == "all" else 1
    expected = [s for s in stages.stage_shapes(config, 4) if (stages.split_stage(s)[0] or 0) < n]
    assert [s.stage for s in life.steps] == expected
    assert all(s.shape == stages.stage_shapes(config, 4)[s.stage] for s in life.steps)
    assert ("layers 1-4: the same steps" in render(life)) == (layers == "first")


def _part(array: np.ndarray, part: str) -> np.ndarray:
    """`array[part]` for a part written as `[:, 768:1536]` or `[0:768]` ("" is all of it)."""
    if not part:
        return array
    index = tuple(slice(None) if p == ":" else slice(*map(int, p.split(":"))) for p in part.strip("[]").split(", "))
    return array[index]


def _norm_input(config: ModelConfig, trace: dict[str, np.ndarray], stage: str) -> np.ndarray:
    layer, op = stages.split_stage(stage)
    if layer is None:
        return trace[stages.layer_stage(config.n_layers - 1, "resid_mlp")]
    if op == "mlp_norm":
        return trace[stages.layer_stage(layer, "resid_attn")]
    return trace[stages.EMBED] if layer == 0 else trace[stages.layer_stage(layer - 1, "resid_mlp")]


_MATMUL_INPUT = {"q": "attn_norm", "k": "attn_norm", "v": "attn_norm", "attn_out": "attn",
                 "mlp_up": "mlp_norm", "mlp_gate": "mlp_norm", "mlp_out": "mlp_act"}  # fmt: skip


def _recompute(config: ModelConfig, w: Weights, step: Step, trace: dict[str, np.ndarray], tokens) -> np.ndarray:
    """The stage from its input stage and the weights the step says it meets (and only those)."""
    layer, op = stages.split_stage(step.stage)
    met = [_part(w[u.name], u.part) for u in step.weights]
    if step.stage == stages.EMBED:
        return met[0][tokens] + (met[1][: len(tokens)] if len(met) > 1 else 0.0)
    if step.stage == stages.LOGITS:
        return trace[stages.FINAL_NORM] @ met[0].T
    if op in ("attn_norm", "mlp_norm") or step.stage == stages.FINAL_NORM:
        x = _norm_input(config, trace, step.stage)
        norm = L.layer_norm if config.family == "gpt2" else L.rms_norm
        return norm(x, *met, config.norm_eps)
    matrix = met[0] if config.family == "gpt2" else met[0].T  # Conv1D is [d_in, d_out], Linear [d_out, d_in]
    out = trace[stages.layer_stage(layer, _MATMUL_INPUT[op])] @ matrix + (met[1] if len(met) > 1 else 0.0)
    return L.split_heads(out[None], step.shape[0])[0] if op in ("q", "k", "v") else out


@st.composite
def _plain_configs(draw: st.DrawFn) -> ModelConfig:
    """GPT-2 and Llama without switches: the stages `_recompute` rebuilds from their weights alone (the
    switched families' stages are checked against transformers' modules in test_reference_families)."""
    with drawing_for((Constraints(families=("gpt2", "llama"), switches=()),)):
        return draw(configs(("gpt2", "llama"), max_n_ctx=64, max_layers=3))


@settings(max_examples=20, deadline=None)
@given(config=_plain_configs(), data=st.data())
def test_every_weight_met_computes_its_stage(config: ModelConfig, data) -> None:
    """Recomputing each stage from the weights the trace names catches a wrong name, a swapped
    gate/up/down, a wrong third of GPT-2's fused c_attn, or a weight left out."""
    T = data.draw(st.integers(1, config.n_ctx), label="T")
    tokens = data.draw(st.lists(st.integers(0, config.vocab_size - 1), min_size=T, max_size=T), label="tokens")
    weights = init_weights(config, seed=2, scale=0.3, dtype=np.float64)
    trace = NumpyModel(config, weights, np.float64).trace(np.array(tokens))
    life = life_of_a_tensor("test", config, weights, tokens, weights_source="seeded", layers="all")
    met = set()
    for step in life.steps:
        if step.weights:
            met |= {u.name for u in step.weights}
            expected = _recompute(config, weights, step, trace, np.array(tokens))
            np.testing.assert_allclose(trace[step.stage], expected, rtol=1e-9, atol=1e-9, err_msg=step.stage)
    assert met == set(weight_shapes(config)), "every weight is met by some stage"


def test_leading_values_are_the_last_positions_row() -> None:
    config = preset("llama2c-stories260K")
    life, weights = _life(config, [1, 7, 2])
    trace = NumpyModel(config, weights).trace(np.array([1, 7, 2]))
    by_stage = {s.stage: s.values for s in life.steps}
    assert by_stage["embed"] == pytest.approx(trace["embed"][-1, :3].tolist())
    assert by_stage["layers.0.q"] == pytest.approx(trace["layers.0.q"][0, -1, :3].tolist())
    assert by_stage["layers.0.probs"] == pytest.approx(trace["layers.0.probs"][0, -1, :3].tolist())


def test_rope_tables_and_rotation() -> None:
    config = preset("llama2c-stories260K")  # d_head 8, theta 10000
    life, _ = _life(config, [1, 7, 2, 9])
    assert life.rope is not None
    assert life.rope.table_shape == (4, 4)
    angles = 3 * 10000.0 ** (-np.arange(0, 8, 2)[:3] / 8)  # position 3, pairs 0..2
    assert life.rope.cos == pytest.approx(np.cos(angles).tolist())
    assert life.rope.sin == pytest.approx(np.sin(angles).tolist())
    assert life.rope.length_change < 1e-5
    assert life.rope.position0_change == 0.0
    assert "RoPE (theta 10000)" in render(life)


def test_gpt2_has_no_rope_section() -> None:
    small = preset("gpt2").replace(n_layers=1, vocab_size=100, d_model=64, n_heads=4, n_kv_heads=4, d_ff=32)
    life, _ = _life(small, [1, 2])
    assert life.rope is None and "RoPE" not in render(life)


def test_the_kv_cache_grows_one_row_per_token_and_matches_the_full_pass() -> None:
    config = preset("llama2c-stories260K")
    life, _ = _life(config, [1, 7, 2, 9, 4])
    assert [c.cache_shape for c in life.cache] == [(5, 2, 1, S, 4, 8) for S in range(1, 6)]
    assert [c.tokens for c in life.cache] == [(1,), (7,), (2,), (9,), (4,)]
    assert max(c.max_diff for c in life.cache) < 1e-4
    assert "cache [5, 2, 1, 5, 4, 8]" in render(life)


def test_a_long_sequence_grows_the_cache_token_by_token_then_in_one_chunk() -> None:
    life, _ = _life(preset("llama2c-stories260K"), list(range(20)))
    assert [len(c.tokens) for c in life.cache] == [1] * 8 + [12]
    assert [c.cache_shape[3] for c in life.cache] == [*range(1, 9), 20]
    assert max(c.max_diff for c in life.cache) < 1e-4
    assert "positions 8-19  12 tokens  cache [5, 2, 1, 20, 4, 8]" in render(life)


def test_padding_shows_padded_shapes_and_leaves_the_real_logits() -> None:
    config = preset("llama2c-stories260K")
    life, _ = _life(config, [1, 7, 2], pad=64)
    assert life.padding is not None and life.padding.harmless
    assert life.n_positions == 64
    shapes = {s.stage: s.shape for s in life.steps}
    assert shapes["embed"] == (64, 64) and shapes["layers.0.scores"] == (8, 64, 64)
    assert life.padding.pad_token == 2  # Llama's end of text
    assert "padded with token 2 to 64 positions" in render(life)


def test_the_padded_inputs_last_row_is_a_padding_position_not_the_next_token() -> None:
    """Pad, then "extract the last row": the last row is position 63, whose logits are a pad token's.
    A padding check that took the padded run's last row as the next token would report it unchanged."""
    config = preset("llama2c-stories260K")
    model = NumpyModel(config, init_weights(config, seed=1, scale=0.5))
    tokens = np.array([1, 7, 2])
    padded = padding_effect(model, tokens, 64)
    assert padded.harmless and padded.next_token == int(model.logits(tokens)[-1].argmax())
    assert padded.last_row_diff > 100 * padded.bound
    assert padded.last_row_token == int(model.logits(np.concatenate([tokens, np.full(61, 2)]))[-1].argmax())
    unpadded = padding_effect(model, tokens, 3)  # nothing appended: the last row is the last real one
    assert unpadded.last_row_diff <= unpadded.bound and unpadded.last_row_token == unpadded.next_token
    life, _ = _life(config, [1, 7, 2], pad=64)
    assert "the padded input's last row (position 63) is a padding position" in render(life)


def test_padding_check_fails_when_padding_is_visible(monkeypatch) -> None:
    """Without the causal mask the pads reach the real positions, and the check says so."""
    config = preset("llama2c-stories260K")
    model = NumpyModel(config, init_weights(config, seed=1, scale=0.5))
    monkeypatch.setattr(L, "causal_mask", lambda T, S, window=None: np.ones((T, S), dtype=bool))
    effect = padding_effect(model, np.array([1, 7, 2]), 16)
    assert not effect.harmless and effect.max_diff > effect.bound


@pytest.mark.parametrize("pad", [2, 513])
def test_padding_outside_the_tokens_and_n_ctx_is_refused(pad: int) -> None:
    with pytest.raises(TraceError, match=f"--pad must be between the 3 tokens and n_ctx=512, found {pad}"):
        _life(preset("llama2c-stories260K"), [1, 7, 2], pad=pad)


def test_json_holds_every_step() -> None:
    life, _ = _life(preset("llama2c-stories260K"), [1, 7, 2], pad=8)
    data = json.loads(json.dumps(to_json(life)))
    assert data["T"] == 8 and data["tokens"] == [1, 7, 2]
    assert [s["stage"] for s in data["steps"]] == [s.stage for s in life.steps]
    assert data["steps"][1]["weights"][0] == {
        "name": "model.layers.0.input_layernorm.weight", "shape": [64], "part": "", "part_shape": [64],
    }  # fmt: skip
    assert len(data["cache"]) == 3 and data["padding"]["length"] == 8


def test_svg_plot_draws_data_weights_and_the_repetition(tmp_path: Path) -> None:
    life, _ = _life(preset("llama2c-stories260K"), [1, 7, 2])
    path = plot(life, tmp_path / "flow.svg")
    svg = path.read_text()
    ET.fromstring(svg)  # well-formed
    texts = " ".join(t.text or "" for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text"))
    for shown in ("[3, 64]", "8 x [3, 8]", "self_attn.q_proj.weight", "x 5", "cos, sin tables", "data tensor"):
        assert shown in texts, shown
    for colour in (DATA_COLOUR, WEIGHT_COLOUR, TABLE_COLOUR):
        assert colour in svg
    assert [p.name for p in tmp_path.iterdir()] == ["flow.svg"]  # no temporary file left


def test_png_plot_and_bad_suffix(tmp_path: Path) -> None:
    life, _ = _life(preset("llama2c-stories260K"), [1, 7])
    assert plot(life, tmp_path / "flow.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(TraceError, match=r"must end in .svg or .png, found '.pdf'"):
        plot(life, tmp_path / "flow.pdf")


def _family_config(family: str, **switches) -> ModelConfig:
    from verifier.model.config import FAMILY_SWITCHES

    fixed, _ = FAMILY_SWITCHES[family]
    return ModelConfig(
        family=family, vocab_size=40, n_ctx=32, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=24,
        norm_eps=1e-6, tie_embeddings=False, **{**fixed, **switches},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("family", "switches", "shown"),
    [
        ("qwen3", {"qkv_bias": True, "o_bias": True, "head_dim": 10},
         ["q_norm", "k_norm", "self_attn.q_norm.weight [10]", "self_attn.k_proj.weight [10, 16] + bias",
          "self_attn.o_proj.weight [16, 20] + bias", "+ b_o", "h @ W_k^T + b_k",
          "before RoPE"]),
        ("gemma2", {"sliding_window": 3, "layer_types": ("sliding_attention", "full_attention"),
                    "attn_softcap": 5.0, "final_softcap": 3.0, "query_scale": 9},
         ["attn_post_norm", "mlp_post_norm", "post_feedforward_layernorm.weight [16]",
          "pre_feedforward_layernorm.weight [16]", "* (1 + g)", "sqrt(d_model)", "q k^T / sqrt(9)",
          "5 tanh(s / 5)", "3 tanh(x / 3)", "sliding window (3 keys)", "GeGLU"]),
        ("llama", {"rope_scaling": RopeScaling("llama3", 8.0, 1.0, 4.0, 16)}, ["scaled (llama3, factor 8)"]),
        ("mixtral", {"n_experts": 4, "top_k": 2},
         ["router_probs", "block_sparse_moe.gate.weight [4, 16]", "block_sparse_moe.experts.3.w2.weight [16, 24]",
          "top-2 of 4 experts' SwiGLU, renormalised-weighted sum",
          "the 2 of 4 experts each token uses: its top-2 router probabilities"]),
        ("qwen2_moe", {"n_experts": 4, "top_k": 1, "d_expert": 8, "d_shared_expert": 12, "dense_layers": (1,)},
         ["mlp.experts.0.gate_proj.weight [8, 16]", "probability-weighted sum + sigmoid-gated shared expert",
          "mlp.shared_expert_gate.weight [1, 16]", "mlp_gate", "mlp.gate_proj.weight [24, 16]"]),
        ("phi3", {"rotary_dim": 4},
         ["self_attn.qkv_proj.weight [32, 16]", "rows of the fused qkv_proj", "mlp.gate_up_proj.weight [48, 16]",
          "first half of the fused gate_up_proj", "pairs (i, i + 2) of the first 4 dims, the other 4 pass",
          "tables 2 x [6, 2]", "(its last 4 dims pass unrotated) turns by position * theta^(-2i/4)"]),
        ("glm", {}, ["rotate pairs (2i, 2i + 1)", "pair (2i, 2i + 1) of each head vector turns", "second half"]),
    ],
)  # fmt: skip
def test_the_trace_of_a_family_names_its_stages_weights_and_operations(family: str, switches, shown) -> None:
    config = _family_config(family, **switches)
    life, weights = _life(config, [1, 2, 3, 4, 5, 6], layers="all")
    assert [s.stage for s in life.steps] == list(stages.stage_shapes(config, 6))
    for step in life.steps:
        assert {w.name for w in step.weights} <= set(weights), step.stage
    met = {w.name for step in life.steps for w in step.weights}
    assert met == set(weights), "every weight is met by some stage"
    text = render(life)
    for piece in shown:
        assert piece in text, piece
    assert life.rope is not None and life.rope.length_change < 1e-5 and life.rope.position0_change < 1e-6
