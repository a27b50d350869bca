"""What `verifier check` prints: a failure's message without Hypothesis's internals and with its case apart,
one paragraph per failure, then the table without the rows that passed everywhere, the verdict last; and
the progress line the collector writes while pytest runs."""

from __future__ import annotations

import io

from verifier.report import render
from verifier.report.collect import Progress, split_message
from verifier.report.results import Header, ModelCard, Report, Result

# A PropertyFailure as pytest reports it (its crash line and every note Hypothesis and the suite added).
MESSAGE = """verifier.properties.checks.PropertyFailure: test_logits_agree_with_the_oracle: model 'm' (float32), \
logits of 12 tokens against the float64 oracle: max |diff| 3.28 at [10, 18] (found -0.025, the oracle -3.3) \
exceeds the float32 tolerance 0.000126 (2.6e+04x the bound)
first divergent stage: layer 0 scores: max |diff| 1.96e+00 at [0, 3, 3] (float32 tolerance 6.72e-05, 2.9e+04x)
(note: 9 other explicit examples also failed with this error; use Verbosity.verbose to view)
Failing explicit example: test_logits_agree_with_the_oracle(
    model_spec=ModelSpec(name='m',
     factory=build,
     unavailable=''),
    case=Case(config=ModelConfig(family='llama'), seed=1, scale=0.3, tokens=(28, 31), checkpoint=None),
)
model 'm'; case:
config = ModelConfig(family='llama', vocab_size=61)
weights = init_weights(config, seed=1, scale=0.3)
tokens = np.array([28, 31])
model 'm'; case:
config = ModelConfig(family='llama', vocab_size=61)
weights = init_weights(config, seed=1, scale=0.3)
tokens = np.array([28, 31])
the model refused this prompt: too long
You can reproduce this example by temporarily adding @reproduce_failure('6.170.15', b'AXicY2BgAAAABAAB') as a \
decorator on your test case"""
CASE = "config = ModelConfig(family='llama', vocab_size=61)\nweights = init_weights(config, seed=1, scale=0.3)\n"


def test_a_failure_keeps_what_the_suite_said_and_its_case_apart_from_hypothesis_s_internals() -> None:
    detail, case = split_message(MESSAGE)
    assert detail.splitlines() == [
        MESSAGE.splitlines()[0].removeprefix("verifier.properties.checks.PropertyFailure: "),
        MESSAGE.splitlines()[1],
        "the model refused this prompt: too long",
    ]
    assert case == CASE + "tokens = np.array([28, 31])"  # said once, though two models were built for it


# A generated example's failure as Hypothesis 6.170 reports it: "Failing test case:" and st.data()'s draws.
GENERATED = """verifier.properties.checks.PropertyFailure: test_decoding_past_the_window: model 'm' (float32), \
logits decoded in chunks [1 x 3] past sliding window 2: max |diff| 2.47e-06 exceeds the float32 tolerance
Failing test case: test_decoding_past_the_window(
    model_spec=ModelSpec(name='m',
     factory=build,
     unavailable=''),
    case=Case(config=ModelConfig(family='qwen2'), seed=1, scale=0.3, tokens=(1, 0, 1), checkpoint=None),
    data=data(...),
)
Draw 1 (prefill length (<= W)): 1
model 'm'; case:
config = ModelConfig(family='qwen2', vocab_size=2)
weights = init_weights(config, seed=1, scale=0.3)
tokens = np.array([1, 0, 1])"""


def test_a_generated_example_s_heading_and_draws_are_hypothesis_s_too() -> None:
    detail, case = split_message(GENERATED)
    assert detail == GENERATED.splitlines()[0].removeprefix("verifier.properties.checks.PropertyFailure: ")
    assert case.startswith("config = ModelConfig(family='qwen2'")


# Hypothesis 6.170's explain phase and its reproduce line, after the case (a ci-profile run printed both).
EXPLAINED = (
    GENERATED
    + """
Explanation:
    These lines were always and only run by failing test cases:
        /work/main/properties/checks.py:158
        (and 47 more with settings.verbosity >= verbose)

You can reproduce this test case by temporarily adding @reproduce_failure('6.170.15', b'AXic') as a decorator"""
)


def test_hypothesis_s_explanation_and_reproduce_line_are_hypothesis_s_too() -> None:
    assert split_message(EXPLAINED) == split_message(GENERATED)


def _report(*results: Result) -> Report:
    header = Header([ModelCard("m", "--model", {"gpt2": "logits"})], {}, "dev", {}, "suite", "now")
    return Report(header, list(results), 1)


