"""GGUF files of every family llama.cpp runs: read back to the same config and weights, laid out as
llama.cpp's convert_hf_to_gguf.py lays out the same `transformers` weights (its conventions spelled
out here, independently of the writer), and what an architecture cannot hold refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'lm-verifier[gguf]')")

import gguf
from hypothesis import HealthCheck, assume, given, settings

from tests import needs
from tests.formats.families import FAMILY_EXAMPLES
from verifier.formats import CheckpointError, load_checkpoint
from verifier.formats import gguf as gguf_format
from verifier.formats.gguf import write_gguf
from verifier.model.config import ModelConfig, RopeScaling
from verifier.model.weights import init_weights
from verifier.properties.strategies import configs

# Every example llama.cpp's architectures hold; Qwen2-MoE's without its dense layer (llama.cpp routes every
# layer), GLM's with square attention (n_heads * d_head = d_model, as chatglm's attn_output is).
GGUF_EXAMPLES = {name: c for name, c in FAMILY_EXAMPLES.items() if gguf_format.unsupported(c) is None} | {
    "qwen2_moe": FAMILY_EXAMPLES["qwen2_moe"].replace(dense_layers=()),
    "qwen3_moe": FAMILY_EXAMPLES["qwen3_moe"].replace(dense_layers=()),
    "glm": FAMILY_EXAMPLES["glm"].replace(head_dim=None),
}
IDS = list(GGUF_EXAMPLES)
EXAMPLES = [GGUF_EXAMPLES[name] for name in IDS]


def stored(path: Path) -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(path).tensors}


def fields(path: Path) -> dict[str, object]:
    return {name: field.contents() for name, field in gguf.GGUFReader(path).fields.items()}


@pytest.mark.parametrize("config", EXAMPLES, ids=IDS)
def test_every_family_reads_back_to_the_same_config_and_weights(tmp_path: Path, config: ModelConfig) -> None:
    weights = init_weights(config, seed=2)
    write_gguf(tmp_path / "m.gguf", config, weights)
    checkpoint = load_checkpoint(tmp_path / "m.gguf")
    assert checkpoint.config == config
    assert checkpoint.weights.keys() == weights.keys()
    file = stored(tmp_path / "m.gguf")
    for name, w in weights.items():
        if config.norm_plus_one and name.endswith("norm.weight"):
            # Stored as float32(1 + w) (convert_hf_to_gguf.py's Gemma convention): read back as w up to
            # that rounding, and 1 + the weight read gives the stored value exactly, which is what
            # both llama.cpp (the stored value) and transformers (1 + w in float32) multiply by.
            one_plus_w = np.float32(1) + w
            np.testing.assert_array_equal(np.float32(1) + checkpoint.weights[name], one_plus_w, err_msg=name)
            assert np.all(np.abs(checkpoint.weights[name] - w) <= np.spacing(one_plus_w) / 2), name
        else:
            np.testing.assert_array_equal(checkpoint.weights[name], w, err_msg=name)
    if config.norm_plus_one:
        np.testing.assert_array_equal(file["output_norm.weight"], np.float32(1) + weights["model.norm.weight"])
        assert any("1 + w" in finding for finding in checkpoint.findings)


def test_rotate_half_architectures_keep_q_and_k_and_store_biases_and_norms_by_llama_cpp_s_names(tmp_path: Path) -> None:
    """qwen2, qwen3, gemma, gemma2 use llama.cpp's NEOX RoPE (pairs i, i + d/2, as HF): the converter
    permutes q/k only for its `llama` architecture."""
    for family, extra in (("qwen2", "attn_k.bias"), ("qwen3", "attn_q_norm.weight")):
        config = FAMILY_EXAMPLES[family]
        weights = init_weights(config, seed=3)
        write_gguf(tmp_path / f"{family}.gguf", config, weights)
        t = stored(tmp_path / f"{family}.gguf")
        np.testing.assert_array_equal(t["blk.1.attn_q.weight"], weights["model.layers.1.self_attn.q_proj.weight"])
        np.testing.assert_array_equal(t["blk.0.attn_k.weight"], weights["model.layers.0.self_attn.k_proj.weight"])
        hf_name = "self_attn.k_proj.bias" if family == "qwen2" else "self_attn.q_norm.weight"
        np.testing.assert_array_equal(t[f"blk.0.{extra}"], weights[f"model.layers.0.{hf_name}"])
        assert fields(tmp_path / f"{family}.gguf")["general.architecture"] == family
        assert "output.weight" not in t  # tied


def test_llama_biases_are_interleaved_with_their_rows(tmp_path: Path) -> None:
    config = FAMILY_EXAMPLES["llama-linear-bias"]
    weights = init_weights(config, seed=3)
    write_gguf(tmp_path / "m.gguf", config, weights)
    t = stored(tmp_path / "m.gguf")
    half = config.d_head // 2
    q_bias = weights["model.layers.0.self_attn.q_proj.bias"].reshape(config.n_heads, config.d_head)
    got = t["blk.0.attn_q.bias"].reshape(config.n_heads, config.d_head)
    np.testing.assert_array_equal(got[:, 0::2], q_bias[:, :half])  # row 2i is HF's i, as for the weights
    np.testing.assert_array_equal(got[:, 1::2], q_bias[:, half:])
    np.testing.assert_array_equal(t["blk.0.attn_output.bias"], weights["model.layers.0.self_attn.o_proj.bias"])
    meta = fields(tmp_path / "m.gguf")
    assert (meta["llama.rope.scaling.type"], meta["llama.rope.scaling.factor"]) == ("linear", 4.0)


def test_gemma2_norms_caps_window_and_pattern_are_stored_under_llama_cpp_s_names(tmp_path: Path) -> None:
    config = FAMILY_EXAMPLES["gemma2"]
    weights = init_weights(config, seed=3)
    write_gguf(tmp_path / "m.gguf", config, weights)
    t = stored(tmp_path / "m.gguf")
    one = np.float32(1)
    for hf, ours in (
        ("input_layernorm", "attn_norm"),
        ("post_attention_layernorm", "post_attention_norm"),
        ("pre_feedforward_layernorm", "ffn_norm"),
        ("post_feedforward_layernorm", "post_ffw_norm"),
    ):
        np.testing.assert_array_equal(t[f"blk.1.{ours}.weight"], one + weights[f"model.layers.1.{hf}.weight"])
    meta = fields(tmp_path / "m.gguf")
    assert meta["gemma2.attn_logit_softcapping"] == 50.0 and meta["gemma2.final_logit_softcapping"] == 30.0
    assert meta["gemma2.attention.sliding_window"] == 8
    assert meta["gemma2.attention.sliding_window_pattern"] == [True, False]  # llama.cpp reads it: true = sliding
    assert meta["gemma2.attention.key_length"] == config.d_head


@needs.transformers
def test_llama3_rope_freqs_are_what_transformers_divides_each_frequency_by(tmp_path: Path) -> None:
    """llama.cpp divides inverse frequency i by rope_freqs[i]: it must be transformers' default
    inverse frequency over its Llama 3 one (computed here by transformers, not by the writer)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = FAMILY_EXAMPLES["llama3"]
    write_gguf(tmp_path / "m.gguf", config, init_weights(config))
    hf = config.to_transformers()
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](hf)
    d = config.d_head
    default = 1.0 / config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    expected = default / scaled.double().numpy()
    got = stored(tmp_path / "m.gguf")["rope_freqs.weight"]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert got[0] == 1.0 and got[-1] == config.rope_scaling.factor  # type: ignore[union-attr]
    assert ((got > 1) & (got < 8)).sum() == 2  # the band between: the example spans all three


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"family": "qwen3", "qkv_bias": True, "o_bias": True, "qk_norm": True},
            "qwen3 architecture does not load every q/k/v/o bias",
        ),
        ({"tie_embeddings": False}, "gemma architecture has no output.weight"),
    ],
    ids=["qwen3 biases", "gemma untied"],
)
def test_what_an_architecture_cannot_hold_is_refused_and_leaves_no_file(
    tmp_path: Path, change: dict, message: str
) -> None:
    base = FAMILY_EXAMPLES["qwen3" if change.get("family") == "qwen3" else "gemma"]
    config = base.replace(**change)
    with pytest.raises(CheckpointError, match=message):
        write_gguf(tmp_path / "m.gguf", config, init_weights(config))
    assert list(tmp_path.iterdir()) == []


