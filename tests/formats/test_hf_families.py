"""Hugging Face directories of every family: ours read back, and `transformers`' own `save_pretrained`
read by us (the test that is not our writer checked against our reader), and ours read by `transformers`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import needs
from tests.formats.families import FAMILY_EXAMPLES, NEW_FAMILIES, published_config_json
from verifier.formats import load_checkpoint
from verifier.formats.hf_dir import map_hf_dir, write_hf_dir
from verifier.formats.safetensors_file import read_safetensors
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights, weight_shapes

EXAMPLES = list(FAMILY_EXAMPLES.values())
IDS = list(FAMILY_EXAMPLES)


@pytest.mark.parametrize("config", EXAMPLES, ids=IDS)
def test_every_family_s_directory_reads_back_to_the_same_config_and_weights(
    tmp_path: Path, config: ModelConfig
) -> None:
    weights = init_weights(config, seed=1)
    write_hf_dir(tmp_path, config, weights)
    for checkpoint in (load_checkpoint(tmp_path), map_hf_dir(tmp_path)):  # loaded whole, and mapped
        assert checkpoint.config == config
        assert set(checkpoint.weights) == set(weights)
        for name, w in weights.items():
            np.testing.assert_array_equal(checkpoint.weights[name], w, err_msg=name)


@pytest.mark.parametrize("config", EXAMPLES, ids=IDS)
def test_the_writer_stores_every_family_s_weight_names_and_the_tied_classifier_as_save_pretrained(
    tmp_path: Path, config: ModelConfig
) -> None:
    """Names as `transformers` names its parameters: biases, q/k norms, Gemma 2's four norms; no
    `lm_head.weight` when tied (what save_pretrained writes)."""
    weights = init_weights(config, seed=1)
    write_hf_dir(tmp_path, config, weights)
    _, stored = read_safetensors(tmp_path / "model.safetensors")
    assert {name: a.shape for name, a in stored.items()} == weight_shapes(config)
    assert ("lm_head.weight" in stored) == (not config.tie_embeddings)
    if config.sandwich_norm:  # and OLMo 2 without the norms before the sublayers
        before = {"model.layers.0.input_layernorm.weight", "model.layers.0.pre_feedforward_layernorm.weight"}
        assert "model.layers.0.post_feedforward_layernorm.weight" in stored
        assert before <= set(stored) if config.pre_norm else not before & set(stored)
    if config.qk_norm:
        assert {"model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"} <= set(stored)
    if config.qkv_bias:
        assert "model.layers.0.self_attn.k_proj.bias" in stored


def hf_config(config: ModelConfig) -> Any:
    """`transformers`' config of `config`: for the issue-27 families from the published keys written
    by hand (`published_config_json`), so that these tests do not rest on the suite's config writer."""
    import transformers

    from verifier.model.config import HF_CLASSES

    if config.family not in NEW_FAMILIES:
        return config.to_transformers()
    fields = published_config_json(config)
    del fields["architectures"], fields["model_type"]
    return getattr(transformers, HF_CLASSES[config.family][0])(**fields)


def _saved_by_transformers(config: ModelConfig, directory: Path) -> dict[str, np.ndarray]:
    """A `transformers` model of `config` with every parameter drawn at random (norm weights too, so a
    `1 + w` added or dropped shows), saved by its own `save_pretrained`; the tensors it wrote.

    transformers 5 holds a MoE layer's experts stacked in memory and writes them one by one under the
    published names; the safetensors file is what is compared, so both are read from it."""
    import torch
    import transformers

    from verifier.model.config import HF_CLASSES

    torch.manual_seed(0)
    model_class = getattr(transformers, HF_CLASSES[config.family][1])
    model = model_class(hf_config(config)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.3)
    model.save_pretrained(directory)
    state = {name: t.numpy().copy() for name, t in model.state_dict().items()}
    if config.n_experts:  # the stacked in-memory experts: the file's own names and values instead
        _, stored = read_safetensors(directory / "model.safetensors")
        _check_stacked_experts(config, state, stored)
        return stored
    return state


def _check_stacked_experts(config: ModelConfig, state: dict[str, np.ndarray], stored: dict[str, np.ndarray]) -> None:
    """transformers' in-memory experts [E, 2 f, d] (gate rows, then up) and [E, d, f] are the file's, one
    expert at a time: save_pretrained split them under the published names, nothing else changed."""
    for i in range(config.n_layers):
        if not config.is_moe_layer(i):
            continue
        block = "block_sparse_moe" if config.family == "mixtral" else "mlp"
        names = ("w1", "w3", "w2") if config.family == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        experts = f"model.layers.{i}.mlp.experts."
        gate_up, down = state[experts + "gate_up_proj"], state[experts + "down_proj"]
        for e in range(config.n_experts):
            gate, up, out = (stored[f"model.layers.{i}.{block}.experts.{e}.{n}.weight"] for n in names)
            np.testing.assert_array_equal(gate_up[e], np.concatenate([gate, up]))
            np.testing.assert_array_equal(down[e], out)


@needs.transformers
@pytest.mark.parametrize("config", EXAMPLES, ids=IDS)
def test_save_pretrained_stores_exactly_the_canonical_names_shapes_and_values(
    tmp_path: Path, config: ModelConfig
) -> None:
    """The weight half of reading transformers' directories, which does not need config.json read."""
    state = _saved_by_transformers(config, tmp_path)
    _, stored = read_safetensors(tmp_path / "model.safetensors")
    shapes = weight_shapes(config)
    assert {name: a.shape for name, a in stored.items()} == shapes
    for name in shapes:
        np.testing.assert_array_equal(stored[name], state[name], err_msg=name)


