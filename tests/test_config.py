"""Configs: presets, conversion to and from transformers and config.json, named errors."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import needs
from tests.family_configs import family_configs, transformers_in_memory_shapes
from verifier.formats import CheckpointError
from verifier.formats.config_json import read_config_json
from verifier.model.config import (
    FAMILIES,
    FAMILY_KEYS,
    HF_CLASSES,
    MOE_FAMILIES,
    PARTIAL_ROTARY_FAMILIES,
    ROPE_FAMILIES,
    ConfigError,
    ModelConfig,
    RopeScaling,
    canonical,
    from_hf_dict,
    from_transformers,
    partial_rotary_factor,
)
from verifier.model.presets import PRESETS, UnknownPresetError, llama2c_hidden_dim, preset
from verifier.properties.strategies import configs


@needs.transformers
@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_round_trips_through_transformers(name: str) -> None:
    config = preset(name)
    assert from_transformers(config.to_transformers()) == config


@needs.transformers
@given(configs(max_n_ctx=64, max_layers=3))
def test_generated_config_round_trips_through_transformers_and_json(config: ModelConfig) -> None:
    assert from_transformers(config.to_transformers()) == canonical(config)
    assert from_hf_dict(json.loads(json.dumps(config.to_hf_dict()))) == canonical(config)


def test_stories15m_and_260k_have_the_published_sizes() -> None:
    s15 = preset("llama2c-stories15M")
    assert (s15.d_model, s15.d_ff, s15.n_layers, s15.n_heads, s15.vocab_size, s15.n_ctx) == (288, 768, 6, 6, 32000, 256)
    s260 = preset("llama2c-stories260K")
    assert (s260.d_model, s260.d_ff, s260.n_layers, s260.n_heads, s260.n_kv_heads) == (64, 172, 5, 8, 4)
    assert (s260.vocab_size, s260.n_ctx) == (512, 512)


@pytest.mark.parametrize(
    ("dim", "multiple_of", "hidden_dim"),
    [(288, 32, 768), (512, 32, 1376), (768, 32, 2048), (64, 4, 172), (4096, 256, 11008)],
)
def test_llama2c_hidden_dim_is_model_py_rule(dim: int, multiple_of: int, hidden_dim: int) -> None:
    """The hidden sizes in the headers of llama2.c's published stories files (and Llama 2 7B's 11008, the
    same rule with multiple_of 256): a rounding down of 8/3 dim instead of up would give 765 for dim 288."""
    assert llama2c_hidden_dim(dim, multiple_of) == hidden_dim


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(UnknownPresetError, match="llama2c-stories15M"):
        preset("gpt-5")


VALID = preset("llama2c-stories260K")


@pytest.mark.parametrize(
    ("changes", "field", "why"),
    [
        ({"d_model": 65}, "n_heads", "not divisible"),
        ({"n_kv_heads": 3}, "n_kv_heads", "not a multiple"),
        ({"n_kv_heads": 16}, "n_kv_heads", "not a multiple"),
        ({"d_model": 72, "n_heads": 8, "n_kv_heads": 8}, "n_heads", "d_head must be even"),
        ({"vocab_size": 0}, "vocab_size", "positive"),
        ({"n_layers": -1}, "n_layers", "positive"),
        ({"d_ff": 2.5}, "d_ff", "must be an int"),
        ({"norm_eps": 0.0}, "norm_eps", "positive"),
        ({"norm_eps": float("nan")}, "norm_eps", "positive"),
        ({"family": "gpt3"}, "family", "expected one of"),
    ],
)
def test_inconsistent_config_names_the_field(changes: dict, field: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as caught:
        dataclasses.replace(VALID, **changes)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_gpt2_with_grouped_query_heads_is_rejected() -> None:
    with pytest.raises(ConfigError, match="no grouped-query") as caught:
        preset("gpt2").replace(n_kv_heads=4)
    assert caught.value.field == "n_kv_heads"


@given(
    field=st.sampled_from(["vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"]),
    value=st.integers(max_value=0),
)
def test_non_positive_sizes_raise_config_error(field: str, value: int) -> None:
    with pytest.raises(ConfigError) as caught:
        VALID.replace(**{field: value})
    # n_heads = 0 may trip a later check first, but never a bare ZeroDivisionError.
    assert caught.value.field in (field, "n_heads", "n_kv_heads")


@given(d_model=st.integers(1, 512), n_heads=st.integers(1, 64))
def test_indivisible_heads_raise_config_error(d_model: int, n_heads: int) -> None:
    fields = {"d_model": d_model, "n_heads": n_heads, "n_kv_heads": n_heads}
    if d_model % n_heads == 0 and (d_model // n_heads) % 2 == 0:
        assert VALID.replace(**fields).d_head == d_model // n_heads
    else:
        with pytest.raises(ConfigError) as caught:
            VALID.replace(**fields)
        assert caught.value.field == "n_heads"


@given(n_heads=st.integers(1, 32), n_kv_heads=st.integers(1, 32))
def test_heads_not_divisible_by_kv_heads_raise_config_error(n_heads: int, n_kv_heads: int) -> None:
    fields = {"d_model": 2 * n_heads, "n_heads": n_heads, "n_kv_heads": n_kv_heads}
    if n_heads % n_kv_heads == 0:
        assert VALID.replace(**fields).n_kv_heads == n_kv_heads
    else:
        with pytest.raises(ConfigError, match="not a multiple"):
            VALID.replace(**fields)


def test_unsupported_hf_settings_are_refused_by_name() -> None:
    fields = preset("gpt2").to_hf_dict()
    with pytest.raises(ConfigError, match="gelu_new") as caught:
        from_hf_dict({**fields, "activation_function": "relu"})
    assert caught.value.field == "activation_function"
    llama = VALID.to_hf_dict()
    with pytest.raises(ConfigError) as caught:
        from_hf_dict({**llama, "mlp_bias": True})
    assert caught.value.field == "mlp_bias"
    with pytest.raises(ConfigError, match="model_type"):
        from_hf_dict({**llama, "model_type": "falcon"})


def test_config_json_reads_old_style_rope_theta(tmp_path) -> None:
    fields = VALID.to_hf_dict()
    del fields["rope_parameters"]
    fields["rope_theta"] = 500000.0
    (tmp_path / "config.json").write_text(json.dumps(fields))
    assert read_config_json(tmp_path) == VALID.replace(rope_theta=500000.0)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"model_type": "llama"}', "missing"),
        ('{"model_type": "gpt2", "n_embd": 8, "n_head": 3, "n_layer": 1, "n_positions": 4, "vocab_size": 5}', "n_head"),
    ],
)
def test_bad_config_json_raises_checkpoint_error_naming_the_file(tmp_path, text: str, what: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=what) as caught:
        read_config_json(path)
    assert str(path) in str(caught.value)


def _saved_config_json(config: ModelConfig) -> dict[str, Any]:
    """The config.json `transformers`' save_pretrained writes for `config`."""
    with tempfile.TemporaryDirectory() as folder:
        config.to_transformers().save_pretrained(folder)
        return json.loads((Path(folder) / "config.json").read_text())


