"""llama2.c model files: layouts against llama2.c's exporters, round trips, the RoPE permutation,
and every malformed input raising CheckpointError without allocating more than the file size."""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.formats import llama2c_spec as spec
from verifier.formats import CheckpointError, llama2c_layout, load_checkpoint
from verifier.formats import llama2c as fmt
from verifier.model.config import ModelConfig, RopeScaling
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.plugin.interface import Constraints
from verifier.properties.strategies import configs, drawing_for
from verifier.reference import layers as L

TINY = preset("llama2c-stories260K").replace(n_layers=2, vocab_size=32, n_ctx=16)
TMP = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def llama_configs(draw: st.DrawFn) -> ModelConfig:
    """Llama configs with the eps and theta llama2.c files hold (v0's theta is set by its test), and none
    of the switches llama2.c's format cannot hold (RoPE scaling, biases, a head_dim of its own)."""
    with drawing_for((Constraints(families=("llama",), switches=()),)):
        c = draw(configs(("llama",), max_n_ctx=64, max_layers=3), label="config")
    return c.replace(norm_eps=fmt.NORM_EPS, rope_theta=fmt.ROPE_THETA)


# --- layouts: files written to llama2.c's spec read as the canonical weights ----------------------


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("exporter", ["legacy", "v1"])
def test_reader_maps_llama2c_exports_to_canonical_weights(tmp_path: Path, exporter: str, tied: bool) -> None:
    c = TINY.replace(tie_embeddings=tied, n_kv_heads=4)
    m = spec.random_model(c, seed=1)
    path = tmp_path / "model.bin"
    (spec.export_legacy if exporter == "legacy" else spec.export_v1)(path, c, m)
    ck = load_checkpoint(path)
    assert (ck.format, ck.version, ck.config) == ("llama2c", 0 if exporter == "legacy" else 1, c)
    expected = spec.canonical(c, m)
    assert set(ck.weights) == set(expected)
    for name, w in expected.items():
        np.testing.assert_array_equal(ck.weights[name], w, err_msg=name)


@pytest.mark.parametrize("tied", [True, False])
def test_v2_int8_reads_within_the_quantisation_bound(tmp_path: Path, tied: bool) -> None:
    c = TINY.replace(tie_embeddings=tied, d_model=48, n_heads=6, n_kv_heads=3)  # group size backs off to 16
    m = spec.random_model(c, seed=2)
    group_size = spec.export_v2(tmp_path / "q.bin", c, m)
    assert group_size == 16
    ck = load_checkpoint(tmp_path / "q.bin")
    assert (ck.version, ck.config) == (2, c)
    for name, w in spec.canonical(c, m).items():
        got = ck.weights[name]
        if w.ndim == 1:  # norms stay float32
            np.testing.assert_array_equal(got, w, err_msg=name)
            continue
        # Rounding to the nearest multiple of the group's scale errs by at most half a scale.
        groups = w.reshape(-1, group_size)
        # Half a quantisation step s = max|w| / 127, plus the float32 rounding of s and of q * s
        # (|q| <= 127 ulps of s in all): |q s - w| <= s / 2 (1 + 254 eps32).
        step = np.abs(groups).max(axis=1, keepdims=True) / 127
        bound = step / 2 * (1 + 254 * np.finfo(np.float32).eps)
        error = np.abs(got.reshape(-1, group_size) - groups)
        assert (error <= bound).all(), f"{name}: error {error.max()} beyond half a quantisation step"
        assert error.max() > 0, f"{name}: dequantized exactly, so the test compared nothing quantized"


