"""Hostile config.json files (issue 25, items 1, 2 and 4): each is refused in one CheckpointError line.

Each case is a tiny file whose claim would otherwise hang the reader (a size of 10**19 looped over
per layer), crash it (RecursionError, AttributeError), or be accepted although it makes the model
meaningless (an infinite epsilon zeroes every activation, and then every comparison passes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from verifier.cli import main
from verifier.formats.config_json import read_config_json
from verifier.formats.errors import CheckpointError
from verifier.formats.hf_dir import write_hf_dir
from verifier.model.config import FAMILIES, N_LAYERS_MAX, ModelConfig
from verifier.model.presets import preset
from verifier.model.weights import init_weights

LLAMA = preset("llama2c-stories260K")
GPT2 = preset("gpt2").replace(vocab_size=50, n_ctx=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=64)

# (family's valid fields to start from, key changed, its hostile value, words the error must contain)
CASES: list[tuple[ModelConfig, str, Any, str]] = [
    (LLAMA, "num_hidden_layers", 10**19, "num_hidden_layers: must be at most"),
    (LLAMA, "hidden_size", 10**19, "hidden_size: must be at most"),
    (LLAMA, "num_attention_heads", 10**19, "num_attention_heads: must be at most"),
    (LLAMA, "num_key_value_heads", 10**19, "num_key_value_heads: must be at most"),
    (LLAMA, "intermediate_size", 10**19, "intermediate_size: must be at most"),
    (LLAMA, "vocab_size", 10**19, "vocab_size: must be at most"),
    (LLAMA, "max_position_embeddings", 10**19, "max_position_embeddings: must be at most"),
    (LLAMA, "max_position_embeddings", 1e30, "max_position_embeddings: must be an int"),
    (LLAMA, "num_hidden_layers", True, "num_hidden_layers: must be an int"),
    (LLAMA, "rms_norm_eps", float("inf"), "rms_norm_eps: must be finite"),
    (LLAMA, "rms_norm_eps", float("nan"), "rms_norm_eps: must be finite"),
    (LLAMA, "rms_norm_eps", True, "rms_norm_eps: must be a number"),
    (LLAMA, "rms_norm_eps", "tiny", "rms_norm_eps: must be a number"),
    (LLAMA, "rope_parameters", {"rope_type": "default", "rope_theta": float("inf")}, "rope_theta: must be finite"),
    (LLAMA, "rope_parameters", {"rope_type": "default", "rope_theta": True}, "rope_theta: must be a number"),
    (LLAMA, "rope_parameters", [1, 2], "rope_parameters: must be an object"),
    (LLAMA, "rope_parameters", "default", "rope_parameters: must be an object"),
    (GPT2, "n_layer", 10**19, "n_layer: must be at most"),
    (GPT2, "n_inner", 10**19, "n_inner: must be at most"),
    (GPT2, "layer_norm_epsilon", float("inf"), "layer_norm_epsilon: must be finite"),
    (GPT2, "layer_norm_epsilon", True, "layer_norm_epsilon: must be a number"),
    # A list or object is no key of the model types' table (before: TypeError, unhashable type).
    (
        LLAMA,
        "model_type",
        ["llama"],
        f"model_type: expected one of {FAMILIES}, found ['llama']",
    ),
    (
        GPT2,
        "model_type",
        {"gpt2": 1},
        f"model_type: expected one of {FAMILIES}, found {{'gpt2': 1}}",
    ),
]


def write_config(directory: Path, fields: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(fields), encoding="utf-8")  # Infinity/NaN as Python writes them
    return directory


@pytest.mark.parametrize(("config", "key", "value", "words"), CASES, ids=[f"{c[1]}={c[2]!r:.20}" for c in CASES])
def test_hostile_value_is_one_checkpoint_error(
    tmp_path: Path, config: ModelConfig, key: str, value: Any, words: str
) -> None:
    fields = {**config.to_hf_dict(), key: value}
    if key == "rope_parameters":
        fields.pop("rope_theta", None)
    directory = write_config(tmp_path / "model", fields)
    with pytest.raises(CheckpointError) as caught:
        read_config_json(directory)
    message = str(caught.value)
    assert words in message
    assert message.startswith(str(directory / "config.json"))
    assert "\n" not in message and len(message) < 300


def test_rope_scaling_that_is_not_an_object(tmp_path: Path) -> None:
    fields = {**LLAMA.to_hf_dict(), "rope_scaling": 7}
    del fields["rope_parameters"]
    with pytest.raises(CheckpointError, match="rope_scaling: must be an object"):
        read_config_json(write_config(tmp_path / "model", fields))


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000])
def test_deeply_nested_json(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"config\.json: JSON nested too deeply"):
        read_config_json(tmp_path)


def test_integer_of_too_many_digits(tmp_path: Path) -> None:
    text = json.dumps(LLAMA.to_hf_dict()).replace('"num_hidden_layers": 5', '"num_hidden_layers": ' + "9" * 100_000)
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"config\.json: not valid JSON") as caught:
        read_config_json(tmp_path)
    assert len(str(caught.value)) < 300


def test_the_maxima_admit_every_real_size() -> None:
    """The largest published Llama (3.1 405B) fits; one layer more than the maximum does not."""
    big = LLAMA.replace(vocab_size=128256, n_ctx=131072, d_model=16384, n_layers=126, n_heads=128, n_kv_heads=8)
    assert big.replace(d_ff=53248).n_layers == 126
    with pytest.raises(ValueError, match="n_layers: must be at most"):
        big.replace(n_layers=N_LAYERS_MAX + 1)


@pytest.mark.parametrize(("key", "value"), [("rms_norm_eps", float("inf")), ("num_hidden_layers", 10**19)])
def test_inspect_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any) -> None:
    """With weights beside it (so the reader goes on to them), `verifier inspect` exits 2 with one line."""
    directory = tmp_path / "model"
    write_hf_dir(directory, LLAMA, init_weights(LLAMA))
    write_config(directory, {**json.loads((directory / "config.json").read_text()), key: value})
    assert main(["inspect", str(directory)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{key}: must be" in err


def test_params_refuses_a_llama_like_size_above_the_maximum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`verifier params` counts Mistral-like configs without a ModelConfig; the same maxima apply there."""
    fields = {**LLAMA.to_hf_dict(), "model_type": "mistral", "num_hidden_layers": 10**19}
    assert main(["params", str(write_config(tmp_path / "model", fields))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "num_hidden_layers: must be at most" in err
