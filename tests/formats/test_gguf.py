"""GGUF files written from the canonical weights and read back: both architectures llama.cpp knows,
F32, Q8_0 and Q4_0, laid out as llama.cpp reads them (checked here against the layout spelled out from its
convert script, independently of the writer), and every malformed file a named error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'lm-verifier[gguf]')")

import gguf

from verifier.analysis.precision import Q4_0
from verifier.cli import main
from verifier.formats import CheckpointError, checkpoint_config, detect_format, load_checkpoint, save_checkpoint
from verifier.formats.gguf import write_gguf
from verifier.model.presets import preset
from verifier.model.weights import init_weights

GQA = preset("llama2c-stories260K").replace(n_layers=2, d_ff=96)  # 8 heads, 4 kv heads, d_head 8
UNTIED = GQA.replace(tie_embeddings=False, n_kv_heads=8)
GPT2 = preset("gpt2").replace(vocab_size=50, n_ctx=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=64)
CONFIGS = {"llama-gqa": GQA, "llama-untied": UNTIED, "gpt2": GPT2}


def stored(path: Path) -> dict[str, np.ndarray]:
    """The file's tensors as the gguf package reads them, in numpy order (F32 only)."""
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(path).tensors}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_f32_files_read_back_bit_identical(name: str, tmp_path: Path) -> None:
    config = CONFIGS[name]
    weights = init_weights(config, seed=2)
    save_checkpoint(tmp_path / "m.gguf", config, weights, format="gguf")
    checkpoint = load_checkpoint(tmp_path / "m.gguf")
    assert (checkpoint.format, checkpoint.version, checkpoint.config) == ("gguf", 3, config)
    assert checkpoint_config(tmp_path / "m.gguf") == config
    assert checkpoint.weights.keys() == weights.keys()
    for key, w in weights.items():
        np.testing.assert_array_equal(checkpoint.weights[key], w, err_msg=key)


def test_llama_tensors_are_laid_out_as_llama_cpp_reads_them(tmp_path: Path) -> None:
    weights = init_weights(UNTIED, seed=3)
    write_gguf(tmp_path / "m.gguf", UNTIED, weights)
    t = stored(tmp_path / "m.gguf")
    # convert_hf_to_gguf.py undoes HF's rotate-half permutation: within each head, row 2i is HF row i
    # and row 2i + 1 is HF row i + d_head/2 (llama.cpp's RoPE rotates adjacent pairs).
    half = UNTIED.d_head // 2
    q = weights["model.layers.1.self_attn.q_proj.weight"].reshape(UNTIED.n_heads, UNTIED.d_head, -1)
    got = t["blk.1.attn_q.weight"].reshape(UNTIED.n_heads, UNTIED.d_head, -1)
    np.testing.assert_array_equal(got[:, 0::2], q[:, :half])
    np.testing.assert_array_equal(got[:, 1::2], q[:, half:])
    np.testing.assert_array_equal(t["blk.0.ffn_gate.weight"], weights["model.layers.0.mlp.gate_proj.weight"])
    np.testing.assert_array_equal(t["output.weight"], weights["lm_head.weight"])
    fields = gguf.GGUFReader(tmp_path / "m.gguf").fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["llama.attention.head_count_kv"].contents() == 8
    assert fields["llama.rope.dimension_count"].contents() == UNTIED.d_head


def test_gpt2_tensors_are_laid_out_as_llama_cpp_reads_them(tmp_path: Path) -> None:
    weights = init_weights(GPT2, seed=3)
    write_gguf(tmp_path / "m.gguf", GPT2, weights)
    t = stored(tmp_path / "m.gguf")
    # ggml multiplies by [d_out, d_in] matrices; GPT-2's Conv1D stores [d_in, d_out].
    np.testing.assert_array_equal(t["blk.0.attn_qkv.weight"], weights["transformer.h.0.attn.c_attn.weight"].T)
    np.testing.assert_array_equal(t["blk.1.ffn_down.weight"], weights["transformer.h.1.mlp.c_proj.weight"].T)
    np.testing.assert_array_equal(t["position_embd.weight"], weights["transformer.wpe.weight"])
    assert "output.weight" not in t  # tied: llama.cpp reads token_embd