def test_rope_freqs_that_are_not_the_table_of_the_stored_parameters_are_refused(tmp_path: Path) -> None:
    config = FAMILY_EXAMPLES["llama3"]
    write_gguf(tmp_path / "m.gguf", config, init_weights(config))
    other = config.replace(rope_scaling=config.rope_scaling.__class__("llama3", 4.0, 1.0, 4.0, 64))  # type: ignore[call-arg]
    write_gguf(tmp_path / "other.gguf", other, init_weights(other))
    data = bytearray((tmp_path / "m.gguf").read_bytes())
    mine = stored(tmp_path / "m.gguf")["rope_freqs.weight"].tobytes()
    theirs = stored(tmp_path / "other.gguf")["rope_freqs.weight"].tobytes()
    at = data.find(mine)
    data[at : at + len(mine)] = theirs  # the factor-4 table under the factor-8 parameters
    (tmp_path / "m.gguf").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"rope_freqs\.weight: is not the table of the stored Llama 3 parameters"):
        load_checkpoint(tmp_path / "m.gguf")


def _write_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: ModelConfig, **patches: object) -> Path:
    """A file written with some of the writer's pieces replaced (then restored), to read back."""
    with monkeypatch.context() as m:
        for name, value in patches.items():
            owner, attribute = (gguf.GGUFWriter, name) if hasattr(gguf.GGUFWriter, name) else (gguf_format, name)
            m.setattr(owner, attribute, value)
        write_gguf(tmp_path / "m.gguf", config, init_weights(config))
    return tmp_path / "m.gguf"