@needs.transformers
@settings(max_examples=40, deadline=None)
@given(family_configs())
def test_save_pretrained_config_json_reads_back_every_switch(config: ModelConfig) -> None:
    """ModelConfig -> to_transformers() -> save_pretrained -> config.json -> from_hf_dict: the same model.
    Catches a key save_pretrained writes that the reader refuses or misreads (a class default it
    leaves implicit, a window written under another key, ...). to_dict() holds PretrainedConfig's own
    keys too (output_attentions, return_dict, id2label, ...)."""
    assert from_hf_dict(_saved_config_json(config)) == canonical(config)
    assert from_transformers(config.to_transformers()) == canonical(config)


@needs.transformers
@pytest.mark.parametrize("family", ROPE_FAMILIES)
def test_each_transformers_default_config_reads_as_transformers_builds_it(family: str) -> None:
    """A config class's defaults (what a config.json leaves out) read as the model transformers builds:
    same weight shapes, same windows per layer, same caps."""
    import torch
    import transformers

    from verifier.model.weights import weight_shapes

    hf_config = getattr(transformers, HF_CLASSES[family][0])(num_hidden_layers=3, vocab_size=64, hidden_size=64,
                                                             intermediate_size=32, pad_token_id=None)  # fmt: skip
    fields = {k: v for k, v in hf_config.to_dict().items() if k in ("model_type", "num_hidden_layers", "vocab_size",
              "hidden_size", "intermediate_size", "num_attention_heads", "max_position_embeddings")}  # fmt: skip
    config = from_hf_dict(fields)  # every other key absent: the class defaults
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == transformers_in_memory_shapes(
        config, weight_shapes(config)
    ) | ({"lm_head.weight": (64, 64)} if config.tie_embeddings else {})
    assert [config.window(i) for i in range(3)] == _transformers_windows(hf_config)
    assert (config.norm_eps, config.rope_theta) == (hf_config.rms_norm_eps, hf_config.rope_parameters["rope_theta"])
    assert config.attn_softcap == getattr(hf_config, "attn_logit_softcapping", None)
    assert config.final_softcap == getattr(hf_config, "final_logit_softcapping", None)
    scalar = getattr(hf_config, "query_pre_attn_scalar", None) or config.d_head
    assert (config.query_scale or config.d_head) == scalar  # what q k^T is scaled by the -1/2 power of


