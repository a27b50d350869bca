"""Hugging Face directories: round trips, files written by transformers itself, and hostile inputs."""

from __future__ import annotations

import contextlib
import json
import pickle
import struct
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import needs
from verifier.formats import CheckpointError, load_checkpoint
from verifier.formats.hf_dir import write_hf_dir
from verifier.model.config import ModelConfig, canonical
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.properties.strategies import configs

TMP = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
GPT2_TINY = preset("gpt2").replace(vocab_size=50, n_ctx=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=64)
LLAMA_TINY = preset("llama2c-stories260K").replace(n_layers=2, vocab_size=40, n_ctx=16)


def assert_same_weights(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert set(got) == set(expected)
    for name, w in expected.items():
        assert got[name].dtype == np.float32, name
        np.testing.assert_array_equal(got[name], w, err_msg=name)


@TMP
@given(c=configs(max_n_ctx=64, max_layers=3), shard_bytes=st.sampled_from([None, 3000]))
def test_canonical_to_hf_dir_and_back_is_exact_and_rewrites_byte_identical(
    tmp_path_factory: pytest.TempPathFactory, c: ModelConfig, shard_bytes: int | None
) -> None:
    weights = init_weights(c, seed=1)
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    write_hf_dir(a, c, weights, max_shard_bytes=shard_bytes)
    ck = load_checkpoint(a)
    assert ck.config == canonical(c)  # the one form the reader gives (a window every layer uses: no layer_types)
    assert ck.format == ("hf-safetensors" if shard_bytes is None else "hf-safetensors-sharded")
    assert_same_weights(ck.weights, weights)
    write_hf_dir(b, ck.config, ck.weights, max_shard_bytes=shard_bytes)
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_resaving_unsharded_removes_the_old_shards(tmp_path: Path) -> None:
    weights = init_weights(LLAMA_TINY)
    write_hf_dir(tmp_path, LLAMA_TINY, weights, max_shard_bytes=4000)
    write_hf_dir(tmp_path, LLAMA_TINY, weights)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]


# --- files written by transformers ----------------------------------------------------------------


def _hf_logits(model: object, tokens: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(tokens)[None]).logits[0].float().numpy()  # type: ignore[operator]


@needs.transformers
@pytest.mark.parametrize(
    ("config", "how"),
    [
        (GPT2_TINY, "save_pretrained"),
        (LLAMA_TINY.replace(tie_embeddings=False), "save_pretrained"),
        (LLAMA_TINY, "torch.save"),
        (GPT2_TINY, "save_pretrained sharded"),
    ],
    ids=["gpt2 tied", "llama untied gqa", "llama pytorch_model.bin", "gpt2 sharded"],
)
def test_models_saved_by_transformers_load_with_the_same_logits(tmp_path: Path, config: ModelConfig, how: str) -> None:
    import torch

    from verifier.formats.hf import build_model
    from verifier.reference import NumpyModel

    model = build_model(config, init_weights(config, seed=2, scale=0.2))
    if how == "torch.save":
        torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
        model.config.to_json_file(tmp_path / "config.json")
    else:
        model.save_pretrained(tmp_path, max_shard_size="20KB" if "sharded" in how else "5GB")
    ck = load_checkpoint(tmp_path)
    assert ck.config == config
    tokens = np.arange(12) % config.vocab_size
    expected = _hf_logits(model, tokens)
    got = NumpyModel(ck.config, ck.weights, np.float32).logits(tokens)
    assert np.abs(got - expected).max() <= 1e-5 * (1 + np.abs(expected).max())


@needs.transformers
def test_bfloat16_files_convert_exactly(tmp_path: Path) -> None:
    import torch

    from verifier.formats.hf import build_model

    model = build_model(LLAMA_TINY, init_weights(LLAMA_TINY, seed=3)).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    ck = load_checkpoint(tmp_path)
    assert any("bfloat16" in f for f in ck.findings)
    for name, tensor in model.state_dict().items():
        if name != "lm_head.weight":
            np.testing.assert_array_equal(ck.weights[name], tensor.float().numpy(), err_msg=name)


@needs.transformers
def test_our_directories_load_in_transformers(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    for config in (GPT2_TINY, LLAMA_TINY.replace(tie_embeddings=False)):
        weights = init_weights(config, seed=4)
        write_hf_dir(tmp_path / config.family, config, weights)
        model = AutoModelForCausalLM.from_pretrained(tmp_path / config.family)
        state = {k: v.numpy() for k, v in model.state_dict().items()}
        for name, w in weights.items():
            np.testing.assert_array_equal(state[name], w, err_msg=name)


def test_gpt2_in_openai_layout_loads(tmp_path: Path) -> None:
    """As the published gpt2 file: no `transformer.` prefix, causal-mask buffers stored."""
    from safetensors.numpy import save_file

    weights = init_weights(GPT2_TINY, seed=5)
    stored = {name.removeprefix("transformer."): w for name, w in weights.items()}
    for i in range(GPT2_TINY.n_layers):
        stored[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 16, 16), np.float32))
    save_file(stored, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps(GPT2_TINY.to_hf_dict()))
    ck = load_checkpoint(tmp_path)
    assert_same_weights(ck.weights, weights)
    assert any("dropped 2 non-learned buffers" in f for f in ck.findings)