def test_a_gemma2_file_as_llama_cpp_s_converter_writes_it_reads_as_llama_cpp_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No layer pattern and no query_pre_attn_scalar (convert_hf_to_gguf.py writes neither): llama.cpp
    alternates from a sliding layer 0 and scales queries by 1/sqrt(d_head) below 46 layers; so does the reader."""
    config = FAMILY_EXAMPLES["gemma2"].replace(layer_types=("full_attention", "sliding_attention"), query_scale=24)
    path = _write_with(
        tmp_path, monkeypatch, config, add_sliding_window_pattern=lambda self, value: None, QUERY_SCALE_KEY="x.unread"
    )
    checkpoint = load_checkpoint(path)
    assert checkpoint.config == config.replace(layer_types=("sliding_attention", "full_attention"), query_scale=None)
    assert any("query_pre_attn_scalar is not stored; llama.cpp's rule gives 16" in f for f in checkpoint.findings)


@pytest.mark.parametrize(
    ("config", "patches", "message"),
    [
        (
            FAMILY_EXAMPLES["gemma2"],
            {"add_sliding_window_pattern": lambda self, value: self.add_array(
                gguf.Keys.Attention.SLIDING_WINDOW_PATTERN.format(arch=self.arch), [True])},
            r"metadata gemma2\.attention\.sliding_window_pattern: must list one bool a layer",
        ),
        (
            FAMILY_EXAMPLES["llama-linear-bias"],
            {"add_rope_scaling_type": lambda self, value: self.add_string("llama.rope.scaling.type", "yarn")},
            r"metadata llama\.rope\.scaling\.type: not a RoPE scaling the suite implements",
        ),
    ],
    ids=["pattern too short", "yarn scaling"],
)  # fmt: skip
def test_switch_metadata_the_reader_cannot_honour_is_a_named_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: ModelConfig, patches: dict, message: str
) -> None:
    path = _write_with(tmp_path, monkeypatch, config, **patches)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


# Llama-3.1-8B's RoPE (its config.json: rope_theta 500000, head_dim 128, rope_scaling llama3 8 / 1 / 4 / 8192).
LLAMA31_ROPE = RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_n_ctx=8192)
LLAMA31 = FAMILY_EXAMPLES["llama3"].replace(
    d_model=256, n_heads=2, n_kv_heads=1, rope_theta=500000.0, rope_scaling=LLAMA31_ROPE
)


@pytest.mark.parametrize(
    "config",
    [
        FAMILY_EXAMPLES["llama3"],
        LLAMA31,
    ],
    ids=["example", "llama-3.1 rope"],
)  # fmt: skip
def test_a_llama3_file_with_only_rope_freqs_as_the_converter_writes_it_reads_back_its_scaling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: ModelConfig
) -> None:
    path = _write_with(tmp_path, monkeypatch, config, LLAMA3_KEY="x.unread.{}")
    assert not any(name.startswith("lm_verifier.rope") for name in fields(path))
    checkpoint = load_checkpoint(path)
    assert checkpoint.config == config
    assert any("solved from rope_freqs.weight" in finding for finding in checkpoint.findings)


def test_rope_freqs_that_no_llama3_scaling_gives_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = LLAMA31
    real = gguf_format.llama3_rope_factors

    def bent(c: ModelConfig) -> np.ndarray:
        table = real(c).copy()
        assert 1 < table[31] < 8  # in the band between (indices 29 to 34 here)
        table[31] *= np.float32(1.01)  # one factor of the band between off the line of the others
        return table

    path = _write_with(tmp_path, monkeypatch, config, LLAMA3_KEY="x.unread.{}", llama3_rope_factors=bent)
    with pytest.raises(CheckpointError, match=r"rope_freqs\.weight: Llama 3 RoPE factors that no scaling"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    ("config", "one_form"),
    [
        (FAMILY_EXAMPLES["gemma2"].replace(query_scale=16), {"query_scale": None}),  # d_head
        (FAMILY_EXAMPLES["qwen3"].replace(sliding_window=8, layer_types=("sliding_attention",) * 2),
         {"layer_types": ()}),
        (FAMILY_EXAMPLES["qwen3"].replace(sliding_window=8, layer_types=("full_attention",) * 2),
         {"sliding_window": None, "layer_types": ()}),
        (FAMILY_EXAMPLES["gemma"].replace(head_dim=16), {"head_dim": None}),  # d_model / n_heads
    ],
    ids=["query scale d_head", "every layer slides", "no layer slides", "head_dim d_model / n_heads"],
)  # fmt: skip
def test_the_same_model_written_another_way_reads_back_in_the_config_reader_s_one_form(
    tmp_path: Path, config: ModelConfig, one_form: dict
) -> None:
    write_gguf(tmp_path / "m.gguf", config, init_weights(config))
    assert load_checkpoint(tmp_path / "m.gguf").config == config.replace(**one_form)


def test_a_switch_value_the_config_refuses_is_named_by_its_gguf_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write_with(
        tmp_path, monkeypatch, FAMILY_EXAMPLES["gemma2"],
        add_attn_logit_softcapping=lambda self, value: self.add_float32("gemma2.attn_logit_softcapping", -50.0),
    )  # fmt: skip
    with pytest.raises(CheckpointError, match=r"metadata gemma2\.attn_logit_softcapping: must be a finite positive"):
        load_checkpoint(path)


def _family(config: ModelConfig) -> str:
    windowless = all(config.window(i) is None for i in range(config.n_layers))
    return "llama" if config.family == "mistral" and windowless else config.family


def same_model(a: ModelConfig, b: ModelConfig) -> bool:
    """The same model, whichever of its equal spellings each config uses (head_dim None or d_model /
    n_heads, query_scale None or d_head, rotary_dim None or d_head, d_expert None or d_ff, a window no
    layer uses or none, layer_types empty or all sliding; Mistral without a window is Llama, as
    llama.cpp's `llama` architecture stores both)."""
    spelled = ("family", "head_dim", "query_scale", "sliding_window", "layer_types", "rotary_dim", "d_expert")
    fields = [f for f in a.to_dict() if f not in spelled]
    return (
        _family(a) == _family(b)
        and all(getattr(a, f) == getattr(b, f) for f in fields)
        and (a.d_head, a.attention_scale) == (b.d_head, b.attention_scale)
        and (a.rotated_dims, a.expert_d_ff) == (b.rotated_dims, b.expert_d_ff)
        and [a.window(i) for i in range(a.n_layers)] == [b.window(i) for i in range(b.n_layers)]
    )


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(config=configs(max_n_ctx=64, max_layers=3))
def test_every_config_llama_cpp_can_hold_reads_back_as_the_same_model(tmp_path: Path, config: ModelConfig) -> None:
    assume(gguf_format.unsupported(config) is None)
    weights = init_weights(config, seed=1)
    write_gguf(tmp_path / "m.gguf", config, weights)
    checkpoint = load_checkpoint(tmp_path / "m.gguf")
    assert same_model(checkpoint.config, config), (checkpoint.config, config)
    one = np.float32(1)
    for name, w in weights.items():
        plus_one = config.norm_plus_one and name.endswith("norm.weight")
        np.testing.assert_array_equal(one + checkpoint.weights[name] if plus_one else checkpoint.weights[name],
                                      one + w if plus_one else w, err_msg=name)  # fmt: skip


@needs.torch
def test_bfloat16_files_as_the_converter_keeps_them_read_back_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Gemma 2 checkpoint published in bfloat16 is converted to BF16 matrices: read back as the
    bfloat16 values (torch's rounding of the same float32 weights), each exactly."""
    import torch

    config = FAMILY_EXAMPLES["gemma2"]
    weights = init_weights(config, seed=6)
    monkeypatch.setitem(gguf_format.TENSOR_TYPES, "BF16", gguf.GGMLQuantizationType.BF16)
    monkeypatch.setitem(gguf_format._FILE_TYPES, "BF16", gguf.LlamaFileType.MOSTLY_BF16)
    write_gguf(tmp_path / "m.gguf", config, weights, tensor_type="BF16")
    checkpoint = load_checkpoint(tmp_path / "m.gguf")
    assert any("BF16, dequantized" in finding for finding in checkpoint.findings)
    matrix = "model.layers.1.mlp.down_proj.weight"
    expected = torch.from_numpy(weights[matrix]).bfloat16().float().numpy()
    np.testing.assert_array_equal(checkpoint.weights[matrix], expected)
    assert not np.array_equal(expected, weights[matrix])  # the rounding happened


def _stacked(weights: dict[str, np.ndarray], layer: str, n_experts: int, name: str) -> np.ndarray:
    return np.stack([weights[f"{layer}.experts.{e}.{name}.weight"] for e in range(n_experts)])


@pytest.mark.parametrize("tensor_type", ["F32", "Q8_0"])
def test_mixtral_is_llama_with_each_layer_s_experts_stacked_as_the_converter_merges_them(
    tmp_path: Path, tensor_type: str
) -> None:
    """convert_hf_to_gguf.py's LlamaModel stacks block_sparse_moe.experts.{e}.w1/w3/w2 into
    ffn_gate_exps/ffn_up_exps/ffn_down_exps [n_experts, rows, columns] (GGUF lists the axes reversed),
    the router is ffn_gate_inp, q/k are interleaved as for Llama, and the counts are llama.expert_*."""
    config = GGUF_EXAMPLES["mixtral"]
    weights = init_weights(config, seed=3)
    write_gguf(tmp_path / "m.gguf", config, weights, tensor_type=tensor_type)
    meta = fields(tmp_path / "m.gguf")
    assert (meta["general.architecture"], meta["llama.expert_count"], meta["llama.expert_used_count"]) == (
        "llama",
        4,
        2,
    )
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    shapes = {t.name: [int(n) for n in t.shape] for t in reader.tensors}
    assert shapes["blk.1.ffn_gate_exps.weight"] == [config.d_model, config.d_ff, 4]  # ne: fastest axis first
    assert shapes["blk.1.ffn_down_exps.weight"] == [config.d_ff, config.d_model, 4]
    checkpoint = load_checkpoint(tmp_path / "m.gguf")
    assert checkpoint.config == config
    if tensor_type == "Q8_0":  # each expert's rows quantized as its own: the stack dequantized row by row
        types = {t.name: t.tensor_type.name for t in reader.tensors}
        assert (types["blk.0.ffn_gate_inp.weight"], types["blk.0.ffn_up_exps.weight"]) == ("F32", "Q8_0")
        np.testing.assert_array_equal(  # the router as llama.cpp's quantizer leaves it: exact
            checkpoint.weights["model.layers.0.block_sparse_moe.gate.weight"],
            weights["model.layers.0.block_sparse_moe.gate.weight"],
        )
        for name, w in weights.items():
            if w.ndim == 2:
                assert np.abs(checkpoint.weights[name] - w).max() <= np.abs(w).max() / 127, name
        return
    t = stored(tmp_path / "m.gguf")
    layer = "model.layers.1.block_sparse_moe"
    for gguf_name, hf_name in (("ffn_gate_exps", "w1"), ("ffn_up_exps", "w3"), ("ffn_down_exps", "w2")):
        np.testing.assert_array_equal(t[f"blk.1.{gguf_name}.weight"], _stacked(weights, layer, 4, hf_name))
    np.testing.assert_array_equal(t["blk.1.ffn_gate_inp.weight"], weights[f"{layer}.gate.weight"])
    q = weights["model.layers.0.self_attn.q_proj.weight"].reshape(config.n_heads, config.d_head, -1)
    got = t["blk.0.attn_q.weight"].reshape(config.n_heads, config.d_head, -1)
    np.testing.assert_array_equal(got[:, 1::2], q[:, config.d_head // 2 :])  # row 2i + 1 is HF's i + d/2


def test_qwen2_moe_is_qwen2moe_with_stacked_experts_and_its_shared_expert_under_shexp_names(tmp_path: Path) -> None:
    config = GGUF_EXAMPLES["qwen2_moe"]
    weights = init_weights(config, seed=3)
    write_gguf(tmp_path / "m.gguf", config, weights)
    meta = fields(tmp_path / "m.gguf")
    assert meta["general.architecture"] == "qwen2moe"
    assert (meta["qwen2moe.expert_count"], meta["qwen2moe.expert_used_count"]) == (4, 2)
    assert meta["qwen2moe.expert_feed_forward_length"] == config.d_expert
    assert meta["qwen2moe.expert_shared_feed_forward_length"] == config.d_shared_expert
    assert meta["qwen2moe.feed_forward_length"] == config.d_ff
    t = stored(tmp_path / "m.gguf")
    layer = "model.layers.0.mlp"
    for gguf_name, hf_name in (
        ("ffn_gate_exps", "gate_proj"),
        ("ffn_up_exps", "up_proj"),
        ("ffn_down_exps", "down_proj"),
    ):
        np.testing.assert_array_equal(t[f"blk.0.{gguf_name}.weight"], _stacked(weights, layer, 4, hf_name))
        shared = f"blk.0.{gguf_name.replace('exps', 'shexp')}.weight"
        np.testing.assert_array_equal(t[shared], weights[f"{layer}.shared_expert.{hf_name}.weight"])
    np.testing.assert_array_equal(t["blk.0.ffn_gate_inp.weight"], weights[f"{layer}.gate.weight"])
    np.testing.assert_array_equal(t["blk.0.ffn_gate_inp_shexp.weight"], weights[f"{layer}.shared_expert_gate.weight"])
    np.testing.assert_array_equal(t["blk.0.attn_q.weight"], weights["model.layers.0.self_attn.q_proj.weight"])  # NEOX
    np.testing.assert_array_equal(t["blk.0.attn_v.bias"], weights["model.layers.0.self_attn.v_proj.bias"])


def test_qwen2_moe_s_renormalisation_and_expert_sizes_read_back(tmp_path: Path) -> None:
    """norm_topk_prob under llama.cpp's qwen2moe.expert_weights_norm; experts the size of d_ff read back
    as d_expert None (the config reader's one form)."""
    config = GGUF_EXAMPLES["qwen2_moe"].replace(norm_topk=True, d_expert=None)
    write_gguf(tmp_path / "m.gguf", config, init_weights(config))
    assert fields(tmp_path / "m.gguf")["qwen2moe.expert_weights_norm"] is True
    assert load_checkpoint(tmp_path / "m.gguf").config == config


def test_phi3_keeps_its_fused_matrices_and_stores_the_rotated_dims(tmp_path: Path) -> None:
    """convert_hf_to_gguf.py's Phi3MiniModel maps qkv_proj to attn_qkv and gate_up_proj to ffn_up as
    they are; rope.dimension_count is the rotated part of a head (partial_rotary_factor * d_head)."""
    config = GGUF_EXAMPLES["phi3"]
    weights = init_weights(config, seed=3)
    write_gguf(tmp_path / "m.gguf", config, weights)
    t = stored(tmp_path / "m.gguf")
    np.testing.assert_array_equal(t["blk.1.attn_qkv.weight"], weights["model.layers.1.self_attn.qkv_proj.weight"])
    np.testing.assert_array_equal(t["blk.1.ffn_up.weight"], weights["model.layers.1.mlp.gate_up_proj.weight"])
    assert "blk.1.ffn_gate.weight" not in t and "blk.1.attn_q.weight" not in t
    meta = fields(tmp_path / "m.gguf")
    assert (meta["general.architecture"], meta["phi3.rope.dimension_count"]) == ("phi3", 8)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (FAMILY_EXAMPLES["qwen2_moe"], "qwen2moe architecture routes every layer"),
        (GGUF_EXAMPLES["qwen2_moe"].replace(d_shared_expert=None), "requires the shared expert"),
        (GGUF_EXAMPLES["qwen2_moe"].replace(tie_embeddings=True), "qwen2moe architecture requires output.weight"),
        (FAMILY_EXAMPLES["glm"], "chatglm architecture has n_heads \\* head_dim == d_model"),
    ],
    ids=["qwen2_moe dense layer", "qwen2_moe no shared expert", "qwen2_moe tied", "glm head_dim"],
)
def test_what_no_architecture_holds_among_the_new_families_is_refused(
    tmp_path: Path, config: ModelConfig, message: str
) -> None:
    with pytest.raises(CheckpointError, match=message):
        write_gguf(tmp_path / "m.gguf", config, init_weights(config))
    assert list(tmp_path.iterdir()) == []


def test_glm_is_chatglm_with_q_and_k_as_they_are_and_gate_up_fused(tmp_path: Path) -> None:
    """convert_hf_to_gguf.py writes GlmForCausalLM as chatglm, whose RoPE (llama.cpp's NORM type) pairs
    (2i, 2i + 1) of the first rope.dimension_count dims, as GLM computes on the stored rows: q/k kept
    as they are (not permuted as for Llama), gate_up_proj as ffn_up."""
    config = GGUF_EXAMPLES["glm"]
    weights = init_weights(config, seed=3)
    write_gguf(tmp_path / "m.gguf", config, weights)
    t = stored(tmp_path / "m.gguf")
    np.testing.assert_array_equal(t["blk.0.attn_q.weight"], weights["model.layers.0.self_attn.q_proj.weight"])
    np.testing.assert_array_equal(t["blk.0.attn_k.bias"], weights["model.layers.0.self_attn.k_proj.bias"])
    np.testing.assert_array_equal(t["blk.1.ffn_up.weight"], weights["model.layers.1.mlp.gate_up_proj.weight"])
    meta = fields(tmp_path / "m.gguf")
    assert (meta["general.architecture"], meta["chatglm.rope.dimension_count"]) == ("chatglm", 8)


def test_partial_rope_outside_phi3_is_a_named_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write_with(
        tmp_path, monkeypatch, GGUF_EXAMPLES["qwen2"],
        add_rope_dimension_count=lambda self, value: self.add_uint32("qwen2.rope.dimension_count", 8),
    )  # fmt: skip
    with pytest.raises(CheckpointError, match=r"qwen2\.rope\.dimension_count: partial RoPE is not implemented"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    ("patches", "message"),
    [
        (
            {"add_expert_count": lambda self, value: self.add_uint32("llama.expert_count", 4096)},
            r"metadata llama\.expert_count: is not the number of experts blk\.0's ffn_gate_exps\.weight stacks "
            r"\(expected 4, found 4096\)",
        ),
        (
            {"add_expert_used_count": lambda self, value: self.add_uint32("llama.expert_used_count", 5)},
            r"metadata llama\.expert_used_count: must be at most n_experts=4",
        ),
    ],
    ids=["expert count not stored", "top k above the count"],
)  # fmt: skip
def test_expert_metadata_the_tensors_or_the_config_refuse_is_named_by_its_gguf_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patches: dict, message: str
) -> None:
    path = _write_with(tmp_path, monkeypatch, GGUF_EXAMPLES["mixtral"], **patches)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


def test_a_qwen2moe_file_without_expert_weights_norm_reads_as_llama_cpp_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """convert_hf_to_gguf.py's Qwen2MoeModel writes no expert_weights_norm: read as no renormalisation,
    what llama.cpp's qwen2moe computes (tests/llamacpp/test_moe_families.py), with a finding."""
    config = GGUF_EXAMPLES["qwen2_moe"].replace(norm_topk=True)
    path = _write_with(tmp_path, monkeypatch, config, add_expert_weights_norm=lambda self, value: None)
    checkpoint = load_checkpoint(path)
    assert checkpoint.config == config.replace(norm_topk=False)
    assert any("qwen2moe.expert_weights_norm is not stored; false assumed" in f for f in checkpoint.findings)


_G = GGUF_EXAMPLES
VARIANTS = {
    "mixtral window tied llama3": _G["mixtral"].replace(
        sliding_window=8, tie_embeddings=True, rope_scaling=FAMILY_EXAMPLES["llama3"].rope_scaling
    ),
    "mixtral top-1 of 3": _G["mixtral"].replace(n_experts=3, top_k=1),
    "qwen2_moe experts of d_ff, renormalised, top-1": _G["qwen2_moe"].replace(d_expert=96, norm_topk=True, top_k=1),
    "qwen2_moe windows by layer": _G["qwen2_moe"].replace(
        sliding_window=8, layer_types=("sliding_attention", "full_attention")
    ),
    "phi3 whole head, window": _G["phi3"].replace(rotary_dim=16, sliding_window=8),
    "glm whole head, no bias": _G["glm"].replace(rotary_dim=16, qkv_bias=False),
}


@pytest.mark.parametrize("config", list(VARIANTS.values()), ids=list(VARIANTS))
def test_the_new_families_switches_read_back_as_the_same_model(tmp_path: Path, config: ModelConfig) -> None:
    """What the drawn round trip above covers once the strategies draw these families, spelled out."""
    weights = init_weights(config, seed=1)
    write_gguf(tmp_path / "m.gguf", config, weights)
    checkpoint = load_checkpoint(tmp_path / "m.gguf")
    assert same_model(checkpoint.config, config), (checkpoint.config, config)
    assert checkpoint.config.family == config.family
    for name, w in weights.items():
        np.testing.assert_array_equal(checkpoint.weights[name], w, err_msg=name)