def _transformers_windows(hf_config: Any) -> list[int | None]:
    """Each layer's sliding window as the family's transformers attention takes it."""
    n = hf_config.num_hidden_layers
    if hf_config.model_type in ("mistral", "mixtral", "phi3"):  # config.sliding_window on every layer
        return [hf_config.sliding_window] * n
    kinds = getattr(hf_config, "layer_types", None) or ["full_attention"] * n
    return [hf_config.sliding_window if kinds[i] == "sliding_attention" else None for i in range(n)]


@st.composite
def window_fields(draw: st.DrawFn) -> dict[str, Any]:
    """config.json window keys of Mistral, Qwen2/3, Gemma 2, Mixtral, Qwen2-MoE and Phi-3 as files hold them:
    present or absent, null or not."""
    family = draw(st.sampled_from(["mistral", "qwen2", "qwen3", "gemma2", "mixtral", "qwen2_moe", "phi3"]))
    n = draw(st.integers(1, 5))
    fields: dict[str, Any] = {"model_type": family, "num_hidden_layers": n, "vocab_size": 8, "hidden_size": 16,
                              "intermediate_size": 8, "num_attention_heads": 2, "num_key_value_heads": 2,
                              "head_dim": 8, "max_position_embeddings": 64}  # fmt: skip
    if draw(st.booleans()):
        fields["sliding_window"] = draw(st.sampled_from([None, 1, 3, 4096]))
    if family.startswith("qwen"):
        if draw(st.booleans()):
            fields["use_sliding_window"] = draw(st.booleans())
        if draw(st.booleans()):
            fields["max_window_layers"] = draw(st.integers(0, n + 1))
    if family not in ("mistral", "mixtral", "phi3") and draw(st.booleans()):
        fields["layer_types"] = draw(st.lists(st.sampled_from(["full_attention", "sliding_attention"]),
                                              min_size=n, max_size=n))  # fmt: skip
    return fields


@needs.transformers
@settings(max_examples=60, deadline=None)
@given(window_fields())
def test_windows_per_layer_are_the_ones_transformers_derives(fields: dict[str, Any]) -> None:
    """Qwen2Config's use_sliding_window / max_window_layers rule, Qwen2MoeConfig's other one (even layers
    below max_window_layers), Gemma2Config's default alternation and Mistral's, Mixtral's and Phi-3's
    every-layer window, against transformers' own configs."""
    import transformers

    kwargs = {k: v for k, v in fields.items() if k != "model_type"}
    hf_config = getattr(transformers, HF_CLASSES[fields["model_type"]][0])(**kwargs)
    expected = _transformers_windows(hf_config)
    try:
        config = from_hf_dict(fields)
    except ConfigError as e:  # only sliding layers without a window, which the suite refuses
        if fields["model_type"] == "qwen2_moe" and e.field == "layer_types":  # window 0: transformers fails
            assert not fields.get("use_sliding_window") and "sliding_attention" in fields["layer_types"]
            return
        assert e.field == "sliding_window" and fields["model_type"] in ("gemma2", "qwen2_moe")
        assert None in expected or 0 in expected
        return
    assert [config.window(i) for i in range(fields["num_hidden_layers"])] == expected


LLAMA31 = {"model_type": "llama", "vocab_size": 16, "hidden_size": 16, "intermediate_size": 8, "num_hidden_layers": 1,
           "num_attention_heads": 2, "max_position_embeddings": 131072}  # fmt: skip
L3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


