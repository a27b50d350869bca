"""Numeric and flag fields of every format (issue 25): each is type-checked (an int is an int, not a
bool, a float or a string; a flag is true or false) and range-checked (positive, at most its
maximum, dividing what it must, finite) by one set of rules, `ModelConfig`'s, whichever reader it
comes from; a bad value is one CheckpointError line naming the field as the file names it."""

from __future__ import annotations

import importlib.util
import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from verifier.cli import main
from verifier.formats import CheckpointError, load_checkpoint
from verifier.formats.config_json import read_config_json
from verifier.formats.llama2c import write_llama2c
from verifier.model.config import N_CTX_MAX, N_HEADS_MAX, SIZE_MAXIMA, ConfigError
from verifier.model.presets import preset
from verifier.model.weights import init_weights

LLAMA = preset("llama2c-stories260K").replace(n_layers=2, vocab_size=90, n_ctx=32)
ROOT = Path(__file__).resolve().parents[2]
GPT2 = preset("gpt2").replace(vocab_size=50, n_ctx=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=64)


def one_line(caught: pytest.ExceptionInfo[CheckpointError]) -> str:
    message = str(caught.value)
    assert "\n" not in message and len(message) < 600, message[:1000]
    return message


# ---------------------------------------------------------------------------------------------
# config.json: transformers 5's strict configs refuse 12.0 for an int and 1, "true" or null for a
# bool; so does the suite (a JSON int is accepted for a float field: writers drop the ".0").

CONFIG_CASES: list[tuple[str, Any, Any, str]] = [
    ("llama", "tie_word_embeddings", "false", "tie_word_embeddings: must be true or false, found str"),
    ("llama", "tie_word_embeddings", 1, "tie_word_embeddings: must be true or false, found int"),
    ("llama", "tie_word_embeddings", None, "tie_word_embeddings: must be true or false, found NoneType"),
    ("gpt2", "tie_word_embeddings", "true", "tie_word_embeddings: must be true or false, found str"),
    ("gpt2", "tie_word_embeddings", 0, "tie_word_embeddings: must be true or false, found int"),
    ("llama", "attention_bias", 0, "attention_bias: must be true or false"),
    ("llama", "mlp_bias", "false", "mlp_bias: must be true or false"),
    ("gpt2", "scale_attn_weights", 0, "scale_attn_weights: must be true or false"),
    ("gpt2", "reorder_and_upcast_attn", "no", "reorder_and_upcast_attn: must be true or false"),
    ("llama", "num_key_value_heads", 0, "num_key_value_heads: must be positive"),
    ("llama", "num_key_value_heads", 3, "num_key_value_heads: n_heads=8 is not a multiple of n_kv_heads=3"),
    ("gpt2", "n_inner", 0, "n_inner: must be positive"),
    ("llama", "num_hidden_layers", 12.0, "num_hidden_layers: must be an int, found float"),
    ("llama", "num_attention_heads", "8", "num_attention_heads: must be an int, found str"),
    ("llama", "num_attention_heads", 0, "num_attention_heads: must be positive"),
    ("llama", "num_attention_heads", 7, "num_key_value_heads: n_heads=7 is not a multiple of n_kv_heads=4"),
    ("llama", "head_dim", 0, "head_dim: must be positive"),
    ("gpt2", "n_head", 5, "n_head: d_model=32 is not divisible by n_heads=5"),
    ("llama", "rms_norm_eps", 0, "rms_norm_eps: must be a finite positive number"),
    ("llama", "rms_norm_eps", -1e-5, "rms_norm_eps: must be a finite positive number"),
    ("llama", "rope_theta", 1, "rope_theta: must be a finite number greater than 1"),
]


@pytest.mark.parametrize(
    ("family", "key", "value", "words"), CONFIG_CASES, ids=[f"{c[0]}-{c[1]}={c[2]!r}" for c in CONFIG_CASES]
)
def test_a_config_json_field_of_the_wrong_type_or_range_is_one_checkpoint_error(
    tmp_path: Path, family: str, key: str, value: Any, words: str
) -> None:
    fields = {**(LLAMA if family == "llama" else GPT2).to_hf_dict(), key: value}
    if key == "rope_theta":
        fields.pop("rope_parameters")
    (tmp_path / "config.json").write_text(json.dumps(fields), encoding="utf-8")
    with pytest.raises(CheckpointError) as caught:
        read_config_json(tmp_path)
    message = one_line(caught)
    assert words in message and message.startswith(str(tmp_path / "config.json"))