def test_each_failure_is_one_paragraph_and_the_table_and_the_verdict_come_last() -> None:
    detail, case = split_message(MESSAGE)
    failed = Result("test_agreement.py::test_logits_agree_with_the_oracle", "m", "fail", detail, 2.9e4,
                    "layers.0.scores", case=case, precision="float32", examples=4)  # fmt: skip
    passed = Result("test_shapes.py::test_shapes", "m", "pass", worst_error_ratio=0.0, examples=3)
    skipped = Result("test_rope.py::test_rope", "m", "skip", "model 'm' runs no llama config")
    lines = render.text(_report(failed, passed, skipped)).splitlines()
    assert lines[:3] == [
        "[1] FAIL test_agreement.py::test_logits_agree_with_the_oracle / m: worst error 2.9e+04x the float32 "
        "bound; first divergent stage layers.0.scores",
        "    logits of 12 tokens against the float64 oracle: max |diff| 3.28 at [10, 18] (found -0.025, the oracle "
        "-3.3) exceeds the float32 tolerance 0.000126 (2.6e+04x the bound)",
        "    the model refused this prompt: too long",  # the stage line is in the report files; the heading names it
    ]
    assert lines[3] == "    case: " + "; ".join([*CASE.splitlines(), "tokens = np.array([28, 31])"])
    table = lines.index(next(line for line in lines if line.startswith("property")))
    assert lines[table + 2].startswith("test_agreement.py::test_logits_agree_with_the_oracle  FAIL 2.9e+04 from "
                                       "layers.0.scores [1]")  # fmt: skip
    assert lines[table + 3].startswith("test_rope.py::test_rope") and "skip [2]" in lines[table + 3]
    assert lines[table + 4] == "(and 1 property that passed on every model: the whole table is in the report files)"
    assert lines[-4:] == [
        "[2] test_rope.py::test_rope / m: model 'm' runs no llama config",
        "",
        "m: FAILS (2 properties run: 1 pass, 1 fail; 1 skip; 7 examples)",
        "1 fail, 1 pass, 1 skip: does not conform",
    ]
    assert "suite" not in [line.split()[0] for line in lines if line]  # the suite and versions: in the files


def test_a_run_without_failures_shows_the_whole_table() -> None:
    text = render.text(_report(Result("p", "m", "pass", worst_error_ratio=0.5, examples=2)))
    assert ["p", "pass", "0.5"] in [line.split() for line in text.splitlines()], text
    assert "passed on every model" not in text and text.startswith("hypothesis profile dev")


def test_the_progress_line_is_a_character_a_test_and_a_count() -> None:
    stream = io.StringIO()
    stream.close = lambda: None  # type: ignore[method-assign]  # read it after finish()
    progress = Progress(stream)
    progress.total = Progress.WIDTH + 2
    for outcome in ["pass", "fail", "skip", "error"] + ["pass"] * (Progress.WIDTH - 4) + ["xfail", "xpass"]:
        progress.test_done(outcome)
    progress.finish()
    first, second = stream.getvalue().splitlines()
    assert first == ".Fs" + "E" + "." * (Progress.WIDTH - 4) + f" {Progress.WIDTH}/{Progress.WIDTH + 2}"
    assert second == f"xX {Progress.WIDTH + 2}/{Progress.WIDTH + 2}"


TIES = (
    "2 router near-ties met; either choice accepted, the other one taken in 1 comparison\n"
    "met at layer 0, position 3: experts 1 and 2 0.0001 apart in probability (bound 0.06); met at layer 0, "
    "position 5: experts 1 and 2 0.0002 apart in probability (bound 0.06); accepted with the other choice at ..."
)


def test_a_property_that_met_router_near_ties_says_how_many_and_how_they_were_judged() -> None:
    met = Result("test_moe.py::test_routing", "m", "pass", worst_error_ratio=0.5, examples=2, near_ties=TIES)
    lines = render.text(_report(met, Result("p", "m", "pass", worst_error_ratio=0.1))).splitlines()
    line = "test_moe.py::test_routing / m: 2 router near-ties met; either choice accepted, the other one taken in 1 " \
           "comparison"  # fmt: skip
    assert lines.count(line) == 1 and lines[lines.index(line) + 1] == "", lines
    assert "met at layer 0" not in "\n".join(lines)  # which ones: in the report files


def test_a_failing_run_keeps_its_paragraphs_and_folds_the_passing_properties_near_ties_in_one_line() -> None:
    detail, case = split_message(MESSAGE)
    failed = Result("test_agreement.py::test_logits_agree_with_the_oracle", "m", "fail", detail, 2.9e4,
                    "layers.0.experts", case=case, near_ties=TIES)  # fmt: skip
    passed = [Result(f"test_moe.py::test_{n}", "m", "pass", worst_error_ratio=0.1, near_ties=TIES) for n in "ab"]
    lines = render.text(_report(failed, *passed)).splitlines()
    assert lines[0].endswith(
        "first divergent stage layers.0.experts; 2 router near-ties met; either choice accepted, the other one "
        "taken in 1 comparison"
    )
    assert lines[4] == "", lines  # heading, message (two lines), case: the paragraph is no longer
    assert "router near-ties met by 2 more properties, either choice accepted: each is in the report files" in lines
    assert not [line for line in lines if line.startswith("test_moe.py::test_a / m:")]
    markdown = render.markdown(_report(failed, *passed))
    assert "## Router near-ties" in markdown and "- test_moe.py::test_b / m: 2 router near-ties met" in markdown