@needs.transformers
@pytest.mark.parametrize(
    "rope",
    [
        {"rope_scaling": {**L3, "rope_type": "llama3"}, "rope_theta": 500000.0},  # Llama 3.1's config.json
        {"rope_parameters": {**L3, "rope_type": "llama3", "rope_theta": 500000.0}},  # transformers 5's
        {"rope_parameters": {**L3, "rope_type": "llama3"}, "rope_theta": 250000.0},  # theta at the top level
        {"rope_scaling": {**L3, "type": "llama3"}, "rope_theta": 500000.0},  # the older key `type`
        {"rope_scaling": {"rope_type": "linear", "factor": 4.0}},
        {"rope_scaling": {"type": "linear", "factor": 2.0}, "rope_parameters": {"rope_type": "default"}},
        {"rope_scaling": None, "rope_theta": 1000000.0},
        {
            "rope_scaling": {k: v for k, v in L3.items() if k != "original_max_position_embeddings"}
            | {"rope_type": "llama3"}
        },  # original_max_position_embeddings defaults to max_position_embeddings
    ],
)
def test_rope_keys_read_as_transformers_standardises_them(rope: dict[str, Any]) -> None:
    import transformers

    config = from_hf_dict({**LLAMA31, **rope})
    params = transformers.LlamaConfig(**{k: v for k, v in {**LLAMA31, **rope}.items() if k != "model_type"})
    params = params.rope_parameters
    assert config.rope_theta == params["rope_theta"]
    if params["rope_type"] == "default":
        assert config.rope_scaling is None
    elif params["rope_type"] == "linear":
        assert config.rope_scaling == RopeScaling("linear", params["factor"])
    else:
        assert config.rope_scaling == RopeScaling("llama3", params["factor"], params["low_freq_factor"],
                                                  params["high_freq_factor"],
                                                  params["original_max_position_embeddings"])  # fmt: skip


@pytest.mark.parametrize("key", ["rope_scaling", "rope_parameters"])
@pytest.mark.parametrize("rope_type", ["yarn", "dynamic", "longrope", "su", 3])
def test_an_unimplemented_rope_type_is_refused_naming_the_key(key: str, rope_type: Any) -> None:
    with pytest.raises(ConfigError, match="not implemented") as caught:
        from_hf_dict({**LLAMA31, key: {"rope_type": rope_type, "factor": 4.0}})
    assert caught.value.field == key


def test_a_rope_parameter_the_reader_does_not_know_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as caught:
        from_hf_dict({**LLAMA31, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "beta_fast": 32}})
    assert caught.value.field == "rope_parameters.beta_fast"
    with pytest.raises(ConfigError, match="missing") as caught:
        from_hf_dict({**LLAMA31, "rope_parameters": {"rope_type": "llama3", "factor": 2.0}})
    assert caught.value.field == "rope_parameters.low_freq_factor"
    with pytest.raises(ConfigError, match="at least 1") as caught:  # ModelConfig's rule, named by the file's key
        from_hf_dict({**LLAMA31, "rope_parameters": {"rope_type": "linear", "factor": 0.5}})
    assert caught.value.field == "rope_parameters.factor"


def _hf_dict(family: str) -> dict[str, Any]:
    config = ModelConfig(family="llama", vocab_size=16, n_ctx=32, d_model=16, n_layers=2, n_heads=2,
                         n_kv_heads=1, d_ff=8, norm_eps=1e-6, tie_embeddings=False)  # fmt: skip
    from verifier.model.config import FAMILY_SWITCHES

    experts = {"n_experts": 4, "top_k": 2} if family in MOE_FAMILIES else {}
    return config.replace(family=family, **FAMILY_SWITCHES[family][0], **experts).to_hf_dict()  # type: ignore[index]


_FOREIGN_KEYS = [("use_qk_norm", True), ("rope_thetta", 10000.0), ("num_experts", 8), ("quantization_config", {}),
                 ("auto_map", {"AutoModelForCausalLM": "x.Y"}), ("partial_rotary_factor", 0.5),
                 ("is_encoder_decoder", True), ("moe_intermediate_size", 8), ("first_k_dense_replace", 1)]  # fmt: skip


