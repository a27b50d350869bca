"""Every guarantee the search tier found still holds, replayed in-process on its recorded example: each
catalog mutant at each class fails a property, each as constrained code runs it, each traced bug names
its stage, each decode bug its chunk, each property fails for the bug it targets, no bug gets a precision
hint and a class computed and undeclared is named (`tests/meta/search.py` says what each kind means).

A record that no longer holds fails with its name: the code changed so that the example the search
found no longer shows the bug (a property weakened?), or shows it differently. Search it again
(`python -m tests.meta.search --only MUTANT --write`); if the search finds no example, it is a hole.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from tests.meta import records, search
from tests.meta.mutants.catalog import FLOAT32_INVISIBLE
from verifier.model.config import ModelConfig, RopeScaling
from verifier.plugin.registry import load_spec
from verifier.properties import checks
from verifier.properties.cases import Case, Chunked

RECORDS = records.load()
SEARCHES = search.searches()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the mutants' overflows, as in their searches
@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_a_recorded_guarantee_still_holds(record: records.Record) -> None:
    replayed = records.replay(record.property, load_spec(record.model), record.example)
    failure, kept = replayed.failure, replayed.recorded
    assert failure is not None, (
        f"record {record.name}: {record.property} {'skips' if replayed.skipped else 'passes'} on its example now"
        + (f" ({replayed.skipped})" if replayed.skipped else "")
    )
    if not record.name.startswith("hint/"):  # a hint record says what any failure of the mutant lacks
        assert isinstance(failure, AssertionError) and f"model {record.model!r}" in str(failure), (
            f"record {record.name}: not a property's failure naming the model: {type(failure).__name__}: {failure}"
        )
    if record.stage is not None:
        stage = kept.get("first_divergent_stage") or "-"
        assert stage == record.stage, f"record {record.name}: first divergent stage {stage}, recorded {record.stage}"
    if record.behaves_like is not None:
        like = kept.get("behaves_like") or "-"
        assert like == record.behaves_like, f"record {record.name}: behaves like {like}, recorded {record.behaves_like}"
    for phrase in record.says:
        assert phrase in str(failure), f"record {record.name}: the failure no longer says {phrase!r}:\n{failure}"
    if record.base is not None:  # the example shows the mutant's bug, not a flaw of the property or the case
        base = records.replay(record.property, load_spec(record.base), record.example)
        assert base.failure is None, f"record {record.name}: the correct base fails its example too: {base.failure}"
        assert base.skipped is None, f"record {record.name}: the base skips its example: {base.skipped}"


def test_every_search_has_a_record_and_every_record_a_search() -> None:
    """A catalog entry, a stage, a catch... without a record is a guarantee no CI run checks."""
    names = {s.name for s in SEARCHES if s.kind != "conforms"}
    recorded = {r.name for r in RECORDS}
    missing, extra = sorted(names - recorded), sorted(recorded - names)
    assert not missing, (
        f"{len(missing)} searches without a record (`python -m tests.meta.search --changed --write` finds them): "
        + ", ".join(missing[:10])
    )
    assert not extra, f"{len(extra)} records of no search (remove them): {', '.join(extra[:10])}"


def test_every_mutant_is_searched_at_every_class_unless_the_class_cannot_resolve_it() -> None:
    kills = {(s.mutant, s.name.split("/")[1]) for s in SEARCHES if s.kind == "kill"}
    for name in search.NAMES:
        for precision in search.CLASSES:
            invisible = precision == "float32" and name in FLOAT32_INVISIBLE
            declared = (name, precision) in search.UNDETECTABLE or invisible
            assert ((name, precision) in kills) != declared, (name, precision)
    assert all(effect < 1 for effect in search.UNDETECTABLE.values())


def test_the_shares_split_the_searches_each_into_exactly_one() -> None:
    for count in (1, 4, 8):
        for s in SEARCHES:
            assert sum(search.in_share(s, (i, count)) for i in range(1, count + 1)) == 1, s.name
    eighth = [s for s in SEARCHES if search.in_share(s, (1, 8))]
    assert len(SEARCHES) / 16 < len(eighth) < len(SEARCHES) / 4  # a share is about its part, not everything


CONFIG = ModelConfig(
    "llama", vocab_size=61, n_ctx=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=40, norm_eps=1e-5,
    tie_embeddings=False, rope_scaling=RopeScaling("linear", 2.0),
)  # fmt: skip


def test_an_example_is_stored_by_its_types_and_read_back_equal() -> None:
    example = {"chunked": Chunked(Case(CONFIG, 3, 0.3, (1, 2, 3, 4)), (1, 3))}
    record = records.Record("kill/float32/X", "X", "test_kv_cache.py::t", "m:f", example, "m:g", says=("a",))
    line = record.to_json()
    assert '"n_kv_heads":2' in line and "rope_theta" not in line  # fields at their defaults are left out
    assert records.Record.from_json(line) == record


def test_a_record_of_an_unknown_type_is_refused_not_imported() -> None:
    line = '{"name":"n","mutant":"X","property":"p","model":"m","example":{"case":{"type":"os.system"}}}'
    with pytest.raises(records.RecordError, match=r"unknown type 'os\.system'"):
        records.Record.from_json(line)


def test_a_replayed_example_that_holds_is_no_failure_and_one_that_breaks_is() -> None:
    case = Case(CONFIG.replace(rope_scaling=None), 1, 0.3, (5, 9, 33, 2, 7))
    prop = "test_agreement.py::test_logits_agree_with_the_oracle"
    held = records.replay(prop, load_spec("tests.meta.mutants.catalog:correct"), {"case": case})
    assert held.failure is None and held.skipped is None and held.recorded["examples"] == 1
    broke = records.replay(prop, load_spec("tests.meta.mutants.catalog:mutants.ScaleByDHead"), {"case": case})
    assert isinstance(broke.failure, checks.PropertyFailure)
    assert broke.recorded["first_divergent_stage"] == "layers.0.scores"
    declined = records.replay(prop, load_spec("tests.meta.mutants.constrained:correct"), {"case": case})
    assert declined.failure is None and declined.skipped  # published shapes only: not this case


def test_a_search_without_a_record_or_whose_code_changed_is_searched_again() -> None:
    kill = next(s for s in SEARCHES if s.name == "kill/float32/ScaleByDHead")
    prop = "test_agreement.py::test_logits_agree_with_the_oracle"
    current = records.Record(kill.name, kill.mutant, prop, kill.model, {}, digest=records.digest(prop, kill.mutant))
    assert kill.name not in search.stale([kill], [current])
    assert search.stale([kill], [dataclasses.replace(current, digest="0" * 16)]) == [kill.name]
    assert search.stale([kill], []) == [kill.name]


def test_a_conforms_search_is_a_hole_where_the_correct_base_fails_or_skips_other_than_declared() -> None:
    """The searches that keep no record: the correct base must fail nothing and skip only what it says."""
    (constrained,) = [s for s in SEARCHES if s.name == "conforms/constrained"]

    def report(*outcomes: tuple[str, str]) -> Any:
        results = [SimpleNamespace(model=constrained.model, property=f"m.py::{p}", outcome=o, detail="d")
                   for p, o in outcomes]  # fmt: skip
        return SimpleNamespace(results=results)

    skips = [(p, "skip") for p in search.CONSTRAINED_SKIPS]
    assert not search._conforms(constrained, report(("test_a", "pass"), *skips)).hole
    assert "test_a: d" in search._conforms(constrained, report(("test_a", "fail"), *skips)).hole
    assert "skipped" in search._conforms(constrained, report(("test_a", "skip"), *skips)).hole
    assert "nothing ran" in search._conforms(constrained, report()).hole


@pytest.mark.parametrize(
    ("args", "expected"),
    [(["--changed"], {"stale"}), (["--share", "1/1", "--changed"], "all"), (["--only", "ScaleByDHead"], "mutant")],
)
def test_changed_alone_searches_only_the_stale_and_with_a_share_adds_them(
    monkeypatch: pytest.MonkeyPatch, args: list[str], expected: Any
) -> None:
    # `--changed` alone ran all 634 searches (45 minutes), though test_records' own message recommends it
    # for the few a change leaves without a current record.
    stale_name = next(s.name for s in SEARCHES if s.mutant == "RopeTheta1000")
    chosen: list[str] = []
    monkeypatch.setattr(search, "stale", lambda everything, stored: [stale_name])
    monkeypatch.setattr(search, "search_all", lambda searches, workers: chosen.extend(s.name for s in searches) or [])
    assert search.main(args) == 0
    if expected == "all":
        assert len(chosen) == len(SEARCHES)
    elif expected == "mutant":
        assert chosen and all(n.endswith("/ScaleByDHead") or "/ScaleByDHead/" in n for n in chosen), chosen
    else:
        assert chosen == [stale_name]


def test_a_replay_leaves_the_precision_it_judged_at_behind_it() -> None:
    # A q8_0 record's replay left q8_0 as the class every later oracle in the process was judged at: a test
    # run after it in the same xdist worker compared a float64 oracle on dequantized weights (CI on 609e169).
    from verifier.properties import oracle

    record = next(r for r in RECORDS if r.name.startswith("kill/q8_0/"))
    before = oracle.precision()
    assert records.replay(record.property, load_spec(record.model), record.example).failure is not None
    assert oracle.precision() == before
