"""`verifier params` on known models and `--list`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests import needs
from verifier.cli import main
from verifier.formats import save_checkpoint
from verifier.model.known_models import known_model, known_models
from verifier.model.presets import PRESETS
from verifier.model.weights import init_weights


def test_a_known_model_by_name_with_its_source(capsys) -> None:
    assert main(["params", "llama-2-7b"]) == 0
    out = capsys.readouterr().out
    assert "6,738,415,616" in out
    assert "source: https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json" in out
    assert "RoPE" not in out  # a Hugging Face checkpoint stores no RoPE tables


def test_mixture_of_experts_shows_experts_router_and_active_parameters(capsys) -> None:
    assert main(["params", "mixtral-8x7b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    components = {c["component"]: c["count"] for c in data["components"]}
    assert components["expert router"] == 32 * 8 * 4096
    assert components["MLP (8 SwiGLU experts: gate, up, down)"] == 32 * 8 * 3 * 4096 * 14336
    assert (data["total"], data["active"]) == (46_702_792_704, 12_879_925_248)
    assert data["config"]["num_local_experts"] == 8


def test_list_shows_every_preset_and_known_model_once(capsys) -> None:
    assert main(["params", "--list", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    names = [e["name"] for e in entries]
    assert sorted(names) == sorted(set(PRESETS) | set(known_models()))
    assert [e["total"] for e in entries] == sorted(e["total"] for e in entries)
    assert next(e for e in entries if e["name"] == "gpt2")["kind"] == "preset, published config"
    assert main(["params", "--list"]) == 0
    table = capsys.readouterr().out
    assert "qwen2.5-7b" in table and "7,615,616,512" in table and "12,879,925,248 active" in table


def test_no_model_and_no_list_is_a_user_error(capsys) -> None:
    assert main(["params"]) == 2
    assert "give a MODEL" in capsys.readouterr().err


def test_a_checkpoint_written_by_the_suite_is_counted(tmp_path, capsys) -> None:
    config = PRESETS["llama2c-stories260K"]
    save_checkpoint(tmp_path / "model.bin", config, init_weights(config), format="llama2c", version=1)
    assert main(["params", str(tmp_path / "model.bin"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # 512 x 64 embedding, 5 layers of q, o [64, 64], k, v [32, 64], 3 x [172, 64], 11 RMSNorm gains
    assert data["total"] == 512 * 64 + 5 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 172 * 64) + 11 * 64 == 260_032


def test_params_counts_a_config_json_of_a_type_the_reference_does_not_run(tmp_path, capsys) -> None:
    """A Mixtral config.json is counted from its own fields (experts and router included)."""
    (tmp_path / "config.json").write_text(json.dumps(known_model("mixtral-8x7b").fields))
    assert main(["params", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 46_702_792_704


def test_params_names_the_file_and_field_of_an_uncountable_config_json(tmp_path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "bert", "hidden_size": 8}')
    assert main(["params", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "model_type" in err


def test_output_into_a_closed_pipe_is_not_a_traceback() -> None:
    """`verifier params --list | head -n 0`: the reader is gone before the first write."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "verifier", "params", "--list"], stdout=write_end, stderr=subprocess.PIPE, text=True
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


# Qwen3-0.6B's config.json with the YaRN scaling its model card gives for long contexts.
_QWEN3_YARN = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936, "hidden_size": 1024,
    "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
    "tie_word_embeddings": True,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
}  # fmt: skip


@needs.transformers
def test_a_rope_scaling_the_reference_does_not_run_still_counts_as_transformers_counts(tmp_path, capsys) -> None:
    # It was refused: "rope_type 'yarn' is not implemented", though no rotation adds a parameter.
    from transformers import AutoConfig

    from verifier.formats import hf

    (tmp_path / "config.json").write_text(json.dumps(_QWEN3_YARN))
    assert main(["params", str(tmp_path), "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    fields = {k: v for k, v in _QWEN3_YARN.items() if k != "model_type"}
    assert total == hf.parameter_count(AutoConfig.for_model("qwen3", **fields)) == 596_049_920


def test_a_folder_named_as_a_preset_is_the_folder(tmp_path, capsys, monkeypatch) -> None:
    # `verifier params gpt2` counted the preset though ./gpt2 held a model, as from_pretrained("gpt2") reads it.
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps(_QWEN3_YARN))
    monkeypatch.chdir(tmp_path)
    assert main(["params", "gpt2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 596_049_920
    monkeypatch.chdir(tmp_path / "gpt2")  # elsewhere, the name is the preset
    assert main(["params", "gpt2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 124_439_808
