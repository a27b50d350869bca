"""`verifier trace`: the table, the JSON, the plot and the errors, run as a user runs them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from verifier.cli import main
from verifier.formats import Tokenizer, save_checkpoint, write_tokenizer
from verifier.model.presets import preset
from verifier.model.weights import init_weights
from verifier.reference import NumpyModel


def test_llama_trace_shows_rmsnorm_rope_swiglu_and_the_growing_cache(capsys) -> None:
    assert main(["trace", "llama2c-stories15M", "--tokens", "1,9038,2501"]) == 0
    out = capsys.readouterr().out
    for shown in ("RMSNorm", "RoPE: rotate pairs", "SwiGLU", "6 x [3, 48]", "cos, sin tables 2 x [3, 24]"):
        assert shown in out, shown
    for S in (1, 2, 3):
        assert f"cache [6, 2, 1, {S}, 6, 48]" in out
    assert "layers 1-5: the same steps, 5 more times" in out
    assert re.search(r"next token +\[32000\] +argmax of logits\[2\]", out)


def test_text_is_tokenized_with_the_real_tokenizer(llama_tokenizer, capsys) -> None:
    assert main(["trace", "llama2c-stories15M", "--text", "Once upon a time"]) == 0
    out = capsys.readouterr().out
    assert "tokens: [1, 9038, 2501, 263, 931]" in out
    assert "' Once' ' upon' ' a' ' time'" in out


def test_without_a_tokenizer_text_is_refused_and_tokens_asked_for(no_tokenizers, capsys) -> None:
    assert main(["trace", "llama2c-stories260K", "--text", "hello"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verifier trace: error: cannot tokenize 'hello': no llama tokenizer")
    assert "--tokens" in err


def test_all_layers_and_padding(capsys) -> None:
    assert main(["trace", "llama2c-stories260K", "--tokens", "1 20 30", "--layers", "all", "--pad", "64"]) == 0
    out = capsys.readouterr().out
    assert "layer 4 of 5" in out and "more times" not in out
    assert "8 x [64, 64]" in out and "[64, 172]" in out
    assert "padded with token 2 to 64 positions" in out and "the next token is the same" in out


def test_json_and_plot(tmp_path: Path, capsys) -> None:
    plot = tmp_path / "flow.svg"
    assert main(["trace", "llama2c-stories260K", "--tokens", "[1, 2]", "--json", "--plot", str(plot)]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["tokens"] == [1, 2] and data["T"] == 2 and data["config"]["d_model"] == 64
    assert f"plot written to {plot}" in captured.err
    assert "<svg" in plot.read_text()


def test_a_config_json_is_traced_with_seeded_weights(tmp_path: Path, no_tokenizers, capsys) -> None:
    config = preset("gpt2").replace(n_layers=2, vocab_size=300, d_model=32, n_heads=4, n_kv_heads=4, d_ff=64)
    (tmp_path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    assert main(["trace", str(tmp_path / "config.json"), "--tokens", "5,6,7,8"]) == 0
    out = capsys.readouterr().out
    assert "4 x [4, 8]" in out and "c_attn.weight[:, 32:64] [32, 32]" in out and "seed 0" in out


@pytest.mark.parametrize(
    ("fmt", "version", "name"), [("hf", 0, "model"), ("llama2c", 0, "model.bin"), ("llama2c", 1, "v1.bin")]
)
def test_a_checkpoint_is_traced_with_its_own_weights(tmp_path: Path, no_tokenizers, fmt, version, name, capsys):
    config = preset("llama2c-stories260K")
    weights = init_weights(config, seed=7, scale=0.5)
    save_checkpoint(tmp_path / name, config, weights, format=fmt, version=version)
    assert main(["trace", str(tmp_path / name), "--tokens", "1,40,300", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    logits = NumpyModel(config, weights).logits(np.array([1, 40, 300]))
    assert data["weights_source"].startswith(str(tmp_path / name))
    assert data["prediction"]["token"] == int(logits[-1].argmax())
    embed = next(s for s in data["steps"] if s["stage"] == "embed")
    np.testing.assert_allclose(embed["values"], weights["model.embed_tokens.weight"][300, :3], rtol=1e-6)


def test_a_directory_without_weights_is_a_checkpoint_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "config.json").write_text(json.dumps(preset("llama2c-stories260K").to_hf_dict()))
    assert main(["trace", str(tmp_path), "--tokens", "1"]) == 2
    assert capsys.readouterr().err.startswith(f"verifier trace: error: {tmp_path}")


def test_the_models_own_directory_holds_its_tokenizer(tmp_path: Path, no_tokenizers, capsys) -> None:
    config = preset("llama2c-stories260K").replace(vocab_size=4)
    (tmp_path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    write_tokenizer(tmp_path / "tokenizer.bin", Tokenizer((b"<unk>", b"<s>", b" ", b"a"), (0.0,) * 4, 5))
    assert main(["trace", str(tmp_path / "config.json"), "--text", "aa"]) == 0
    out = capsys.readouterr().out
    assert "tokens: [1, 2, 3, 3]" in out and f"(tokenizer: {tmp_path / 'tokenizer.bin'})" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tokens", "1,x"], "--tokens must be non-negative integers"),
        (["--tokens", "1,600"], "token ids must be in [0, 512)"),
        (["--tokens", "1,2", "--pad", "1"], "--pad must be between the 2 tokens and n_ctx=512"),
        (["--tokens", "1,2", "--plot", "flow.pdf"], "must end in .svg or .png"),
        (["--tokens", "1,2", "--plot", "no/such/dir/flow.svg"], "the directory no/such/dir does not exist"),
    ],
)
def test_bad_input_is_one_line_with_status_2(args: list[str], message: str, capsys) -> None:
    assert main(["trace", "llama2c-stories260K", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verifier trace: error:") and message in err and "Traceback" not in err


@pytest.mark.slow
def test_gpt2_as_the_articles_tell_it(gpt2_tokenizer, capsys) -> None:
    assert main(["trace", "gpt2", "--pad", "1024"]) == 0
    out = capsys.readouterr().out
    assert "tokens: [464, 3139, 286, 4881, 318]" in out
    for shown in ("[1024, 768]", "12 x [1024, 64]", "12 x [1024, 1024]", "[1024, 3072]", "[1024, 50257]"):
        assert shown in out, shown
    assert "layers 1-11: the same steps, 11 more times" in out
    assert "the next token is the same" in out


def test_a_token_id_beyond_int64_is_one_line(capsys) -> None:
    # Issue 25: an id above 2**63 escaped as NumPy's OverflowError, a traceback.
    assert main(["trace", "llama2c-stories260K", "--tokens", f"1,{2**63}"]) == 2
    err = capsys.readouterr().err
    assert err == f"verifier trace: error: --tokens: {2**63} is no token id (ids are below the vocabulary size)\n"
    assert main(["trace", "llama2c-stories260K", "--tokens", f"{2**63 - 1}"]) == 2  # NumPy holds it: the range check
    assert "token ids must be in [0, 512)" in capsys.readouterr().err
