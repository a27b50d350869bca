"""Configs: presets, conversion to and from transformers and config.json, named errors."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import needs
from verifier.formats import CheckpointError
from verifier.formats.config_json import read_config_json
from verifier.model.config import ConfigError, ModelConfig, from_hf_dict, from_transformers
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
    assert from_transformers(config.to_transformers()) == config
    assert from_hf_dict(json.loads(json.dumps(config.to_hf_dict()))) == config


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
        from_hf_dict({**llama, "attention_bias": True})
    assert caught.value.field == "attention_bias"
    with pytest.raises(ConfigError, match="model_type"):
        from_hf_dict({**llama, "model_type": "mistral"})


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