def test_rotate_half_permutation_makes_the_two_rope_layouts_agree() -> None:
    """llama2.c rotates rows (2i, 2i+1) of W_l2c x; HF rotates (i, i + d/2) of to_rotate_half(W_l2c) x."""
    rng = np.random.default_rng(0)
    n_heads, d_head, d_model, pos = 3, 8, 10, 5
    w = rng.standard_normal((n_heads * d_head, d_model))
    x = rng.standard_normal(d_model)
    q = w @ x
    rotated = q.copy()
    for h in range(n_heads):  # run.c's loop
        for i in range(0, d_head, 2):
            angle = pos * 10000.0 ** (-i / d_head)
            q0, q1 = q[h * d_head + i], q[h * d_head + i + 1]
            rotated[h * d_head + i] = q0 * np.cos(angle) - q1 * np.sin(angle)
            rotated[h * d_head + i + 1] = q0 * np.sin(angle) + q1 * np.cos(angle)
    cos, sin = L.rope_tables(np.array([[pos]]), d_head, 10000.0)
    hf = (fmt.to_rotate_half(w, n_heads) @ x).reshape(1, n_heads, 1, d_head)
    hf_rotated = L.apply_rope(hf, cos, sin).reshape(-1)
    np.testing.assert_allclose(fmt.to_rotate_half(rotated[:, None], n_heads)[:, 0], hf_rotated, rtol=1e-12)
    np.testing.assert_array_equal(fmt.to_interleaved(fmt.to_rotate_half(w, n_heads), n_heads), w)


# --- round trips ------------------------------------------------------------------------------------


@TMP
@given(c=llama_configs(), version=st.sampled_from([0, 1]), theta=st.sampled_from([10000.0, 500000.0, 1234.5]))
@example(c=preset("llama2c-stories260K"), version=0, theta=10000.0)
def test_canonical_to_v0_v1_and_back_is_exact_and_rewrites_byte_identical(
    tmp_path_factory: pytest.TempPathFactory, c: ModelConfig, version: int, theta: float
) -> None:
    c = c.replace(rope_theta=theta if version == 0 else fmt.ROPE_THETA)
    weights = init_weights(c, seed=3)
    folder = tmp_path_factory.mktemp("rt")
    fmt.write_llama2c(folder / "a.bin", c, weights, version=version)
    ck = load_checkpoint(folder / "a.bin")
    if c.d_head == 2 or c.n_ctx == 1:  # one frequency, or one position: tables cannot tell theta
        c = c.replace(rope_theta=fmt.ROPE_THETA)
    assert ck.config == c
    assert set(ck.weights) == set(weights)
    for name, w in weights.items():
        np.testing.assert_array_equal(ck.weights[name], w, err_msg=name)
    fmt.write_llama2c(folder / "b.bin", ck.config, ck.weights, version=version)
    assert (folder / "a.bin").read_bytes() == (folder / "b.bin").read_bytes()


@TMP
@given(c=llama_configs())
def test_canonical_to_v2_and_back_is_within_the_quantisation_bound(
    tmp_path_factory: pytest.TempPathFactory, c: ModelConfig
) -> None:
    weights = init_weights(c, seed=4)
    path = tmp_path_factory.mktemp("v2") / "q.bin"
    fmt.write_llama2c(path, c, weights, version=2)
    ck = load_checkpoint(path)
    assert ck.config == c
    group_size = fmt.header_for(c, 2).group_size
    for name, w in weights.items():
        groups = w.reshape(-1, group_size)
        # Half a quantisation step s = max|w| / 127, plus the float32 rounding of s and of q * s
        # (|q| <= 127 ulps of s in all): |q s - w| <= s / 2 (1 + 254 eps32).
        step = np.abs(groups).max(axis=1, keepdims=True) / 127
        bound = step / 2 * (1 + 254 * np.finfo(np.float32).eps)
        assert (np.abs(ck.weights[name].reshape(-1, group_size) - groups) <= bound).all(), name


