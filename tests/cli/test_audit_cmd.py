"""`verifier audit`: every claim of the issue, with its verdict, as a user runs it."""

from __future__ import annotations

import json

import pytest

from verifier.cli import main

CLAIMS = {
    "'The capital of France is' is token ids",
    "GPT-2's vocabulary (tokens)",
    "GPT-2's token embedding (parameters)",
    "GPT-2 formula: its value",
    "GPT-2 formula: the parameter count",
    "stories15M table: total",
    "RMSNorm's RMS",
    "attention output",
    "feed-forward (FFN)",
}


def test_audit_json_has_every_claim_with_a_verdict(capsys) -> None:
    assert main(["audit", "--pad", "8", "--json"]) == 0
    claims = json.loads(capsys.readouterr().out)["claims"]
    names = {c["claim"] for c in claims}
    assert names >= CLAIMS | {"padding to the max length, 8, changes nothing"}
    assert sum(n.startswith("GPT-2 breakdown, version") for n in names) == 8
    assert sum(n.startswith("stories15M table:") for n in names) == 14
    verdicts = {c["verdict"].split(":")[0] for c in claims}
    assert verdicts <= {"correct", "rounded", "wrong", "skipped"}
    padding = next(c for c in claims if c["claim"].startswith("padding"))
    assert padding["verdict"] == "correct" and padding["detail"].startswith("gpt2, seeded weights")


@pytest.mark.slow
def test_audit_table_at_1024(gpt2_tokenizer, capsys) -> None:
    assert main(["audit"]) == 0
    out = capsys.readouterr().out
    assert "1024, changes nothing" in out
    assert "[464, 3139, 286, 4881, 318]" in out
    assert out.rstrip().endswith("15 correct, 7 rounded, 9 wrong, 0 skipped")
