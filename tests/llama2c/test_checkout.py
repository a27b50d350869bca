"""Where the suite looks for a llama2.c source tree: only where $VERIFIER_LLAMA2C_SRC points. A
`shared/llama2c-src` beside the current directory (the developers' layout) is not a user's choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifier.cli import main
from verifier.plugin.llama2c import Llama2cUnavailable, checkout
from verifier.report import suite


@pytest.fixture
def stray_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `shared/llama2c-src` with a run.c beside the current directory, and no variable set."""
    tree = tmp_path / "shared" / "llama2c-src"
    tree.mkdir(parents=True)
    (tree / "run.c").write_text("int main(void) { return 0; }\n")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.delenv(checkout.SOURCE_ENV, raising=False)
    return tree


def test_a_tree_beside_the_current_directory_is_not_picked_up(stray_tree: Path) -> None:
    with pytest.raises(Llama2cUnavailable, match=r"^no llama2\.c source tree: set \$VERIFIER_LLAMA2C_SRC"):
        checkout.source_tree()


def test_the_variable_names_the_tree(stray_tree: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(checkout.SOURCE_ENV, str(stray_tree))
    assert checkout.source_tree() == stray_tree
    monkeypatch.setenv(checkout.SOURCE_ENV, str(tmp_path / "work"))
    with pytest.raises(Llama2cUnavailable, match=r"VERIFIER_LLAMA2C_SRC=.*work holds no run\.c"):
        checkout.source_tree()


def test_check_s_option_names_the_tree_for_the_suite_it_runs(
    stray_tree: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = []
    monkeypatch.setenv(checkout.SOURCE_ENV, "")  # so that the variable check sets is undone after the test
    monkeypatch.setattr(suite, "run", lambda *a, **k: seen.append(checkout.source_tree()) or 4)  # pytest's usage error
    assert main(["check", "--model", "numpy", "--reports", str(tmp_path / "r"), "--llama2c-src", str(stray_tree)]) == 2
    assert seen == [stray_tree]  # what the run's pytest (a child of this process) finds


def test_check_s_option_refuses_a_folder_without_run_c(
    stray_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--model", "numpy", "--reports", str(tmp_path / "r"), "--llama2c-src", "."]) == 2
    err = capsys.readouterr().err
    where = tmp_path / "work"
    assert err == (
        f"verifier check: error: --llama2c-src .: there is no run.c in {where}; "
        "give the folder of a llama2.c checkout\n"
    )