def test_writer_refuses_what_the_format_cannot_hold(tmp_path: Path) -> None:
    weights = init_weights(TINY)
    cases = [
        (preset("gpt2").replace(n_layers=1, vocab_size=10, n_ctx=8), 0, "Llama models only"),
        (TINY.replace(norm_eps=1e-6), 0, "RMSNorm eps"),
        (TINY.replace(rope_theta=500000.0), 1, "cannot store RoPE theta"),
        (TINY.replace(family="mistral", sliding_window=4), 0, "Llama models only"),
        (TINY.replace(rope_scaling=RopeScaling("linear", 2.0)), 0, "rope_scaling: llama2.c files cannot store it"),
        (TINY.replace(qkv_bias=True, o_bias=True), 0, "qkv_bias: llama2.c files cannot store it"),
        (TINY.replace(head_dim=16), 0, "head_dim: llama2.c's heads are dim / n_heads wide"),
    ]
    for config, version, message in cases:
        w = init_weights(config) if config.family == "gpt2" or config.qkv_bias or config.head_dim else weights
        with pytest.raises(CheckpointError, match=message):
            fmt.write_llama2c(tmp_path / "x.bin", config, w, version=version)
    bad = dict(weights)
    bad["model.norm.weight"] = np.zeros(3, np.float32)
    with pytest.raises(CheckpointError, match=r"model.norm.weight: wrong shape \(expected \[64\], found \[3\]\)"):
        fmt.write_llama2c(tmp_path / "x.bin", TINY, bad)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"old contents")
    real = fmt._stored

    def failing(config: ModelConfig, weights: dict, seg: fmt.Segment) -> np.ndarray:
        if seg.key == "w2":
            raise OSError("disk full")
        return real(config, weights, seg)

    monkeypatch.setattr(fmt, "_stored", failing)
    with pytest.raises(OSError, match="disk full"):
        fmt.write_llama2c(path, TINY, init_weights(TINY))
    assert path.read_bytes() == b"old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]


# --- malformed files --------------------------------------------------------------------------------


def _valid(tmp_path: Path, version: int = 0, config: ModelConfig = TINY) -> Path:
    path = tmp_path / f"valid-v{version}.bin"
    fmt.write_llama2c(path, config, init_weights(config, seed=5), version=version)
    return path


def _patch(data: bytes, offset: int, fmt_char: str, value: float) -> bytes:
    packed = struct.pack("<" + fmt_char, value)
    return data[:offset] + packed + data[offset + len(packed) :]


V0_FIELD = {name: 4 * i for i, name in enumerate(llama2c_layout._FIELDS)}
V1_FIELD = {name: 8 + 4 * i for i, name in enumerate(llama2c_layout._FIELDS)}
FLOAT_START_V0 = 28


