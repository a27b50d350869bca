"""Every law reaches every family it holds for (issue 47): a property restricted to some families by
name (`requires(family=...)`, not a law about a switch, whose configs it draws itself from the families
that have the switch) must not leave out a family whose case the law holds on. For each such property
and each family it leaves out, the property runs on that family's pinned case (`RICH_FAMILIES`,
`RICH_GPT2`: every switch the family allows on) with the reference: a law that holds there and compared
something is a law skipping a family it holds for. And the RoPE laws, now on every
rotary family, catch the bugs of the families they used to skip: whole-head RoPE on Phi-3's partial
rotary, GLM's interleaved pairs read as rotate-half, Qwen3's q/k norm after RoPE."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from tests.meta import records
from verifier.plugin.registry import load_spec
from verifier.properties.pinned_cases import RICH_FAMILIES, RICH_GPT2

CASES = {case.config.family: case for case in (RICH_GPT2, *RICH_FAMILIES)}
SUITE = Path(__file__).resolve().parents[2] / "properties"


def _restricted() -> list[tuple[str, tuple[str, ...]]]:
    """(property `module.py::test_name`, the families its `requires` names) of each property restricted
    to some families that takes a drawn `case`."""
    found = []
    for path in sorted(SUITE.glob("test_*.py")):
        module = importlib.import_module(f"verifier.properties.{path.stem}")
        for name, function in vars(module).items():
            drawn = getattr(getattr(function, "hypothesis", None), "inner_test", function)  # what @given draws
            if not name.startswith("test_") or "case" not in inspect.signature(drawn).parameters:
                continue
            for mark in getattr(function, "pytestmark", []):
                if mark.name != "requires" or mark.kwargs.get("drawn") or mark.kwargs.get("switch"):
                    continue  # a law about a switch, on configs it draws itself: its families are the switch's
                family = mark.kwargs.get("family")
                if family is not None:
                    found.append((f"{path.name}::{name}", (family,) if isinstance(family, str) else tuple(family)))
    return found


RESTRICTED = _restricted()


def test_the_table_has_the_rope_laws_and_each_leaves_out_gpt2_alone() -> None:
    rope = {prop: families for prop, families in RESTRICTED if prop.startswith("test_rope.py::")}
    assert len(rope) == 6, RESTRICTED
    assert all(set(CASES) - set(families) == {"gpt2"} for families in rope.values()), rope


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    ("prop", "family"),
    [(prop, family) for prop, families in RESTRICTED for family in CASES if family not in families],
)
def test_no_law_skips_a_family_it_holds_for(prop: str, family: str) -> None:
    replayed = records.replay(prop, load_spec("numpy"), {"case": CASES[family]})
    holds = replayed.failure is None and replayed.skipped is None
    assert not holds, f"{prop} holds on the {family} case, but its requires(family=...) leaves {family} out"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    ("prop", "mutant", "family"),
    [
        ("test_rope_turns_pair_i_at_position_p_by_p_times_theta_to_the_minus_2i_over_d_head", "PartialRotaryWholeHead",
         "phi3"),
        ("test_rope_preserves_the_norm_of_every_pair_and_head_vector", "InterleavedPairsAsRotateHalf", "glm"),
        ("test_rope_interleaved_and_rotate_half_pairings_give_the_same_scores", "InterleavedPairsAsRotateHalf", "glm"),
        ("test_rope_turns_pair_i_at_position_p_by_p_times_theta_to_the_minus_2i_over_d_head", "QKNormAfterRope",
         "qwen3"),
        ("test_rope_layer_0_scores_depend_only_on_the_distance_m_minus_n", "QKNormAfterRope", "qwen3"),
    ],
)  # fmt: skip
def test_the_rope_laws_catch_the_bugs_of_the_families_they_used_to_skip(prop: str, mutant: str, family: str) -> None:
    prop = f"test_rope.py::{prop}"
    example = {"case": CASES[family]}
    assert records.replay(prop, load_spec("tests.meta.mutants.catalog:correct"), example).failure is None
    broken = records.replay(prop, load_spec(f"tests.meta.mutants.catalog:mutants.{mutant}"), example)
    assert broken.failure is not None, f"{prop} passes {mutant} on the {family} case"
