"""`verifier inspect` and `verifier params` on every format, and models found in the Hugging Face cache."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.formats import detect_format, load_checkpoint, save_checkpoint, write_tokenizer
from verifier.formats.hf_dir import write_hf_dir
from verifier.formats.llama2c_tokenizer import Tokenizer
from verifier.model.params import parameter_table
from verifier.model.presets import preset
from verifier.model.weights import init_weights

LLAMA = preset("llama2c-stories260K").replace(n_kv_heads=8, tie_embeddings=False)
GPT2 = preset("gpt2").replace(vocab_size=50, n_ctx=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=64)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("files")
    out = {}
    for version in (0, 1, 2):
        out[f"llama2c v{version}"] = root / f"model-v{version}.bin"
        save_checkpoint(out[f"llama2c v{version}"], LLAMA, init_weights(LLAMA), format="llama2c", version=version)
    out["hf gpt2"] = root / "gpt2"
    write_hf_dir(out["hf gpt2"], GPT2, init_weights(GPT2))
    out["hf sharded"] = root / "sharded"
    write_hf_dir(out["hf sharded"], LLAMA, init_weights(LLAMA), max_shard_bytes=100_000)
    return out


EXPECTED = {
    "llama2c v0": ("llama2c", 0, LLAMA, 11 + 2 + 1),  # stacked blocks, the 2 RoPE tables, the classifier
    "llama2c v1": ("llama2c", 1, LLAMA, 11 + 1),
    "llama2c v2": ("llama2c", 2, LLAMA, 5 * 7 + 5),
    "hf gpt2": ("hf-safetensors", None, GPT2, 4 + 12 * 2),
    "hf sharded": ("hf-safetensors-sharded", None, LLAMA, 2 + 9 * 5 + 1),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_inspect_json_reports_format_config_tensors_total_and_findings(
    files: dict[str, Path], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fmt, version, config, n_tensors = EXPECTED[name]
    assert main(["inspect", str(files[name]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["format"], report["version"]) == (fmt, version)
    assert report["config"] == json.loads(json.dumps(config.to_dict()))  # tuples (layer_types) as JSON lists
    assert report["shared_classifier"] is config.tie_embeddings
    assert report["parameters"] == parameter_table(config).total
    assert len(report["tensors"]) == n_tensors
    assert all({"name", "dtype", "shape"} <= set(t) for t in report["tensors"])
    assert isinstance(report["findings"], list)


def test_inspect_text_shows_every_part(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(files["llama2c v0"])]) == 0
    out = capsys.readouterr().out
    assert "format: llama2c, version 0" in out
    assert "classifier: separate" in out
    assert f"parameters: {parameter_table(LLAMA).total:,}" in out
    assert re.search(r"freq_cis_real +float32 +\[512, 4\]", out)
    assert "RoPE tables match theta 10000" in out


def test_inspect_reads_a_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tokenizer(tmp_path / "tokenizer.bin", Tokenizer((b"<unk>", b"a", b"bc"), (0.0, -1.0, 2.5), 5))
    assert main(["inspect", str(tmp_path / "tokenizer.bin"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["format"], report["pieces"], report["max_token_length"]) == ("llama2c-tokenizer", 3, 5)
    assert report["score_range"] == [-1.0, 2.5]


@pytest.mark.parametrize("name", ["llama2c v1", "hf gpt2"])
def test_params_takes_checkpoints(files: dict[str, Path], name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["params", str(files[name]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == parameter_table(EXPECTED[name][2]).total


def test_bad_files_are_one_line_errors_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "junk.bin").write_bytes(b"this is not a model at all")
    for argv in (["inspect", str(tmp_path / "junk.bin")], ["params", str(tmp_path / "junk.bin")],
                 ["inspect", str(tmp_path / "absent.bin")], ["inspect", "nobody/no-such-model"]):  # fmt: skip
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"verifier {argv[0]}: error:") and err.count("\n") == 1, err
    assert main(["inspect", "nobody/no-such-model"]) == 2
    assert "not in the local Hugging Face cache (pass --download; the cache is " in capsys.readouterr().err


def test_detection_by_content_and_by_name(files: dict[str, Path], tmp_path: Path) -> None:
    assert detect_format(files["llama2c v0"]) == "llama2c"
    assert detect_format(files["llama2c v2"]) == "llama2c"
    assert detect_format(files["hf gpt2"]) == "hf"
    assert detect_format(files["hf gpt2"] / "model.safetensors") == "hf"
    assert detect_format(files["hf gpt2"] / "config.json") == "hf"
    assert load_checkpoint(files["hf gpt2"] / "model.safetensors").config == GPT2
    write_tokenizer(tmp_path / "tokenizer.bin", Tokenizer((b"a",), (0.0,), 1))
    assert detect_format(tmp_path / "tokenizer.bin") == "llama2c-tokenizer"
    with pytest.raises(ValueError, match=r"is a llama2\.c tokenizer, not a model"):
        load_checkpoint(tmp_path / "tokenizer.bin")


def test_repo_ids_resolve_in_the_hugging_face_cache(files: dict[str, Path], tmp_path: Path) -> None:
    """As a user runs it: HF_HUB_CACHE set, a repo id on the command line, no network."""
    snapshot = tmp_path / "hub" / "models--someone--tiny-gpt2" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for f in files["hf gpt2"].iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    (tmp_path / "hub" / "models--someone--tiny-gpt2" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--tiny-gpt2" / "refs" / "main").write_text("0123abcd")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "verifier", "inspect", "someone/tiny-gpt2", "--json"],
                          capture_output=True, text=True, env=env, cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["path"] == str(snapshot)
    assert report["parameters"] == parameter_table(GPT2).total


def test_a_llama2c_file_that_looks_like_safetensors_is_still_llama2c(tmp_path: Path) -> None:
    """n_layers = 123 puts '{' at byte 8, where a safetensors header starts."""
    config = LLAMA.replace(vocab_size=2, n_ctx=2, d_model=2, n_heads=1, n_kv_heads=1, d_ff=1, n_layers=123)
    save_checkpoint(tmp_path / "model.bin", config, init_weights(config), format="llama2c")
    assert (tmp_path / "model.bin").read_bytes()[8:9] == b"{"
    assert detect_format(tmp_path / "model.bin") == "llama2c"
    assert load_checkpoint(tmp_path / "model.bin").config == config
