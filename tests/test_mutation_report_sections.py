"""The per-class section of the mutation report keeps the classes a run did not measure (a run of
`--classes tf32` must not drop the float32, bfloat16, ... columns already there)."""

from __future__ import annotations

from benchmarks.mutation_report import MutantResult, earlier_columns, render_classes


def _killed(name: str, seconds: float) -> MutantResult:
    return MutantResult(name, ["agreement: logits"], {"agreement: logits": seconds}, None, seconds)


def _survives(name: str, effect: float) -> MutantResult:
    return MutantResult(name, [], {}, None, None, effect=effect)


def test_a_run_of_one_class_keeps_the_columns_of_the_others_and_says_so() -> None:
    correct = MutantResult("correct", [], {}, None, None)
    first = render_classes(
        {
            "float32": ([_killed("NoScale", 0.01), _killed("GeluExactErf", 0.03)], correct),
            "bfloat16": ([_killed("NoScale", 0.02), _survives("GeluExactErf", 0.26)], correct),
        },
        60.0,
    )
    second = render_classes(
        {"tf32": ([_killed("NoScale", 0.05), _survives("GeluExactErf", 0.5)], correct)}, 60.0, earlier_columns(first)
    )
    assert "| mutant | float32 | tf32 | bfloat16 |" in second
    assert "| GeluExactErf | 0.03 s | undetectable (0.5x the bound) | undetectable (0.26x the bound) |" in second
    assert "| bfloat16 | 1 of 2 | 1 | 0 | 0.02 / 0.02 | passes every property |" in second
    assert "Kept from earlier runs" in second and ": float32, bfloat16." in second
    assert "- bfloat16: NoScale: agreement: logits" in second
    again = render_classes(
        {"bfloat16": ([_killed("NoScale", 0.07), _killed("GeluExactErf", 0.9)], correct)}, 60.0, earlier_columns(second)
    )
    assert "| GeluExactErf | 0.03 s | undetectable (0.5x the bound) | 0.90 s |" in again
