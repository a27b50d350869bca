"""`verifier audit` as a user runs it: the articles named, every field in JSON, clear errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from verifier.analysis.audit.articles import ARTICLES
from verifier.analysis.audit.inputs import STORIES15M_ENV
from verifier.analysis.audit.verdict import VERDICTS
from verifier.cli import main
from verifier.formats import save_checkpoint
from verifier.model.presets import preset
from verifier.model.weights import init_weights


@pytest.mark.slow  # every claim on GPT-2 small's seeded weights: 7 s here (tests/test_audit.py judges the rows)
def test_audit_json_names_the_articles_and_gives_every_field(capsys) -> None:
    assert main(["audit", "--pad", "8", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert [(a["title"], a["file"]) for a in data["articles"]] == [(a.title, a.file) for a in ARTICLES]
    claims = data["claims"]
    assert len(claims) == 95 and [c["n"] for c in claims] == list(range(1, 96))
    assert {c["verdict"] for c in claims} <= set(VERDICTS)
    assert all(c["places"] and c["how"] and c["stated"] for c in claims)
    padded = next(c for c in claims if c["id"] == "gpt2-padded-last-row")
    assert padded["verdict"] == "wrong" and "row 7 of the [8, 768] input is a padding position" in padded["why"]
    assert "audit: GPT-2 small with seeded weights" in captured.err  # progress goes to stderr
    not_checked = {c["id"]: c for c in data["not_checked"]}  # listed, with why, and no verdict
    assert not_checked["gpt2-best-for-breakdowns"]["why"] and not set(not_checked) & {c["id"] for c in claims}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stories15m", "/nonexistent/stories15M.bin"], "/nonexistent/stories15M.bin"),
        (["--gpt2", "/nonexistent/gpt2"], "no such file or directory"),
        (["--pad", "4"], "--pad must be between the 5 tokens and GPT-2's n_ctx=1024, found 4"),
        (["--pad", "1025"], "--pad must be between the 5 tokens and GPT-2's n_ctx=1024, found 1025"),
    ],
)
def test_unusable_named_weights_are_a_one_line_error(args: list[str], message: str, capsys) -> None:
    assert main(["audit", *args]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the progress lines
    assert last.startswith("verifier audit: error:") and message in last and "Traceback" not in err


def test_a_llama2c_file_that_is_not_stories15m_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    config = preset("llama2c-stories260K")
    save_checkpoint(tmp_path / "stories260K.bin", config, init_weights(config), format="llama2c")
    monkeypatch.setenv(STORIES15M_ENV, str(tmp_path / "stories260K.bin"))
    assert main(["audit"]) == 2
    err = capsys.readouterr().err
    assert "not llama2.c's stories15M: expected a header with dim 288 and n_layers 6, found version 0 header" in err


@pytest.mark.slow
def test_audit_table_at_1024(capsys) -> None:
    assert main(["audit"]) == 0
    out = capsys.readouterr().out
    head = out.split("\n\n")[0]  # the articles come first
    for article in ARTICLES:
        assert article.title in head and article.file in head
    flat = " ".join(out.split())  # the table wraps its text
    assert "row 1023 of the [1024, 768] input is a padding position" in flat
    diff = float(re.search(r"its logits differ from the next token's by up to ([\d.]+)", flat).group(1))
    assert diff > 1  # a pad token's logits, not the next token's
    assert re.search(r"95 claims: \d+ correct, \d+ rounded, 7 misleading, 16 wrong, 2 not checkable, \d+ skipped$", out)


def test_audit_filters_by_article_and_verdict_and_prints_markdown(capsys) -> None:
    assert main(["audit", "--pad", "8", "--article", "ps", "--verdict", "wrong", "--verdict", "misleading",
                 "--markdown"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    table_rows = [line for line in out.splitlines() if re.match(r"\| \d+ \| ", line)]
    assert table_rows and all("(ps l." in line for line in table_rows)
    assert {re.split(r"(?<!\\)\|", line)[5].strip() for line in table_rows} == {"wrong", "misleading"}
    assert "## GPT-2 small" not in out  # no GPT-2 row cites the stories15M article
    assert "Not checked" not in out  # the claims not checked have no verdict to select
    assert re.search(rf"{len(table_rows)} claims: 0 correct, 0 rounded, \d+ misleading, \d+ wrong, 0 not", out)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--article", "fr"], "argument --article: invalid choice: 'fr'"),
        (["--verdict", "right"], "argument --verdict: invalid choice: 'right'"),
        (["--json", "--markdown"], "argument --markdown: not allowed with argument --json"),
    ],
)
def test_a_bad_filter_or_two_formats_is_a_usage_error(args: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["audit", *args])
    assert stopped.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], errors