@needs.transformers
@pytest.mark.parametrize("config", EXAMPLES, ids=IDS)
def test_a_directory_saved_by_transformers_reads_back_to_the_same_config_and_weights(
    tmp_path: Path, config: ModelConfig
) -> None:
    state = _saved_by_transformers(config, tmp_path)
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint.config == config
    assert set(checkpoint.weights) == set(weight_shapes(config))
    for name in checkpoint.weights:
        np.testing.assert_array_equal(checkpoint.weights[name], state[name], err_msg=name)


# The transformers config keys our config.json must give the value transformers' own config has.
HF_KEYS = ("hidden_size", "num_hidden_layers", "num_key_value_heads", "head_dim", "rope_parameters", "sliding_window",
           "layer_types", "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
           "attention_bias", "tie_word_embeddings", "num_local_experts", "num_experts", "num_experts_per_tok",
           "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob", "mlp_only_layers",
           "qkv_bias")  # fmt: skip
# (partial_rotary_factor: transformers 5 reads it from rope_parameters, where both configs hold it.)


@needs.transformers
@pytest.mark.parametrize("config", EXAMPLES, ids=IDS)
def test_transformers_reads_our_directory_of_every_family_to_the_same_config_and_weights(
    tmp_path: Path, config: ModelConfig
) -> None:
    from transformers import AutoModelForCausalLM

    weights = init_weights(config, seed=4)
    write_hf_dir(tmp_path, config, weights)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert type(model).__name__ == config.to_hf_dict()["architectures"][0]
    expected = hf_config(config).to_dict()
    got = model.config.to_dict()
    for key in HF_KEYS:  # the keys its config class has (Phi-3's has no head_dim: hidden_size / heads)
        assert got.get(key) == expected.get(key) or key not in expected, key
    _same_weights_in_transformers(config, model, weights)


def _same_weights_in_transformers(config: ModelConfig, model: Any, weights: dict[str, np.ndarray]) -> None:
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    if config.n_experts:
        stored = {name: w for name, w in weights.items() if ".experts." in name}
        _check_stacked_experts(config, state, stored)
        weights = {name: w for name, w in weights.items() if ".experts." not in name}
    for name, w in weights.items():
        np.testing.assert_array_equal(state[name.replace("block_sparse_moe.", "mlp.")], w, err_msg=name)
    if config.tie_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


@needs.transformers
@pytest.mark.parametrize("name", NEW_FAMILIES)
@pytest.mark.parametrize("shard_bytes", [None, 20_000], ids=["one file", "sharded"])
def test_transformers_loads_the_weights_we_write_for_the_new_families_every_one_of_them(
    tmp_path: Path, name: str, shard_bytes: int | None
) -> None:
    """Our weight files under a config.json of the published keys (written by hand): transformers 5
    loads every tensor (nothing missing, unexpected or mismatched) and stacks the experts from them."""
    import json

    from transformers import AutoModelForCausalLM

    config = FAMILY_EXAMPLES[name]
    weights = init_weights(config, seed=4)
    write_hf_dir(tmp_path, config, weights, max_shard_bytes=shard_bytes)
    (tmp_path / "config.json").write_text(json.dumps(published_config_json(config)))
    model, info = AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == (set(), set(), set()), info
    _same_weights_in_transformers(config, model, weights)


@pytest.mark.parametrize("name", NEW_FAMILIES)
def test_the_new_families_sharded_read_back_to_the_same_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The weight half of a sharded directory (experts across shards), whatever the config reader
    does: config.json's reading is stood in for by the config itself."""
    from verifier.formats import hf_dir

    config = FAMILY_EXAMPLES[name]
    weights = init_weights(config, seed=5)
    write_hf_dir(tmp_path, config, weights, max_shard_bytes=20_000)
    shards = sorted(tmp_path.glob("model-*-of-*.safetensors"))
    assert len(shards) > 3
    monkeypatch.setattr(hf_dir, "read_config_json", lambda directory: config)
    for checkpoint in (hf_dir.read_hf_dir(tmp_path), map_hf_dir(tmp_path)):
        assert checkpoint.format == "hf-safetensors-sharded"
        assert set(checkpoint.weights) == set(weights)
        for weight, w in weights.items():
            np.testing.assert_array_equal(checkpoint.weights[weight], w, err_msg=weight)


@needs.transformers
@pytest.mark.parametrize("name", NEW_FAMILIES)
def test_a_sharded_directory_saved_by_transformers_reads_to_its_model_s_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """transformers' own sharded save (its index, its shard names, experts split on save) read by our
    reader, loaded whole and mapped, gives its model's weights; config.json's reading is stood in for
    by the config (the config reader of these families is another branch's work)."""
    import torch
    import transformers

    from verifier.formats import hf_dir
    from verifier.model.config import HF_CLASSES

    config = FAMILY_EXAMPLES[name]
    torch.manual_seed(1)
    model = getattr(transformers, HF_CLASSES[config.family][1])(hf_config(config)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.3)
    model.save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    monkeypatch.setattr(hf_dir, "read_config_json", lambda directory: config)
    for checkpoint in (hf_dir.read_hf_dir(tmp_path), map_hf_dir(tmp_path)):
        assert checkpoint.format == "hf-safetensors-sharded"
        assert set(checkpoint.weights) == set(weight_shapes(config))
        _same_weights_in_transformers(config, model, {k: np.asarray(v) for k, v in checkpoint.weights.items()})