@pytest.mark.parametrize(("key", "value"), [("num_key_value_heads", None), ("n_inner", None), ("rope_theta", 10000)])
def test_what_a_config_json_may_leave_to_its_default(tmp_path: Path, key: str, value: Any) -> None:
    """null where transformers allows it (its default), and an int for a float field."""
    config = GPT2 if key == "n_inner" else LLAMA
    fields = {**config.to_hf_dict(), key: value}
    if key == "rope_theta":
        fields.pop("rope_parameters")
    (tmp_path / "config.json").write_text(json.dumps(fields), encoding="utf-8")
    default = {"num_key_value_heads": {"n_kv_heads": LLAMA.n_heads}, "n_inner": {"d_ff": 4 * GPT2.d_model}}
    assert read_config_json(tmp_path) == config.replace(**default.get(key, {}))


def test_params_refuses_a_flag_that_is_not_a_bool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fields = {**LLAMA.to_hf_dict(), "model_type": "mistral", "tie_word_embeddings": "false"}
    (tmp_path / "config.json").write_text(json.dumps(fields), encoding="utf-8")
    assert main(["params", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tie_word_embeddings: must be true or false" in err


@pytest.mark.parametrize(
    ("field", "value"),
    [("tie_embeddings", 1), ("norm_eps", True), ("norm_eps", "1e-5"), ("rope_theta", None), ("n_heads", 8.0)],
)
def test_the_config_itself_refuses_values_of_the_wrong_type(field: str, value: Any) -> None:
    """The rules every reader ends in: `norm_eps=True` passed as 1.0, a string raised a TypeError."""
    with pytest.raises(ConfigError, match=f"^{field}: must be"):
        LLAMA.replace(**{field: value})


# ---------------------------------------------------------------------------------------------
# GGUF metadata, written with the gguf package's own writer in whatever type a case needs

NEEDS_GGUF = pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="the gguf package is not installed")
GGUF_LLAMA: dict[str, tuple[str, Any]] = {
    "llama.context_length": ("uint32", 16),
    "llama.embedding_length": ("uint32", 8),
    "llama.block_count": ("uint32", 1),
    "llama.feed_forward_length": ("uint32", 16),
    "llama.attention.head_count": ("uint32", 2),
    "llama.attention.layer_norm_rms_epsilon": ("float32", 1e-5),
}


def gguf_file(path: Path, metadata: dict[str, tuple[str, Any]]) -> Path:
    """A llama GGUF file with `metadata` (key -> (gguf writer type, value)) and a token embedding only."""
    import gguf

    writer = gguf.GGUFWriter(path, "llama")
    for key, (kind, value) in metadata.items():
        getattr(writer, f"add_{kind}")(key, value)
    writer.add_tensor("token_embd.weight", np.zeros((10, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


GGUF_CASES: list[tuple[str, tuple[str, Any], str]] = [
    ("llama.attention.head_count", ("uint32", 0), "metadata llama.attention.head_count: must be positive"),
    ("llama.attention.head_count", ("int32", -2), "metadata llama.attention.head_count: must be positive"),
    ("llama.attention.head_count", ("uint32", 3), "metadata llama.attention.head_count: d_model=8 is not divisible"),
    ("llama.attention.head_count", ("bool", True), "metadata llama.attention.head_count: must be an integer"),
    ("llama.attention.head_count", ("float32", 2.0), "metadata llama.attention.head_count: must be an integer"),
    ("llama.attention.head_count", ("uint32", N_HEADS_MAX + 2), "metadata llama.attention.head_count: must be at most"),
    ("llama.attention.head_count_kv", ("uint32", 0), "metadata llama.attention.head_count_kv: must be positive"),
    ("llama.attention.head_count_kv", ("uint32", 4), "metadata llama.attention.head_count_kv: n_heads=2 is not a"),
    ("llama.embedding_length", ("uint32", 0), "metadata llama.embedding_length: must be positive"),
    ("llama.block_count", ("uint64", 2**63), "metadata llama.block_count: must be at most"),
    ("llama.context_length", ("uint32", N_CTX_MAX + 1), "metadata llama.context_length: must be at most"),
    ("llama.feed_forward_length", ("string", "16"), "metadata llama.feed_forward_length: must be an integer"),
    ("llama.attention.layer_norm_rms_epsilon", ("float32", math.inf),
     "metadata llama.attention.layer_norm_rms_epsilon: must be a finite positive number"),
    ("llama.attention.layer_norm_rms_epsilon", ("float32", 0.0),
     "metadata llama.attention.layer_norm_rms_epsilon: must be a finite positive number"),
    ("llama.attention.layer_norm_rms_epsilon", ("bool", True),
     "metadata llama.attention.layer_norm_rms_epsilon: must be a number"),
    ("llama.rope.freq_base", ("float32", math.nan), "metadata llama.rope.freq_base: must be a finite number"),
    ("llama.rope.freq_base", ("float64", 1.0), "metadata llama.rope.freq_base: must be a finite number greater"),
    ("llama.rope.dimension_count", ("uint32", 0), "metadata llama.rope.dimension_count: partial RoPE"),
]  # fmt: skip


@NEEDS_GGUF
@pytest.mark.parametrize(
    ("key", "stored", "words"), GGUF_CASES, ids=[f"{c[0].split('.', 1)[1]}={c[1][1]!r}" for c in GGUF_CASES]
)
def test_a_gguf_field_of_the_wrong_type_or_range_is_one_checkpoint_error(
    tmp_path: Path, key: str, stored: tuple[str, Any], words: str
) -> None:
    path = gguf_file(tmp_path / "m.gguf", {**GGUF_LLAMA, key: stored})
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    assert words in one_line(caught)


@NEEDS_GGUF
def test_the_hand_written_gguf_is_refused_only_for_its_missing_tensors(tmp_path: Path) -> None:
    """The baseline the cases vary: its metadata passes."""
    with pytest.raises(CheckpointError, match=r"tensor output_norm\.weight: missing"):
        load_checkpoint(gguf_file(tmp_path / "m.gguf", GGUF_LLAMA))


# ---------------------------------------------------------------------------------------------
# llama2.c headers: int32 fields, so only ranges (the other cases are in test_llama2c_format.py)

V1_FIELD = {name: 8 + 4 * i for i, name in enumerate(("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                                      "vocab_size", "seq_len"))}  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("seq_len", 2**31 - 1, "header field seq_len: must be at most"),  # v1 stores no table: only the maximum
        ("n_kv_heads", 0, "header field n_kv_heads: must be positive"),
        ("n_kv_heads", 3, "header field n_kv_heads: n_heads=8 is not a multiple of n_kv_heads=3"),
    ],
)
def test_a_llama2c_header_field_out_of_range_is_one_checkpoint_error(
    tmp_path: Path, field: str, value: int, words: str
) -> None:
    path = tmp_path / "model.bin"
    write_llama2c(path, LLAMA, init_weights(LLAMA, seed=0), version=1)
    data = bytearray(path.read_bytes())
    data[V1_FIELD[field] : V1_FIELD[field] + 4] = struct.pack("<i", value)
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    assert words in one_line(caught)


def test_a_legacy_negative_vocab_size_still_means_an_unshared_classifier(tmp_path: Path) -> None:
    untied = LLAMA.replace(tie_embeddings=False)
    write_llama2c(tmp_path / "model.bin", untied, init_weights(untied, seed=0), version=0)
    (vocab,) = struct.unpack_from("<i", (tmp_path / "model.bin").read_bytes(), 20)
    assert vocab == -untied.vocab_size
    assert load_checkpoint(tmp_path / "model.bin").config == untied


def test_the_maxima_stated_in_the_docs_are_the_codes() -> None:
    """docs/security.md's table of maxima, row by row, against `SIZE_MAXIMA`."""
    rows = [line.split("|") for line in (ROOT / "docs" / "security.md").read_text().splitlines()]
    stated = {}
    for row in rows:
        if len(row) == 5:  # | field | config.json keys | maximum |
            for name in row[1].replace("`", "").split(","):
                stated[name.strip()] = row[3].strip()
    assert {name: stated.get(name) for name in SIZE_MAXIMA} == {name: f"{m:,}" for name, m in SIZE_MAXIMA.items()}