# --- malformed directories ------------------------------------------------------------------------


def _write(tmp_path: Path, tensors: dict[str, np.ndarray], config: ModelConfig = LLAMA_TINY) -> Path:
    from safetensors.numpy import save_file

    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    return tmp_path


def _with(change: str) -> dict[str, np.ndarray]:
    w = init_weights(LLAMA_TINY, seed=6)
    name = "model.layers.1.mlp.up_proj.weight"
    if change == "missing":
        del w[name]
    elif change == "extra":
        w["model.layers.2.mlp.up_proj.weight"] = w[name]
    elif change == "shape":
        w[name] = w[name].T.copy()
    elif change == "dtype":
        w[name] = w[name].astype(np.int32)
    elif change == "nan":
        w[name][3, 4] = np.nan
    elif change == "inf":
        w[name][0, 0] = -np.inf
    elif change == "tied head differs":
        w["lm_head.weight"] = w["model.embed_tokens.weight"] + 1
    return w


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("missing", r"tensor model.layers.1.mlp.up_proj.weight: missing"),
        ("extra", r"tensor model.layers.2.mlp.up_proj.weight: not a weight of this config"),
        ("shape", r"up_proj.weight: wrong shape \(expected \[172, 64\], found \[64, 172\]\)"),
        ("dtype", r"up_proj.weight: wrong dtype \(expected a floating-point dtype, found int32\)"),
        ("nan", r"up_proj.weight: holds 1 non-finite values, the first at \[3, 4\]"),
        ("inf", r"up_proj.weight: holds 1 non-finite values, the first at \[0, 0\]"),
        ("tied head differs", r"lm_head.weight: config.json ties the classifier"),
    ],
)
def test_wrong_tensors_raise_checkpoint_errors(tmp_path: Path, change: str, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(_write(tmp_path, _with(change)))


def test_a_weight_whose_squares_overflow_float32_is_still_finite(tmp_path: Path) -> None:
    # Finiteness is first read from one sum of squares: 3e38 squared overflows it, and only then is
    # each value looked at; the weight is finite and loads, with no overflow warning.
    w = _with("none")
    w["model.layers.0.mlp.up_proj.weight"][1, 2] = 3e38
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = load_checkpoint(_write(tmp_path, w))
    assert loaded.weights["model.layers.0.mlp.up_proj.weight"][1, 2] == np.float32(3e38)


def test_directory_problems_raise_checkpoint_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"holds no config\.json"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(CheckpointError, match="model_type"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_TINY.to_hf_dict()))
    with pytest.raises(CheckpointError, match="no weight file"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize(
    ("weight_map", "message"),
    [
        ({"model.norm.weight": "../outside.safetensors"}, "must be a file name in the same directory"),
        ({"model.norm.weight": "/etc/passwd"}, "must be a file name in the same directory"),
        ({"model.norm.weight": "model-00099-of-00099.safetensors"}, "is named in the index but missing"),
        ({}, "must be a non-empty object"),
    ],
)
def test_hostile_shard_indexes_raise_checkpoint_errors(tmp_path: Path, weight_map: dict, message: str) -> None:
    write_hf_dir(tmp_path, LLAMA_TINY, init_weights(LLAMA_TINY), max_shard_bytes=50_000)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path)


def test_a_shard_holding_tensors_its_index_does_not_list_is_refused(tmp_path: Path) -> None:
    write_hf_dir(tmp_path, LLAMA_TINY, init_weights(LLAMA_TINY), max_shard_bytes=50_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    moved, first_shard = next(iter(index["weight_map"].items()))
    index["weight_map"][moved] = next(f for f in index["weight_map"].values() if f != first_shard)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"lacks it|not in its index entry"):
        load_checkpoint(tmp_path)


class _Payload:
    def __reduce__(self) -> tuple:
        return (Path.touch, (Path("PWNED"),))


@needs.torch
def test_a_pickle_with_code_is_refused_and_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_TINY.to_hf_dict()))
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps({"model.norm.weight": _Payload()}, protocol=2))
    with pytest.raises(CheckpointError, match=r"weights_only=True"):
        load_checkpoint(tmp_path)
    assert not (tmp_path / "PWNED").exists()


