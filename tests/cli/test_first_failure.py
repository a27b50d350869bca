"""A new user's first failure fits on one screen: `verifier check` on a model with one bug (the catalog's
`ScaleByDHead`, which fails most numeric properties) prints a line of progress, one short paragraph per
failure (property, model, worst error against the bound, first divergent stage, the message, the case),
then the table and the verdict last; pytest's whole output, tracebacks and all, is in reports/pytest.log.
Slow: it runs the whole suite on the mutant in the profile a user gets (ci: derandomized, without an
example database, so the output is the same on every machine; about 27 s here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.cli import check_cmd, main

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tests.meta.mutants.catalog:mutants.ScaleByDHead"
# The output's budget: a fixed frame (the running line, progress, the profile and model header, the
# table's head, the folded rows, the verdicts: 15 lines; the first failure's line as it is found, and the
# progress line it splits: 2 more), per failure a paragraph of at most 4 lines and its table row, and per
# skip note one line. Measured: 12 failures and 1 skip in 71 lines (15 + 5 x 12 + 1 = 76); 81 before
# Hypothesis's explanation of a generated failure was taken out of its paragraph.
FRAME, PER_FAILURE, PER_SKIP = 17, 5, 1
_HYPOTHESIS_INTERNALS = (
    "Falsifying", "Failing explicit example", "Failing test case", "Verbosity", "reproduce_failure", "ModelSpec(",
    "Explanation:", "always and only run by failing test cases",
)  # fmt: skip


@pytest.mark.slow
def test_the_first_failure_fits_on_a_screen_and_the_log_holds_the_rest(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERIFIER_", "PYTEST_"))}
    done = subprocess.run(
        [sys.executable, "-m", "verifier", "check", "--model", MODEL, "--reports", str(reports)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr == "", done
    lines = done.stdout.rstrip().splitlines()
    results = json.loads((reports / "conformance.json").read_text())["results"]
    failures = [r for r in results if r["outcome"] == "fail"]
    skips = [r for r in results if r["outcome"] == "skip"]
    assert len(failures) >= 5 and len(lines) <= FRAME + PER_FAILURE * len(failures) + PER_SKIP * len(skips), (
        len(failures), len(skips), len(lines), done.stdout)  # fmt: skip
    assert len([line for line in lines if re.match(r"\[\d+\] test_", line)]) <= len(skips)  # a line a note
    running = f"verifier check: running the property suite; pytest's whole output goes to {reports}/pytest.log"
    assert lines[0].startswith(f"{running} (while it runs: {reports}/.verifier-run-"), lines[0]
    # The progress line, and in it, as soon as it is found, the first failure (before Hypothesis shrinks it).
    note = next(i for i, line in enumerate(lines) if line.startswith(f"first failure of {MODEL}, "))
    assert re.fullmatch(r"[.FEsxX]+ (\d+)/\1", "".join([*lines[1:note], lines[note + 1]])), lines[: note + 2]
    assert "Traceback" not in done.stdout and "_ _ _" not in done.stdout
    assert not [word for word in _HYPOTHESIS_INTERNALS if word in done.stdout], done.stdout

    # One paragraph per failure: heading (property / model: worst error against the bound, first divergent
    # stage where the model traces), the message, the case that reproduces it.
    headings = [i for i, line in enumerate(lines) if re.match(r"\[\d+\] FAIL ", line)]
    assert len(headings) == len(failures) and headings[0] == note + 3, lines
    for start, end in zip(headings, [*headings[1:], lines.index("", headings[-1])], strict=True):
        heading, *body = lines[start:end]
        assert re.fullmatch(rf"\[\d+\] FAIL test_\w+\.py::test_\w+ / {MODEL}: worst error \S+x the float32 bound.*",
                            heading), heading  # fmt: skip
        assert 2 <= len(body) <= 3 and all(line.startswith("    ") for line in body), body
        assert body[-1].startswith("    case: config = ModelConfig(") and "weights = init_weights(config" in body[-1]
        assert "float32 tolerance" in body[0], body  # what was compared, the error and its bound
    logits = next(lines[i] for i in headings if "::test_logits_agree_with_the_oracle " in lines[i])
    assert logits.endswith("; first divergent stage layers.0.scores"), logits

    # The table and the verdict last.
    assert lines[-2].startswith(f"{MODEL}: FAILS (") and re.fullmatch(
        rf"{len(failures)} fail, \d+ pass, \d+ skip: does not conform; reports written: .*/pytest\.log", lines[-1]
    ), lines[-2:]
    table = next(i for i, line in enumerate(lines) if line.startswith("property "))
    assert table > headings[-1] and lines[table + 2].startswith("test_agreement.py::test_logits_agree_with_the_oracle")
    assert sum("FAIL " in line for line in lines[table:]) == len(failures)

    log = (reports / "pytest.log").read_text()
    assert "= FAILURES =" in log and "Failing explicit example" in log and "short test summary info" in log
    assert log.count("PropertyFailure") >= len(failures)


def test_first_failure_asks_the_plugin_for_an_early_verdict(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ran: list[list[str]] = []

    def check(args: object, suite_dir: Path, config: object, pytest_args: list[str], *_: object) -> int:
        ran.append(pytest_args)
        return 0

    monkeypatch.setattr(check_cmd, "_check", check)
    main(["check", "--first-failure", "--model", "numpy", "--reports", str(tmp_path), "--", "--shrink-seconds", "20"])
    # The plugin's options first: a user's own, later, win.
    assert ran == [["--model-maxfail", "1", "--shrink-seconds", "5", "--shrink-seconds", "20"]]


@pytest.mark.slow  # 6 s: a verifier check of its own
def test_an_early_verdict_stops_at_the_first_failing_property(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "verifier", "check", "--first-failure", "--model", MODEL, "--reports", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 1, done
    results = json.loads((tmp_path / "conformance.json").read_text())["results"]
    mine = [r for r in results if r["model"] == MODEL]
    assert [r["outcome"] for r in mine].count("fail") == 1, mine
    stopped = [r for r in mine if r["outcome"] == "skip" and "(--model-maxfail 1)" in r["detail"]]
    assert len(stopped) >= len(mine) - 3, mine  # the others: a pass before it, a skip of its own
