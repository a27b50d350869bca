"""`verifier matrix`: models x families, a `verifier check --model MODEL@FAMILY` a cell, written as
matrix.json, matrix.md and matrix.html; a stopped matrix continues where it stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import needs
from tests.meta.suite_runs import mutant_spec
from tests.plugin.project import ROOT, run
from verifier.cli import matrix_cmd
from verifier.report.matrix import Cell, Matrix
from verifier.report.results import Header, ModelCard, Report, Result

MUTANT = mutant_spec("ScaleByDHead")


def _report(*results: Result) -> Report:
    cards = [ModelCard("e@gpt2", "--model", {"gpt2": "logits"})]
    return Report(Header(cards, {"numpy": "2"}, "ci", {}, "properties", "2026-01-01T00:00:00+00:00"), list(results))


def test_a_failing_cell_shows_the_worst_error_the_stage_and_how_to_reproduce_it() -> None:
    report = _report(
        Result("a", "e@gpt2", "pass", worst_error_ratio=0.2, examples=5),
        Result("b", "e@gpt2", "fail", "b: logits differ\nmore", worst_error_ratio=7.5,
               first_divergent_stage="layers.0.attn_out", examples=1, case="config = ModelConfig(...)"),
    )  # fmt: skip
    cell = Cell.from_report("e", "gpt2", report, seconds=3.0)
    assert (cell.verdict, cell.worst_ratio, cell.failure) == ("fails", 7.5, "b: logits differ")
    assert cell.failed == ["b: 7.5x at layers.0.attn_out"]
    assert cell.summary() == "FAILS 7.5 at layers.0.attn_out"
    assert cell.reproduce == "verifier check --model e@gpt2"
    matrix = Matrix("ci", "2026-01-01", {"numpy": "2"}, ["e"], ["gpt2", "llama"], [cell])
    md = matrix.markdown()
    assert "| e | FAILS 7.5 at layers.0.attn_out | not run |" in md
    assert "- **e on gpt2**: fails; 1 of 2 properties failed (b: 7.5x at layers.0.attn_out), worst 7.5x the bound" in md
    assert "`verifier check --model e@gpt2`" in md and "- numpy 2" in md
    html = matrix.html()
    assert '<td class="fails"' in html and "config = ModelConfig(...)" in html
    assert not matrix.accepted  # a cell not run is not conforming either
    assert Cell.from_report("e", "gpt2", _report(Result("a", "e@gpt2", "pass", examples=5)), 1).summary() == "conforms"


def test_a_matrix_round_trips_through_its_json(tmp_path: Path) -> None:
    cells = [Cell("e", "gpt2", "conforms", worst_ratio=0.1, properties_run=3, examples=9)]
    matrix = Matrix("ci", "2026-01-01", {"numpy": "2"}, ["e"], ["gpt2"], cells)
    (tmp_path / "m.json").write_text(matrix.to_json())
    assert Matrix.read(tmp_path / "m.json") == matrix and matrix.accepted


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--families", "gpt2,gpt3"], "argument --families: 'gpt2,gpt3': expected families of gpt2, llama"),
     (["--jobs", "0"], "argument --jobs: '0': expected a whole number of at least 1"),
     (["--model", "numpy@gpt2"], "--model 'numpy@gpt2': the matrix chooses the family of each cell"),
     (["--model", "no_such_module_xyz:build"], "cannot import module 'no_such_module_xyz'")],
)  # fmt: skip
def test_bad_arguments_are_one_line_usage_errors(args: list[str], message: str, tmp_path: Path) -> None:
    done = run(ROOT, "-m", "verifier", "matrix", "--out", str(tmp_path), *args)
    assert done.returncode == 2, done
    assert message in done.stderr and len(done.stderr.strip().splitlines()[-1]) > 0, done
    assert not (tmp_path / "matrix.json").exists()


def test_the_default_models_are_the_built_in_ones_with_engines_and_precision_classes() -> None:
    models = matrix_cmd.default_models()
    assert {"numpy", "llama2c", "llamacpp", "onnxruntime", "transformers-bfloat16", "numpy-q8_0"} <= set(models)


@pytest.mark.slow  # four cells, then the same matrix again
def test_a_matrix_of_two_models_and_two_families_is_written_and_resumed(tmp_path: Path) -> None:
    out = tmp_path / "matrix"
    args = ("-m", "verifier", "matrix", "--model", "numpy", "--model", MUTANT, "--families", "gpt2,llama", "--out",
            str(out), "--hypothesis-profile", "checkpoint", "--jobs", "2", "--", "-k", "logits_agree")  # fmt: skip
    done = run(ROOT, *args, env={"HF_HUB_OFFLINE": "1"})
    assert done.returncode == 1, done  # the mutant fails
    assert "4 cells (2 models x 2 families), 0 kept from an earlier run" in done.stdout, done
    assert f"] {MUTANT}@gpt2: FAILS " in done.stdout and "] numpy@llama: conforms " in done.stdout, done
    matrix = Matrix.read(out / "matrix.json")
    by_cell = {(c.model, c.family): c for c in matrix.cells}
    assert {c.verdict for m, c in by_cell.items() if m[0] == "numpy"} == {"conforms"}
    failing = by_cell[MUTANT, "gpt2"]
    assert failing.verdict == "fails" and failing.worst_ratio is not None and failing.worst_ratio > 1
    assert failing.case.startswith("config = ModelConfig(") and failing.reproduce.endswith(f"{MUTANT}@gpt2")
    assert {"numpy", "torch", "lm-verifier"} <= set(matrix.versions)
    assert "| numpy | conforms " in (out / "matrix.md").read_text()
    assert by_cell["numpy", "llama"].distribution["max_kl"] < 1e-8  # `verifier kl` beside the verdict
    assert by_cell[MUTANT, "gpt2"].distribution["mean_kl"] > 1e-3
    logs = {
        p: p.stat().st_mtime_ns for p in (out / "cells").glob("*/*") if p.name in ("pytest.log", "distribution.json")
    }
    assert len(logs) == 8

    again = run(ROOT, *args, env={"HF_HUB_OFFLINE": "1"})
    assert "4 cells (2 models x 2 families), 4 kept from an earlier run" in again.stdout, again
    assert {p: p.stat().st_mtime_ns for p in logs} == logs  # no cell ran again
    assert json.loads((out / "matrix.json").read_text())["cells"] == json.loads(matrix.to_json())["cells"]
    assert again.returncode == 1


@needs.transformers
@pytest.mark.slow  # four cells of two engines: about 100 s here with two jobs
def test_two_engines_on_two_families_give_the_measured_matrix(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'lm-verifier[llamacpp]')")
    done = run(ROOT, "-m", "verifier", "matrix", "--model", "transformers", "--model", "llamacpp", "--families",
               "llama,gemma2", "--out", str(tmp_path), "--hypothesis-profile", "checkpoint", "--jobs", "2", "--",
               "-k", "logits_agree", env={"HF_HUB_OFFLINE": "1"}, timeout=1200)  # fmt: skip
    cells = {(c.model, c.family): c for c in Matrix.read(tmp_path / "matrix.json").cells}
    verdicts = {cell: c.verdict for cell, c in cells.items()}
    # llama.cpp computes Gemma's GeGLU through its float16 GELU table (see fixtures/builtin.py): measured
    # here at 1.02x float32's bound on the drawn Gemma 2 case, first divergent at the MLP's activation.
    assert verdicts == {("transformers", "llama"): "conforms", ("transformers", "gemma2"): "conforms",
                        ("llamacpp", "llama"): "conforms", ("llamacpp", "gemma2"): "fails"}, done  # fmt: skip
    assert cells["llamacpp", "gemma2"].first_divergent_stage.endswith(".mlp_act")
    assert {"llama-cpp-python", "transformers", "torch"} <= set(Matrix.read(tmp_path / "matrix.json").versions)
    assert done.returncode == 1