def test_q8_0_matrices_dequantize_within_half_a_step_and_the_rest_stays_f32(tmp_path: Path) -> None:
    weights = init_weights(GPT2, seed=4)
    write_gguf(tmp_path / "q.gguf", GPT2, weights, tensor_type="Q8_0")
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(tmp_path / "q.gguf").tensors}
    assert types["blk.0.ffn_up.weight"] == "Q8_0" and types["blk.0.ffn_up.bias"] == "F32"
    checkpoint = load_checkpoint(tmp_path / "q.gguf")
    assert "tensors stored as Q8_0, dequantized to float32" in checkpoint.findings
    for key, w in weights.items():
        got = checkpoint.weights[key]
        if w.ndim == 1:
            np.testing.assert_array_equal(got, w, err_msg=key)
            continue
        # Blocks of 32 along the stored rows ([d_out, d_in]; Conv1D is stored transposed), each with the
        # step max|x| / 127 kept in float16: within half a step, plus 127 steps' float16 rounding (2^-11).
        conv1d = key.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
        rows, got_rows = (w.T, got.T) if conv1d else (w, got)
        step = np.abs(rows.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
        error = np.abs(got_rows.reshape(-1, 32) - rows.reshape(-1, 32))
        assert (error <= step * (0.5 + 127 * 2.0**-11)).all(), key
        assert error.max() > 0, f"{key} was not quantized"


@pytest.mark.parametrize("name", ["llama-gqa", "gpt2"])
def test_q4_0_files_read_back_as_the_q4_0_class_s_dequantized_weights(name: str, tmp_path: Path) -> None:
    """What llama.cpp computes on: the file's Q4_0 blocks dequantized, which must be the reference's own
    Q4_0 of the weights (`Q4_0.oracle_weights`, along each matrix's input axis), bit for bit."""
    config = CONFIGS[name]
    weights = init_weights(config, seed=4)
    write_gguf(tmp_path / "q.gguf", config, weights, tensor_type="Q4_0")
    reader = gguf.GGUFReader(tmp_path / "q.gguf")
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.ffn_up.weight"] == "Q4_0" and types["blk.0.attn_norm.weight"] == "F32"
    assert reader.fields["general.file_type"].parts[-1][0] == gguf.LlamaFileType.MOSTLY_Q4_0
    checkpoint = load_checkpoint(tmp_path / "q.gguf")
    assert "tensors stored as Q4_0, dequantized to float32" in checkpoint.findings
    ours = Q4_0.oracle_weights(weights)
    for key, w in weights.items():
        assert np.array_equal(checkpoint.weights[key], ours[key]), key
        assert w.ndim == 1 or not np.array_equal(ours[key], w), f"{key} was not quantized"


@pytest.mark.parametrize("tensor_type", ["Q8_0", "Q4_0"])
def test_quantized_types_refuse_rows_that_are_not_whole_blocks_and_leave_no_file(
    tensor_type: str, tmp_path: Path
) -> None:
    config = GQA.replace(d_ff=172)  # stories260K's hidden size: ffn_down rows of 172
    with pytest.raises(CheckpointError, match=rf"mlp.down_proj.weight: rows of 172 cannot be stored as {tensor_type}"):
        write_gguf(tmp_path / "q.gguf", config, init_weights(config), tensor_type=tensor_type)
    with pytest.raises(CheckpointError, match=rf"expected a multiple of 32 \({tensor_type}'s block size\)"):
        write_gguf(tmp_path / "q.gguf", config, init_weights(config), tensor_type=tensor_type)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(CheckpointError, match="tensor type: not one this writer makes"):
        write_gguf(tmp_path / "q.gguf", GQA, init_weights(GQA), tensor_type="Q4_1")


def test_inspect_shows_a_gguf_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.gguf"
    write_gguf(path, GQA, init_weights(GQA))
    assert detect_format(path) == "gguf"
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "gguf" in out and "blk.1.attn_k.weight" in out and "a vocabulary of 512 pieces" in out


def test_malformed_files_are_named_errors(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, GQA, init_weights(GQA))
    data = path.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"cut.gguf: GGUF file: cannot be parsed"):
        load_checkpoint(tmp_path / "cut.gguf")
    writer = gguf.GGUFWriter(tmp_path / "bert.gguf", "bert")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(CheckpointError, match=r"general.architecture: not an architecture the suite implements"):
        load_checkpoint(tmp_path / "bert.gguf")