@pytest.mark.parametrize(
    ("family", "key", "value"),
    [
        (family, key, value)
        for family in ROPE_FAMILIES
        for key, value in _FOREIGN_KEYS
        # keys the family reads: Qwen2-MoE's experts, Mixtral's other name of them, Phi-3's and GLM's partial rotary
        if key not in FAMILY_KEYS[family] and not (key == "partial_rotary_factor" and family in PARTIAL_ROTARY_FAMILIES)
    ],
)
def test_a_key_the_reader_does_not_understand_is_an_error_naming_it(family: str, key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        from_hf_dict({**_hf_dict(family), key: value})
    assert caught.value.field == key
    assert str(caught.value).startswith(f"{key}: ")


@pytest.mark.parametrize(
    ("family", "key", "value"),
    [
        ("mistral", "attention_bias", True),  # MistralAttention has no biases whatever the key says
        ("qwen2", "attention_bias", True),
        ("llama", "sliding_window", 4),  # LlamaAttention has no window
        ("llama", "layer_types", ["full_attention"] * 2),
        ("gemma", "attn_logit_softcapping", 50.0),  # Gemma (1) has no caps
        ("qwen3", "query_pre_attn_scalar", 4),
        ("mistral", "use_sliding_window", True),
        ("llama", "num_experts_per_tok", 2),  # a dense family has no router
        ("phi3", "num_local_experts", 4),
        ("mixtral", "qkv_bias", True),
        ("mixtral", "norm_topk_prob", False),  # MixtralConfig has no such key: Mixtral always renormalises
        ("glm", "sliding_window", 4),  # GlmAttention has no window
        ("phi3", "layer_types", ["full_attention"] * 2),
        ("mixtral", "partial_rotary_factor", 0.5),  # Mixtral's RoPE would read it; its attention rotates all dims
        ("qwen2_moe", "partial_rotary_factor", 0.5),
        ("llama", "original_max_position_embeddings", 4096),
    ],
)
def test_a_key_of_another_family_is_refused(family: str, key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        from_hf_dict({**_hf_dict(family), key: value})
    assert caught.value.field == key


@pytest.mark.parametrize(
    ("family", "key", "value", "field"),
    [
        ("llama", "mlp_bias", True, "mlp_bias"),
        ("llama", "pretraining_tp", 2, "pretraining_tp"),
        ("llama", "hidden_act", "gelu", "hidden_act"),
        ("gemma", "use_bidirectional_attention", True, "use_bidirectional_attention"),
        ("gemma", "hidden_act", "gelu_new", "hidden_act"),
        ("gemma", "hidden_activation", "gelu", "hidden_activation"),  # disagrees with hidden_act's tanh GELU
        ("gemma2", "hidden_activation", "gelu", "hidden_activation"),  # ACT2FN["gelu"] is erf GELU in Gemma 2
        ("gemma2", "sliding_window_size", 7, "sliding_window_size"),
        ("gemma2", "query_pre_attn_scalar", 2.5, "query_pre_attn_scalar"),
        ("qwen2", "head_dim", 4, "head_dim"),  # Qwen2's d_head is hidden_size / num_attention_heads (8)
        ("qwen2", "use_mrope", True, "use_mrope"),
        ("mistral", "sliding_window", 0, "sliding_window"),
        ("qwen3", "max_window_layers", -1, "max_window_layers"),
        ("gemma2", "layer_types", ["sliding_attention"], "layer_types"),  # one per layer
        ("gemma2", "attn_logit_softcapping", "50", "attn_logit_softcapping"),
        ("qwen2_moe", "qkv_bias", False, "qkv_bias"),
        ("phi3", "attention_bias", True, "attention_bias"),  # Phi3Attention has no biases
        ("phi3", "head_dim", 4, "head_dim"),  # Phi-3's d_head is hidden_size / num_attention_heads (8)
        (
            "phi3",
            "rope_parameters",
            {"rope_type": "default", "partial_rotary_factor": 0.375},
            "rope_parameters.partial_rotary_factor",
        ),  # int(8 * 0.375) = 3: odd
        (
            "glm",
            "rope_parameters",
            {"rope_type": "default", "partial_rotary_factor": 0.0},
            "rope_parameters.partial_rotary_factor",
        ),
        (
            "glm",
            "rope_parameters",
            {"rope_type": "default", "partial_rotary_factor": 1.5},
            "rope_parameters.partial_rotary_factor",
        ),
        ("glm", "rope_parameters", {"rope_type": "linear", "factor": 2.0}, "rope_parameters"),
        ("phi3", "rope_scaling", {"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}, "rope_scaling"),
        ("phi3", "rope_scaling", {"type": "su", "long_factor": [1.0], "short_factor": [1.0]}, "rope_scaling"),
        ("phi3", "rope_parameters", {"rope_type": "yarn", "factor": 2.0}, "rope_parameters"),  # read as longrope
        ("mixtral", "rope_parameters", {"rope_type": "yarn", "factor": 2.0}, "rope_parameters"),
        ("mixtral", "num_experts_per_tok", 5, "num_experts_per_tok"),  # more than the 4 experts
        ("mixtral", "num_experts", 3, "num_experts"),  # disagrees with num_local_experts
        ("mixtral", "num_local_experts", 0, "num_local_experts"),
        ("qwen2_moe", "num_experts", True, "num_experts"),
        ("qwen2_moe", "norm_topk_prob", 1, "norm_topk_prob"),
        ("qwen2_moe", "mlp_only_layers", [2], "mlp_only_layers"),  # layers 0 and 1 only: transformers ignores 2
        ("qwen2_moe", "mlp_only_layers", 1, "mlp_only_layers"),
        ("qwen2_moe", "decoder_sparse_step", 0, "decoder_sparse_step"),  # transformers: ZeroDivisionError
        ("qwen2_moe", "shared_expert_intermediate_size", -1, "shared_expert_intermediate_size"),
        ("qwen2_moe", "moe_intermediate_size", 0, "moe_intermediate_size"),
        (
            "qwen2_moe",
            "layer_types",
            ["sliding_attention", "full_attention"],
            "layer_types",
        ),  # use_sliding_window false
    ],
)
def test_a_value_that_changes_the_math_is_refused_naming_the_key(family: str, key: str, value: Any, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_hf_dict({**_hf_dict(family), key: value})
    assert caught.value.field == field


def test_gemma_reads_the_activation_key_its_mlp_uses() -> None:
    """Gemma's MLP reads hidden_act, whose old value "gelu" GemmaConfig maps to tanh GELU; Gemma 2's
    reads hidden_activation (its hidden_act is ignored by transformers, so only an agreeing value passes)."""
    gemma = {k: v for k, v in _hf_dict("gemma").items() if k != "hidden_act"}
    for act in ("gelu", "gelu_pytorch_tanh"):
        assert from_hf_dict({**gemma, "hidden_act": act, "hidden_activation": None}).mlp_act == "gelu_tanh"
    assert from_hf_dict(gemma).mlp_act == "gelu_tanh"  # GemmaConfig's default
    gemma2 = _hf_dict("gemma2")
    assert from_hf_dict({**gemma2, "hidden_act": "gelu_pytorch_tanh"}).mlp_act == "gelu_tanh"
    with pytest.raises(ConfigError) as caught:
        from_hf_dict({**gemma2, "hidden_act": "silu"})
    assert caught.value.field == "hidden_act"


def test_metadata_keys_of_published_configs_are_accepted() -> None:
    metadata = {"torch_dtype": "bfloat16", "transformers_version": "4.51.0", "initializer_range": 0.02,
                "use_cache": True, "attention_dropout": 0.0, "pad_token_id": 0, "_name_or_path": "x",
                "cache_implementation": "hybrid", "pretraining_tp": 1}  # fmt: skip
    llama = _hf_dict("llama")
    assert from_hf_dict({**llama, **metadata}) == from_hf_dict(llama)


@pytest.mark.parametrize("family", FAMILIES[1:])
def test_canonical_is_idempotent_and_keeps_every_window(family: str) -> None:
    config = from_hf_dict(_hf_dict(family))
    assert canonical(canonical(config)) == canonical(config)
    assert [canonical(config).window(i) for i in range(config.n_layers)] == [
        config.window(i) for i in range(config.n_layers)
    ]


# openai-community/gpt2's config.json, every key, as published (several identical copies found by the
# search tools, their repositories not named by the index); read as the gpt2 preset.
GPT2_PUBLISHED = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "bos_token_id": 50256,
    "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
    "resid_pdrop": 0.1, "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
    "summary_type": "cls_index", "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}}, "vocab_size": 50257,
}  # fmt: skip


def test_gpt2_published_config_json_reads_every_key() -> None:
    assert from_hf_dict(GPT2_PUBLISHED) == preset("gpt2")
    for key, value in (("use_qk_norm", True), ("n_embed", 768), ("add_cross_attention", True), ("n_special", 2)):
        with pytest.raises(ConfigError) as caught:
            from_hf_dict({**GPT2_PUBLISHED, key: value})
        assert caught.value.field == key


@needs.transformers
@pytest.mark.parametrize("name", ["gpt2", "llama2c-stories260K"])
def test_save_pretrained_config_json_of_a_preset_reads_back(name: str) -> None:
    assert from_hf_dict(_saved_config_json(preset(name))) == preset(name)


def test_partial_rotary_factor_turns_back_into_the_rotated_dims() -> None:
    """transformers rotates int(d_head * factor) dims; rotated / d_head is one ulp short for 30 of 44 dims
    (int gives 29), so the writer nudges the factor up where needed."""
    assert int(44 * (30 / 44)) == 29
    for d_head in range(2, 513, 2):
        for rotated in range(2, d_head + 1, 2):
            assert int(d_head * partial_rotary_factor(rotated, d_head)) == rotated, (rotated, d_head)


@st.composite
def partial_rotary_fields(draw: st.DrawFn) -> dict[str, Any]:
    """Phi-3 and GLM config.json fields with partial_rotary_factor in rope_parameters, at the top level, in
    both (rope_parameters wins), or absent (the class default: Phi-3 1, GLM 0.5)."""
    family = draw(st.sampled_from(PARTIAL_ROTARY_FAMILIES))
    fields: dict[str, Any] = {"model_type": family, "num_hidden_layers": 1, "vocab_size": 8, "hidden_size": 32,
                              "intermediate_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
                              "max_position_embeddings": 64}  # fmt: skip
    if family == "glm":
        fields["head_dim"] = draw(st.sampled_from([8, 16, 24]))  # int(d_head * factor) even for every factor
    factors = st.sampled_from([0.25, 0.5, 0.75, 1.0])
    if draw(st.booleans()):
        fields["partial_rotary_factor"] = draw(factors)
    if draw(st.booleans()):
        fields["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": draw(factors),
        }
    return fields


@needs.transformers
@settings(max_examples=40, deadline=None)
@given(partial_rotary_fields())
def test_partial_rotary_reads_the_dims_transformers_rotates(fields: dict[str, Any]) -> None:
    """The rotated dims are the ones the family's rotary embedding makes cos/sin for (two per inverse frequency)."""
    import importlib

    import transformers

    family = fields["model_type"]
    hf_config = getattr(transformers, HF_CLASSES[family][0])(**{k: v for k, v in fields.items() if k != "model_type"})
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    rotary = getattr(module, f"{family.capitalize()}RotaryEmbedding")(config=hf_config)
    config = from_hf_dict(fields)
    assert config.rotated_dims == 2 * rotary.inv_freq.shape[0]
    assert from_hf_dict(config.to_hf_dict()) == config


@needs.transformers
@settings(max_examples=30, deadline=None)
@given(step=st.integers(1, 3), listed=st.sets(st.integers(0, 3)), norm=st.booleans())
def test_qwen2_moe_dense_layers_are_the_ones_transformers_builds_dense(step: int, listed: set, norm: bool) -> None:
    """mlp_only_layers and decoder_sparse_step: a layer is dense where Qwen2MoeDecoderLayer builds a Qwen2MoeMLP."""
    import torch
    import transformers

    fields = {"model_type": "qwen2_moe", "num_hidden_layers": 4, "vocab_size": 8, "hidden_size": 8,
              "intermediate_size": 8, "moe_intermediate_size": 4, "shared_expert_intermediate_size": 4,
              "num_attention_heads": 2, "num_key_value_heads": 2, "num_experts": 3, "num_experts_per_tok": 2,
              "decoder_sparse_step": step, "mlp_only_layers": sorted(listed), "norm_topk_prob": norm,
              "max_position_embeddings": 64}  # fmt: skip
    hf_config = transformers.Qwen2MoeConfig(**{k: v for k, v in fields.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    dense = tuple(i for i, layer in enumerate(model.model.layers) if type(layer.mlp).__name__ == "Qwen2MoeMLP")
    config = from_hf_dict(fields)
    assert config.dense_layers == dense
    routers = [layer.mlp.gate for i, layer in enumerate(model.model.layers) if i not in dense]
    assert all(router.norm_topk_prob == config.norm_topk for router in routers)
    assert from_hf_dict(config.to_hf_dict()) == config


@needs.transformers
def test_mixtral_reads_num_experts_as_transformers_does() -> None:
    """MixtralConfig's attribute_map: num_experts is another name of num_local_experts."""
    import transformers

    fields = {k: v for k, v in _hf_dict("mixtral").items() if k != "num_local_experts"} | {"num_experts": 3}
    hf_config = transformers.MixtralConfig(
        **{k: v for k, v in fields.items() if k not in ("model_type", "architectures")}
    )
    assert from_hf_dict(fields).n_experts == hf_config.num_local_experts == 3


@needs.transformers
def test_a_shared_expert_of_size_zero_adds_nothing_in_transformers() -> None:
    """d_shared_expert None is written as shared_expert_intermediate_size 0 (Qwen2MoeSparseMoeBlock always
    builds one), read back as None; in transformers that block's output does not depend on its gate."""
    import torch
    import transformers

    config = from_hf_dict(_hf_dict("qwen2_moe")).replace(d_shared_expert=None)
    fields = config.to_hf_dict()
    assert fields["shared_expert_intermediate_size"] == 0 and from_hf_dict(fields) == config
    torch.manual_seed(0)
    block = transformers.AutoModelForCausalLM.from_config(config.to_transformers()).model.layers[0].mlp
    h = torch.randn(1, 5, config.d_model)
    before = block(h)
    with torch.no_grad():
        block.shared_expert_gate.weight.normal_()
    assert torch.equal(block(h), before)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    family=st.sampled_from(["mixtral", "qwen2_moe", "phi3", "glm"]),
    data=st.data(),
)
def test_any_json_value_of_any_key_the_new_families_read_is_a_config_or_a_config_error(
    family: str, data: st.DataObject
) -> None:
    """Keys of the new readers (experts, shared expert, dense layers, partial rotary, windows) holding any JSON
    value: a validated config or a one-line ConfigError naming a key, never another exception."""
    keys = sorted(FAMILY_KEYS[family] | {"partial_rotary_factor", "rope_parameters", "rope_scaling", "layer_types"})
    changes = data.draw(st.dictionaries(st.sampled_from(keys), _JSON, min_size=1, max_size=3), label="changes")
    try:
        config = from_hf_dict(_hf_dict(family) | changes)
    except ConfigError as e:
        assert "\n" not in str(e) and len(str(e)) < 400
        return
    assert isinstance(config, ModelConfig)


def test_a_rule_across_fields_is_named_by_the_file_s_key_even_where_a_generation_key_shares_the_field_s_name() -> None:
    """top_k > n_experts is ModelConfig's rule on top_k, read from num_experts_per_tok; a config.json's top_k is
    a generation default, not the key to blame."""
    with pytest.raises(ConfigError) as caught:
        from_hf_dict(_hf_dict("mixtral") | {"num_experts_per_tok": 5, "top_k": 50})
    assert caught.value.field == "num_experts_per_tok"


_SMOLLM3 = {"model_type": "smollm3", "num_hidden_layers": 6, "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
            "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 64, "pad_token_id": None,
            "bos_token_id": None, "eos_token_id": None}  # fmt: skip


@needs.transformers
@settings(max_examples=30, deadline=None)
@given(
    listed=st.none() | st.lists(st.sampled_from([0, 1]), min_size=6, max_size=8),
    interval=st.none() | st.integers(1, 7),
    window=st.none() | st.integers(2, 8),
    use_window=st.booleans(),
)
def test_smollm3_s_nope_layers_and_windows_are_the_ones_transformers_builds(
    listed: list[int] | None, interval: int | None, window: int | None, use_window: bool
) -> None:
    """no_rope_layers (1: the layer rotates), no_rope_layer_interval, and the windows SmolLM3Config derives: a
    layer has no RoPE where its attention's use_rope is false, and a window where its sliding_window is set."""
    import torch
    import transformers

    fields = dict(_SMOLLM3, use_sliding_window=use_window, sliding_window=window)
    fields |= {} if listed is None else {"no_rope_layers": listed}
    fields |= {} if interval is None else {"no_rope_layer_interval": interval}
    hf_config = transformers.SmolLM3Config(**{k: v for k, v in fields.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    config = from_hf_dict(fields)
    attention = [layer.self_attn for layer in model.model.layers]
    assert config.nope_layers == tuple(i for i, a in enumerate(attention) if not a.use_rope)
    assert [config.window(i) for i in range(6)] == [a.sliding_window for a in attention]
    assert from_hf_dict(config.to_hf_dict()) == config


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"no_rope_layers": [1, 1, 1, 0, 1]}, "no_rope_layers"),  # shorter than the layers
        ({"no_rope_layers": [1, 1, 2, 0, 1, 1]}, "no_rope_layers"),
        ({"no_rope_layers": [True] * 6}, "no_rope_layers"),  # a flag is not 1
        ({"no_rope_layer_interval": 0}, "no_rope_layer_interval"),
        ({"layer_types": ["sliding_attention"] + ["full_attention"] * 5}, "layer_types"),  # no use_sliding_window
        ({"use_sliding_window": True, "layer_types": ["sliding_attention"] * 6}, "sliding_window"),  # no window
    ],
)
def test_a_smollm3_config_transformers_would_misread_is_refused_by_its_key(changes: dict, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        from_hf_dict(_SMOLLM3 | changes)
    assert raised.value.field == key


def test_keys_smollm3_s_transformers_code_never_reads_take_any_value_there_only() -> None:
    """pretraining_tp 2 is in SmolLM3-3B's config.json, and SmolLM3's code reads no pretraining_tp; Llama's is
    refused at any value but 1 (its tensor-parallel slicing)."""
    assert from_hf_dict(_SMOLLM3 | {"pretraining_tp": 2, "max_window_layers": 28}).family == "smollm3"
    llama = {**_SMOLLM3, "model_type": "llama", "pretraining_tp": 2}
    with pytest.raises(ConfigError, match="pretraining_tp"):
        from_hf_dict(llama)
