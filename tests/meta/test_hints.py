"""A precision hint never names a class for a bug: no failure of a catalog mutant declaring no
precision says it behaves like tf32, float16 or bfloat16 (`verifier.analysis.precision.rounding_fit`:
a bug's error starts at one stage and does not spread over positions as rounding does), while a
model computing in a class and declaring none is told its class (`tests/precision/test_declared_class.py`).

The old hint named the finest class whose bound held the error, and on these cases named one for
26 of the catalog's mutants: the RoPE bugs on the llama case at 2.2e4 to 2.9e4 times the float32
bound as "behaves like bfloat16", the attention-scaling, mask, norm and MLP bugs as tf32 or
bfloat16. Each check here goes through the suite's own `checks.agree`, as the agreement property
calls it. That no failure of a mutant in a suite run carries a hint, and that a suite run names the class
of a model computing in one and declaring none, is searched by the search tier and replayed from its
records (`tests/meta/search.py`: the `hint` and `hinted` searches; `tests/meta/test_records.py`).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.meta import undeclared
from tests.meta.mutants.catalog import MUTANTS
from tests.meta.search import LOCALIZING
from verifier.model.config import ModelConfig
from verifier.model.weights import init_weights
from verifier.plugin.contract import ContractViolation, build_checked
from verifier.plugin.interface import Unsupported, detected_capabilities
from verifier.plugin.probes import PROBE_CONFIGS
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks
from verifier.properties.cases import Case
from verifier.properties.oracle import oracle

LLAMA = ModelConfig(
    "llama", vocab_size=61, n_ctx=48, d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=40, norm_eps=1e-5,
    tie_embeddings=False,
)  # fmt: skip
GPT2 = LLAMA.replace(family="gpt2", tie_embeddings=True)


def _case(config: ModelConfig, seed: int, scale: float, T: int) -> Case:
    return Case(
        config, seed, scale, tuple(int(t) for t in np.random.default_rng(seed).integers(0, config.vocab_size, T))
    )


# Where the old hint named a class for the most mutants (20, 14 and 10 of them).
ROPE_CASE = _case(LLAMA, 3, 3.0, 24)
CASES = {"llama-3.0": ROPE_CASE, "gpt2-3.0": _case(GPT2, 3, 3.0, 24), "llama-0.02": _case(LLAMA, 5, 0.02, 40)}
# Without its trace, the logits of matrix products computed from float16 inputs are those of a
# model rounding like tf32 (measured: cosine 0.46 to 0.99 with tf32's emulation): a hint there says
# what the logits show. Its trace shows its embeddings exact, which no model computing in a class is.
ROUNDS_LIKE_A_CLASS = {"Float16Accumulation"}


def hint(name: str, case: Case, *, trace: bool = True, localize: bool = True) -> tuple[str | None, str, float] | None:
    """The class recorded for the failure of mutant `name`'s logits (declaring no precision) on
    `case` (checked as the agreement property does, or, without `localize`, as a property that
    does not localize), the failure's message and its error / float32 bound; None where the logits
    agree or the mutant cannot run the case."""
    factory = getattr(undeclared.mutants if trace else undeclared.logits_only, name)
    try:
        model = build_checked(ModelSpec(name, factory, "test"), case.config, case.weights())
    except Unsupported:
        return None
    tokens = case.token_array()
    with checks.recording("p") as record:
        checks.judge_at(model, case)
        o = oracle(case)
        try:
            found = model.logits(tokens)
            where = checks.localizer(model, o, tokens) if localize else None
            checks.agree(found, o.logits(tokens), what="logits", model=model, localize=where)
        except ContractViolation:  # non-finite logits (a softmax that overflows): not a numeric failure
            return None
        except checks.PropertyFailure as failure:
            checks.record_failure(record, failure)
            ratio = re.search(r"\(([0-9.e+]+)x the bound\)", str(failure))
            return record.behaves_like, str(failure), float(ratio.group(1)) if ratio else float("nan")
    return None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflows of mutants and of float16's emulation
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_no_mutant_s_failure_carries_a_precision_hint(case: Case) -> None:
    hinted, failed = [], 0
    for cls in MUTANTS:
        for trace in (True, False):
            found = hint(cls.__name__, case, trace=trace)
            if found is None or (not trace and cls.__name__ in ROUNDS_LIKE_A_CLASS):
                continue
            failed += 1
            like, message, _ = found
            if like is not None or "behaves like" in message:
                hinted.append(f"{cls.__name__}{'' if trace else ' (logits only)'}: {like}")
    assert failed >= 30, f"only {failed} mutants failed on this case: it tests little"
    assert not hinted, "precision hints for bugs: " + "; ".join(hinted)


def test_a_model_that_traces_gets_no_hint_from_a_check_that_did_not_localize() -> None:
    """Float16 accumulation's logits alone look like tf32's rounding (the whole suite on it once said
    so, from the batch-decoding property, which does not localize); a model that traces is hinted
    only where its stages were seen."""
    for case in CASES.values():
        traced = hint("Float16Accumulation", case, localize=False)
        assert traced is not None and traced[0] is None and "behaves like" not in traced[1]
    alone = [hint("Float16Accumulation", case, trace=False) for case in CASES.values()]
    assert [found[0] for found in alone if found is not None] == ["tf32"] * len(CASES)


ROPE_BUGS = [
    "RopeInterleavedOnRotateHalf",
    "RopeTheta1000",
    "RopeFrequenciesOverDModel",
    "RopeOnValues",
    "RopeMissingOnK",
]


@pytest.mark.parametrize("trace", [True, False], ids=["traced", "logits-only"])
@pytest.mark.parametrize("name", ROPE_BUGS)
def test_a_rope_bug_far_beyond_float32_gets_no_precision_hint(name: str, trace: bool) -> None:
    """The issue's case: a RoPE bug 30,000 times the float32 bound, within bfloat16's bound (whose
    conditioning term is wide on this case), was said to behave like bfloat16. Its error is 0 at
    position 0 (RoPE is the identity there) and starts at q_rope and k_rope."""
    found = hint(name, ROPE_CASE, trace=trace)
    assert found is not None
    like, message, ratio = found
    assert ratio > 1e4  # the size the issue reports
    assert like is None and "behaves like" not in message and "precision =" not in message, message


def test_every_mutant_traces_so_only_the_localizing_properties_can_hint() -> None:
    """The premise of the suite runs' selection: a mutant without a trace could be hinted anywhere."""
    config = PROBE_CONFIGS["llama"]
    weights = init_weights(config)
    for cls in MUTANTS:
        model = getattr(undeclared.mutants, cls.__name__)(config, weights)
        assert "trace" in detected_capabilities(model), cls.__name__
    assert {"test_agreement.py", "test_kv_cache.py", "test_rope.py"} <= set(LOCALIZING), LOCALIZING
