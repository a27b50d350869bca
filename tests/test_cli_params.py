"""`verifier params`: the table, the JSON and the errors, run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import needs
from verifier.cli import main
from verifier.cli.params_cmd import markdown_listing
from verifier.model.presets import preset


def test_params_gpt2_prints_the_exact_total(capsys) -> None:
    assert main(["params", "gpt2"]) == 0
    out = capsys.readouterr().out
    assert "124,439,808" in out
    assert "38,597,376" in out  # token embedding
    assert "786,432" in out  # position embedding


def test_params_stories15m_prints_learned_and_stored_totals(capsys) -> None:
    assert main(["params", "llama2c-stories15M"]) == 0
    out = capsys.readouterr().out
    assert "15,191,712" in out
    assert "15,204,000" in out


def test_params_json_is_machine_readable(capsys) -> None:
    assert main(["params", "llama2c-stories15M", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total"] == 15_191_712
    assert data["total_with_stored_rope"] == 15_204_000
    assert sum(c["count"] for c in data["components"]) == data["total"]


def test_params_reads_a_config_json_and_a_directory(tmp_path, capsys) -> None:
    (tmp_path / "config.json").write_text(json.dumps(preset("gpt2").to_hf_dict()))
    for arg in (str(tmp_path), str(tmp_path / "config.json")):
        assert main(["params", arg, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["total"] == 124_439_808


@pytest.mark.parametrize("arg", ["no-such-preset", "missing/config.json"])
def test_params_reports_bad_input_in_one_line_with_status_2(arg: str, capsys) -> None:
    assert main(["params", arg]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verifier params: error:")
    assert "Traceback" not in err


def test_python_dash_m_verifier_is_the_same_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "verifier", "params", "gpt2"], capture_output=True, text=True, check=True
    )
    assert "124,439,808" in out.stdout


PUBLISHED = {  # the published configs: totals as transformers counts them (tests/test_known_models.py)
    "llama-3.1-8b": "8,030,261,248",
    "llama-3.2-1b": "1,235,814,400",
    "mistral-7b": "7,241,732,096",
    "qwen2-7b": "7,615,616,512",
    "qwen3-8b": "8,190,735,360",
    "gemma-7b": "8,537,680,896",
    "gemma-2-9b": "9,241,705,984",
    "mixtral-8x7b": "46,702,792,704",
    "qwen1.5-moe-a2.7b-chat": "14,315,784,192",
    "phi-3-mini-4k-instruct": "3,821,079,552",
    "phi-4-mini-instruct": "3,836,021,760",
    "glm-4-9b-chat-hf": "9,399,951,360",
}


@pytest.mark.parametrize(("name", "total"), PUBLISHED.items())
def test_params_prints_the_exact_total_of_each_published_family_config(name: str, total: str, capsys) -> None:
    assert main(["params", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: ") and "total (learned parameters)" in out
    assert total in out.split("total (learned parameters)")[1].splitlines()[0]


def test_params_list_json_has_every_published_family_config(capsys) -> None:
    assert main(["params", "--list", "--json"]) == 0
    totals = {e["name"]: f"{e['total']:,}" for e in json.loads(capsys.readouterr().out)}
    assert {name: totals[name] for name in PUBLISHED} == PUBLISHED


def test_params_breakdown_names_the_switches_it_counts(capsys) -> None:
    assert main(["params", "qwen3-8b"]) == 0
    out = capsys.readouterr().out
    assert "q/k norms (RMSNorm gain over d_head)  36 x ([128] + [128])" in out
    assert main(["params", "gemma-2-9b"]) == 0
    out = capsys.readouterr().out
    assert "d_head 256" in out.splitlines()[0] and "169 x [3584]" in out  # 4 norms a layer and the final one
    assert main(["params", "qwen1.5-moe-a2.7b-chat"]) == 0
    out = capsys.readouterr().out
    assert "60 experts (4 per token), d_expert 1408, shared expert 5632" in out.splitlines()[0]
    assert (
        "shared expert (gate, up, down) and its gate  24 x ([5632, 2048] + [5632, 2048] + [2048, 5632] + [1, 2048])"
        in out
    )
    assert "active per token (routed experts only)" in out and "2,689,173,504" in out
    assert main(["params", "phi-3-mini-4k-instruct"]) == 0
    out = capsys.readouterr().out
    assert "attention q, k, v (fused)      32 x ([9216, 3072])" in out and "MLP (gate and up fused, down)" in out


@needs.transformers
def test_params_counts_a_config_json_save_pretrained_wrote_for_each_family(tmp_path, capsys) -> None:
    from verifier.formats import hf
    from verifier.model.config import from_hf_dict
    from verifier.model.known_models import known_model

    names = ("qwen3-8b", "gemma-2-9b", "llama-3.2-1b", "mixtral-8x7b", "qwen1.5-moe-a2.7b-chat",
             "phi-3-mini-4k-instruct", "glm-4-9b-chat-hf")  # fmt: skip
    for name in names:
        published = from_hf_dict(known_model(name).fields)
        kinds = published.layer_types[:2]
        small = {"n_layers": 2, "vocab_size": 1000, "layer_types": kinds, "d_model": 1024, "n_heads": 8, "d_ff": 64}
        small |= {"n_kv_heads": min(published.n_kv_heads, 8), "d_shared_expert": published.d_shared_expert and 32}
        config = published.replace(**small)  # d_head 128 where it is derived: Phi-3's 96 rotated dims fit
        config.to_transformers().save_pretrained(tmp_path / name)
        assert main(["params", str(tmp_path / name), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["total"] == hf.parameter_count(config.to_transformers()), name


def test_the_docs_totals_table_is_the_listing() -> None:
    """docs/how-to/inspect.md's totals table is `verifier params --list` as Markdown: a total changed in the
    code (or a known model added) without the docs fails here, with the table to paste."""
    readme = (Path(__file__).parents[1] / "docs" / "how-to" / "inspect.md").read_text(encoding="utf-8")
    start = "<!-- totals: generated from verifier.cli.params_cmd.markdown_listing() -->\n"
    block = readme.split(start, 1)[1].split("\n<!-- end totals -->", 1)[0]
    stale = "docs/how-to/inspect.md's totals table is stale; replace it with:\n"
    assert block == markdown_listing(), stale + markdown_listing()
