"""`verifier matrix` and `verifier kl` import a user's `module.path:factory` from the current directory, as
`verifier check` and `verifier models` do, when run as the installed `verifier` script (whose own
directory, not the current one, is first on sys.path)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.plugin.project import ROOT, run

SCRIPT = str(Path(sys.executable).parent / "verifier")


@pytest.mark.slow  # `verifier kl` and `verifier matrix` as installed scripts: 7 s here
def test_the_matrix_and_kl_find_a_model_in_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "mymodel").mkdir()
    (tmp_path / "mymodel" / "__init__.py").write_text("")
    shutil.copy(ROOT / "examples" / "numpy_gpt2.py", tmp_path / "mymodel" / "gpt.py")
    kl = run(tmp_path, SCRIPT, "kl", "--model", "mymodel.gpt:build", "--families", "gpt2")
    assert kl.returncode == 0 and "mymodel.gpt:build on gpt2: mean KL divergence " in kl.stdout, kl
    matrix = run(tmp_path, SCRIPT, "matrix", "--model", "mymodel.gpt:build", "--families", "gpt2", "--out", "m",
                 "--hypothesis-profile", "checkpoint", "--", "-k", "logits_agree")  # fmt: skip
    assert matrix.returncode == 0, matrix
    (cell,) = json.loads((tmp_path / "m" / "matrix.json").read_text())["cells"]
    assert (cell["model"], cell["verdict"]) == ("mymodel.gpt:build", "conforms")
