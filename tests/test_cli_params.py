"""`verifier params`: the table, the JSON and the errors, run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from verifier.cli import main
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