def test_without_torch_a_pickle_is_a_checkpoint_error_saying_how_to_read_it(
    tmp_path: Path, no_transformers_extra: None
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_TINY.to_hf_dict()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK\x03\x04 a zip that torch.load would read")
    with pytest.raises(CheckpointError, match=r"pytorch_model.bin: pickle: reading a pickled checkpoint .* needs torch "
                       r"\(torch not installed here: pip install 'lm-verifier\[transformers\]'\)"):  # fmt: skip
        load_checkpoint(tmp_path)


# --- hostile safetensors headers -------------------------------------------------------------------


def _raw_safetensors(tmp_path: Path, header: bytes | dict, data: bytes = b"", n: int | None = None) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_TINY.to_hf_dict()))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw) if n is None else n) + raw + data)
    return tmp_path


def _entry(dtype: str = "F32", shape: list | None = None, offsets: list | None = None) -> dict:
    return {"dtype": dtype, "shape": [2] if shape is None else shape, "data_offsets": offsets or [0, 8]}


HOSTILE = {
    "header size beyond the file": ({"a": _entry()}, bytes(8), 10**6, "header size: larger than the file"),
    "header size 2^63": ({"a": _entry()}, bytes(8), 2**63, "header size: larger than the file"),
    "not UTF-8": (b"\xff\xfe{}", b"", None, "must be a JSON object"),
    "not UTF-8 in a string": (b'{"\xff": {"dtype": "F32", "shape": [], "data_offsets": [0, 0]}}', b"", None,
                              "not valid UTF-8"),
    "not JSON": (b"{'a': 1}", b"", None, "byte 9: not of the form of a safetensors header"),
    "not JSON in the grammar": (b'{"a": {"dtype": "F32", "shape": [01], "data_offsets": [0, 0]}}', b"", None,
                                "not valid JSON"),
    "a JSON list": (b"[1, 2]", b"", None, "must be a JSON object"),
    "entry missing keys": ({"a": {"dtype": "F32"}}, bytes(8), None, "entry \"a\": not of the form"),
    "unknown dtype": ({"a": _entry("F128")}, bytes(8), None, "unknown or unsupported dtype"),
    "negative shape": ({"a": _entry(shape=[-2])}, bytes(8), None, "non-negative ints"),
    "float shape": ({"a": _entry(shape=[2.0])}, bytes(8), None, "entry \"a\": not of the form"),
    "offsets not spanning the shape": ({"a": _entry(shape=[10**12])}, bytes(8), None, "do not span"),
    "10^12 elements claimed": ({"a": _entry(shape=[10**12], offsets=[0, 4 * 10**12])}, bytes(8), None,
                               "file is truncated"),
    "overlapping tensors": ({"a": _entry(), "b": _entry(offsets=[4, 12])}, bytes(12), None, "overlaps"),
    "gap between tensors": ({"a": _entry(), "b": _entry(offsets=[12, 20])}, bytes(20), None, "leaves a gap"),
    "bytes no tensor covers": ({"a": _entry()}, bytes(16), None, "bytes no tensor covers"),
    "metadata not strings": ({"__metadata__": {"format": 1}, "a": _entry()}, bytes(8), None,
                             "entry \"__metadata__\": not of the form"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_safetensors_headers_raise_checkpoint_errors_without_allocating(tmp_path: Path, case: str) -> None:
    header, data, n, message = HOSTILE[case]
    directory = _raw_safetensors(tmp_path, header, data, n)
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(directory)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 64 * 1024, f"allocated {peak:,} bytes on a {case} file"


@TMP
@given(data=st.data())
def test_mutated_truncated_or_renamed_safetensors_raise_only_checkpoint_errors(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("st")
    write_hf_dir(directory, GPT2_TINY, init_weights(GPT2_TINY))
    raw = (directory / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    how = data.draw(st.sampled_from(["truncate", "mutate header byte", "shuffle names"]), label="corruption")
    if how == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1), label="truncation point")]
    elif how == "mutate header byte":
        at = data.draw(st.integers(0, 8 + n - 1), label="offset")
        raw = raw[:at] + bytes([data.draw(st.integers(0, 255), label="byte")]) + raw[at + 1 :]
    else:
        header = json.loads(raw[8 : 8 + n])
        names = [k for k in header if k != "__metadata__"]
        shuffled = data.draw(st.permutations(names), label="names")
        renamed = {new: header[old] for old, new in zip(names, shuffled, strict=True)}
        encoded = json.dumps({"__metadata__": header["__metadata__"], **renamed}).encode()
        raw = struct.pack("<Q", len(encoded)) + encoded + raw[8 + n :]
    (directory / "model.safetensors").write_bytes(raw)
    with contextlib.suppress(CheckpointError):
        load_checkpoint(directory)
