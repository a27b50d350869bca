"""Version-2 files and group sizes: the writer never leaves a partial group at the end of a row, and
a file that does (as llama2.c's export.py writes when hidden_dim is not a multiple of the group size)
is flagged by the reader and `verifier inspect`: runq.c drops those inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.formats import llama2c_spec as spec
from verifier.cli import main
from verifier.formats import load_checkpoint
from verifier.formats.llama2c import write_llama2c
from verifier.formats.llama2c_layout import header_for
from verifier.model.presets import preset
from verifier.model.weights import init_weights

# hidden_dim 40 is not a multiple of export.py's group size 32 (which divides dim 32).
PARTIAL = preset("llama2c-stories260K").replace(d_model=32, n_heads=4, n_kv_heads=2, d_ff=40, n_layers=1)


def test_the_writer_picks_a_group_size_that_divides_every_row() -> None:
    assert header_for(PARTIAL, 2).group_size == 8  # 64 -> 32 divides dim 32, not hidden_dim 40 -> 16 -> 8
    assert header_for(PARTIAL.replace(d_ff=96), 2).group_size == 32


def test_a_file_the_writer_writes_has_no_partial_group_finding(tmp_path: Path) -> None:
    write_llama2c(tmp_path / "q.bin", PARTIAL, init_weights(PARTIAL), version=2)
    assert not [f for f in load_checkpoint(tmp_path / "q.bin").findings if "runq.c drops" in f]


def test_a_partial_group_file_is_flagged_by_the_reader_and_inspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "export.bin"
    assert spec.export_v2(path, PARTIAL, spec.random_model(PARTIAL, seed=1)) == 32
    finding = (
        "runq.c drops the last 8 inputs of every row of w2: hidden_dim 40 is not a multiple of group_size 32, "
        "so runq.c computes another model than this file describes"
    )
    assert finding in load_checkpoint(path).findings
    assert main(["inspect", str(path)]) == 0
    assert finding in capsys.readouterr().out