def _corruptions() -> dict[str, tuple[int, Callable[[bytes], bytes], str]]:
    """name -> (version of the valid file, corruption, expected message fragment)."""
    emb = TINY.vocab_size * TINY.d_model * 4
    return {
        "empty file": (0, lambda b: b"", "too short"),
        "3 bytes": (0, lambda b: b[:3], "too short"),
        "v0 header cut": (0, lambda b: b[:20], "truncated"),
        "v1 header cut": (1, lambda b: b[:100], "truncated"),
        "v2 header cut before group_size": (2, lambda b: b[:39], "truncated"),
        "wrong version": (1, lambda b: _patch(b, 4, "i", 7), "unsupported llama2.c format version"),
        "shared flag not 0/1": (1, lambda b: _patch(b, 36, "B", 2), "0/1 flag"),
        "zero dim": (0, lambda b: _patch(b, V0_FIELD["dim"], "i", 0), "dim: must be positive"),
        "negative n_layers": (0, lambda b: _patch(b, V0_FIELD["n_layers"], "i", -3), "n_layers: must be positive"),
        "zero vocab": (1, lambda b: _patch(b, V1_FIELD["vocab_size"], "i", 0), "vocab_size: must be positive"),
        "n_heads not dividing dim": (0, lambda b: _patch(b, V0_FIELD["n_heads"], "i", 7), "n_heads"),
        "n_kv_heads above n_heads": (0, lambda b: _patch(b, V0_FIELD["n_kv_heads"], "i", 16), "n_kv_heads"),
        "odd head size": (1, lambda b: _patch(b, V1_FIELD["n_heads"], "i", 64), "d_head must be even"),
        "absurd dims (10^12 parameters)": (
            0, lambda b: _patch(_patch(b, 0, "i", 2**20), 8, "i", 10**6), "file size.*implies|must be at most"),
        "v2 with 2^31-1 layers": (
            2, lambda b: _patch(b, V1_FIELD["n_layers"], "i", 2**31 - 1), "truncated|must be at most"),
        "dims disagree with size": (
            1, lambda b: _patch(b, V1_FIELD["hidden_dim"], "i", 171), "truncated|after the last"),
        "truncated at a tensor boundary": (0, lambda b: b[: FLOAT_START_V0 + emb], "at the start of tensor rms_att"),
        "truncated inside a tensor": (0, lambda b: b[: FLOAT_START_V0 + emb // 2], "inside tensor tok_embeddings"),
        "trailing bytes": (1, lambda b: b + b"\0" * 12, "12 bytes after the last tensor"),
        "unshared classifier flagged shared": (
            0, lambda b: _patch(b, V0_FIELD["vocab_size"], "i", TINY.vocab_size), "shared-classifier flag"),
        "NaN weight": (0, lambda b: _patch(b, FLOAT_START_V0 + 8, "f", float("nan")), "non-finite"),
        "Inf weight": (1, lambda b: _patch(b, 256 + 4, "f", float("inf")), "non-finite"),
        "RoPE tables not RoPE": (0, lambda b: _patch(b, len(b) - 4 * TINY.vocab_size * TINY.d_model - 12, "f", 0.5),
                                 "not RoPE cos/sin tables"),
        "v2 group_size 0": (2, lambda b: _patch(b, 37, "i", 0), "group_size: must be positive"),
        "v2 group_size not dividing": (2, lambda b: _patch(b, 37, "i", 7), "does not divide"),
        "v2 negative scale": (2, lambda b: _patch(b, len(b) - 4, "f", -1.0), "invalid scale"),
        "v2 NaN scale": (2, lambda b: _patch(b, len(b) - 4, "f", float("nan")), "invalid scale"),
    }  # fmt: skip


@pytest.mark.parametrize("case", list(_corruptions()))
def test_each_malformed_file_raises_a_checkpoint_error_naming_the_fault(tmp_path: Path, case: str) -> None:
    version, corrupt, message = _corruptions()[case]
    config = TINY.replace(tie_embeddings=case != "unshared classifier flagged shared")
    if case == "RoPE tables not RoPE":
        config = TINY.replace(tie_embeddings=False)
    data = corrupt(_valid(tmp_path, version, config).read_bytes())
    path = tmp_path / "bad.bin"
    path.write_bytes(data)
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


def _peak_bytes(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
    except CheckpointError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


SLACK = 64 * 1024  # Python objects, the header, error messages


def test_a_header_claiming_10_to_the_12_parameters_fails_without_allocating(tmp_path: Path) -> None:
    path = tmp_path / "huge.bin"
    path.write_bytes(struct.pack("<7i", 2**20, 2**20, 10**6, 2**10, 2**10, 2**20, 2**10) + b"\0" * 4096)
    # Refused by the config's sane maxima (verifier.model.config) or, below them, by the file size.
    with pytest.raises(CheckpointError, match=r"file size|must be at most"):
        load_checkpoint(path)
    assert _peak_bytes(lambda: load_checkpoint(path)) < SLACK


def test_reading_a_valid_file_allocates_about_its_size(tmp_path: Path) -> None:
    path = _valid(tmp_path, 1, preset("llama2c-stories260K"))
    size = path.stat().st_size
    peak = _peak_bytes(lambda: load_checkpoint(path))
    # The weights themselves plus one layer's q/k permutation in flight.
    assert size * 0.9 < peak < size * 1.1 + SLACK, f"peak {peak:,} bytes for a {size:,}-byte file"


@TMP
@given(data=st.data())
@example(data=None)
def test_any_truncation_or_header_mutation_raises_only_checkpoint_errors(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject | None
) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    version = 0 if data is None else data.draw(st.sampled_from([0, 1, 2]), label="version")
    good = _valid(folder, version).read_bytes()
    if data is None:
        bad = good[:-1]
    elif data.draw(st.booleans(), label="truncate (else mutate a header field)"):
        bad = good[: data.draw(st.integers(0, len(good) - 1), label="truncation point")]
    else:
        fields = 7 if version == 0 else 9
        field = data.draw(st.integers(0, fields - 1), label="header int field")
        value = data.draw(st.integers(-(2**31), 2**31 - 1), label="new value")
        bad = _patch(good, 4 * field, "i" if field else "I", value if field else value % 2**32)
    path = folder / "bad.bin"
    path.write_bytes(bad)
    peak = 0
    try:
        tracemalloc.start()
        load_checkpoint(path)
    except CheckpointError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak <= len(bad) + SLACK, f"allocated {peak:,} bytes reading a {len(bad):,}-byte file"
