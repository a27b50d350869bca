"""The test-time benchmark sums a run's JUnit XML per tier, file, property, and family, engine and
precision class its test ids name, and a run's CPU time per process it started; the speed benchmark
keeps each prefill's fastest round."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import test_times
from benchmarks.speed import _fastest
from benchmarks.test_times import (
    ENGINES,
    OTHER,
    ProcessSampler,
    breakdown,
    junit_tier,
    junit_times,
    names,
    process_kind,
    read_junit,
    timed_run,
    totals,
)

JUNIT = """\
<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="0"
failures="0" skipped="1" tests="4" time="30.1"><testcase classname="tests.meta.test_mutants"
name="test_mutant_fails_a_property[NoScale]" time="12.500" /><testcase classname="tests.meta.test_mutants"
name="test_mutant_fails_a_property[ScaleByDHead]" time="7.500" /><testcase classname="properties.test_rope"
name="test_rope_is_the_identity_at_position_0[numpy]" time="2.25"><skipped message="no rope" /></testcase>
<testcase classname="tests.test_audit" name="test_render" time="0.75" /></testsuite></testsuites>
"""


def test_a_finished_run_s_junit_xml_is_summed_per_file_and_per_property() -> None:
    # .ci/run prints this breakdown of its slow tier from the XML pytest writes.
    files, properties = junit_times(JUNIT)
    assert files == {"tests/meta/test_mutants.py": 20.0, "properties/test_rope.py": 2.25, "tests/test_audit.py": 0.75}
    assert properties == {"test_rope_is_the_identity_at_position_0": 2.25}


def _xml(wall: float, *cases: tuple[str, str, float]) -> str:
    """pytest's JUnit XML of one session taking `wall` seconds: (classname, name, seconds) a case."""
    body = "".join(f'<testcase classname="{c}" name="{n}" time="{t}" />' for c, n, t in cases)
    return f'<testsuites><testsuite name="pytest" tests="{len(cases)}" time="{wall}">{body}</testsuite></testsuites>'


# Two tiers as CI runs them: the default run's property draws and a family's test, the slow tier's
# engines on families and classes, and tests whose ids name nothing.
DEFAULT = _xml(
    10.0,
    ("properties.test_agreement", "test_logits_agree_with_the_oracle[numpy]", 6.0),
    ("tests.test_reference_families", "test_x[gemma2]", 3.0),
    ("tests.test_audit", "test_render", 1.0),
)
SLOW = _xml(
    30.0,
    ("tests.precision.test_builtins", "test_each_built_in_conforms[llamacpp-q4_k_m@llama]", 40.0),
    ("tests.plugin.test_hf_transformers", "test_every_family_runs[build_bfloat16-llama-gqa]", 8.0),
    ("tests.llamacpp.test_moe_families", "test_y[qwen2_moe-mixtral]", 10.0),
    ("tests.meta.test_mutants", "test_mutant_fails_a_property[Float16Accumulation]", 2.0),
)


def test_each_tier_sums_its_tests_seconds_and_keeps_its_wall_time() -> None:
    default, slow = read_junit(DEFAULT, "default"), read_junit(SLOW, "slow")
    assert (default.seconds, default.wall, len(default.cases)) == (10.0, 10.0, 3)
    assert (slow.seconds, slow.wall, len(slow.cases)) == (60.0, 30.0, 4)
    assert slow.cases[0] == (
        "tests/precision/test_builtins.py::test_each_built_in_conforms[llamacpp-q4_k_m@llama]",
        40.0,
    )
    lines = breakdown("CI", [default, slow])
    assert "| default | 3 | 10.0 | 0.2 min | 1.00 |" in lines, lines
    assert "| slow | 4 | 60.0 | 0.5 min | 2.00 |" in lines, lines
    assert "| all | 7 | 70.0 | 0.7 min | 1.75 |" in lines, lines


@pytest.mark.parametrize(
    ("node", "family", "engine", "precision"),
    [
        # an engine on a family at a class, from the parameters
        (
            "tests/precision/test_builtins.py::test_each_built_in_conforms[llamacpp-q4_k_m@llama]",
            ["llama"],
            ["llamacpp"],
            ["q4_k_m"],
        ),
        # the engine from the file's name, a probe kind's family, a class inside a factory's name
        (
            "tests/plugin/test_hf_transformers.py::test_every_family_runs[build_bfloat16-llama-gqa]",
            ["llama"],
            ["transformers"],
            ["bfloat16"],
        ),
        # the engine from the folder; the longest family first (not qwen2); two families
        ("tests/llamacpp/test_moe_families.py::test_y[qwen2_moe-mixtral]", ["qwen2_moe", "mixtral"], ["llamacpp"], []),
        # a GGUF type in capitals; a preset's family; the q8_0 class by another name
        ("tests/formats/test_gguf.py::test_x[Q8_0]", [], [], ["q8_0"]),
        ("tests/llama2c/test_adapter.py::test_x[llama2c-stories15M]", ["llama"], ["llama2c"], []),
        ("properties/test_agreement.py::test_x[ctranslate2-int8]", [], ["ctranslate2"], ["q8_0"]),
        # none: a CamelCase mutant, the test's own name (prose), a model with no class in its name
        ("tests/meta/test_mutants.py::test_mutant_fails_a_property[Float16Accumulation]", [], [], []),
        ("tests/formats/test_gguf_families.py::test_mixtral_is_llama_with_experts_stacked", [], [], []),
        ("properties/test_agreement.py::test_logits_agree_with_the_oracle[numpy]", [], ["numpy"], []),
    ],
    # ids that name nothing themselves, so that this file's own time goes to no family or engine
    ids=[
        "parameters",
        "file-and-probe-kind",
        "folder-and-two",
        "capitals",
        "preset",
        "alias",
        "mutant",
        "prose",
        "none",
    ],
)
def test_a_test_id_names_its_families_engines_and_classes(
    node: str, family: list[str], engine: list[str], precision: list[str]
) -> None:
    found = names(node)
    assert found == {"family": tuple(family), "engine": tuple(engine), "class": tuple(precision)}, node


def test_a_test_naming_several_splits_its_seconds_and_one_naming_none_goes_to_other() -> None:
    slow = read_junit(SLOW, "slow")
    families = totals([slow], lambda node: names(node)["family"])
    assert families == {
        "llama": {"slow": 48.0},
        "qwen2_moe": {"slow": 5.0},
        "mixtral": {"slow": 5.0},
        OTHER: {"slow": 2.0},
    }
    assert sum(row["slow"] for row in families.values()) == slow.seconds


def test_a_row_s_wall_seconds_are_its_share_of_each_tier_s_wall_time() -> None:
    # The slow tier ran 60 s of tests in 30 s (two workers): its rows count half their seconds; the
    # default run's, all. gemma2: 3 s of the default run; llama: 48 s of the slow tier, 24 s of wall.
    lines = breakdown("CI", [read_junit(DEFAULT, "default"), read_junit(SLOW, "slow")])
    assert "| llama | 0.0 | 48.0 | 24.0 | 60% |" in lines, lines
    assert "| gemma2 | 3.0 | 0.0 | 3.0 | 8% |" in lines, lines
    assert "| other | 7.0 | 2.0 | 8.0 | 20% |" in lines, lines  # the property's draws and the audit's test
    assert lines.index("| other | 7.0 | 2.0 | 8.0 | 20% |") > lines.index("| gemma2 | 3.0 | 0.0 | 3.0 | 8% |")


def test_junit_files_given_more_than_once_are_the_run_s_tiers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "d.xml").write_text(DEFAULT)
    (tmp_path / "slow.xml").write_text(SLOW)
    test_times.main(["--junit", f"default={tmp_path / 'd.xml'}", "--junit", str(tmp_path / "slow.xml")])
    out = capsys.readouterr().out.splitlines()
    assert "| all | 7 | 70.0 | 0.7 min | 1.75 |" in out, out
    assert "| engine | default s | slow s | wall s | share |" in out, out
    assert "| llamacpp | 0.0 | 50.0 | 25.0 | 62% |" in out, out
    assert "| q4_k_m | 0.0 | 40.0 | 20.0 | 50% |" in out, out
    with pytest.raises(SystemExit):  # two tiers of one label
        test_times.main(["--junit", str(tmp_path / "slow.xml"), "--junit", f"slow={tmp_path / 'd.xml'}"])
    assert "label each tier once" in capsys.readouterr().err


def test_a_junit_file_is_labelled_by_its_tier_or_its_name() -> None:
    assert junit_tier("default=.ci/out/d.xml") == ("default", Path(".ci/out/d.xml"))
    assert junit_tier(".ci/out/slow.xml") == ("slow", Path(".ci/out/slow.xml"))
    assert junit_tier("runs/a=b/slow.xml") == ("slow", Path("runs/a=b/slow.xml"))  # '=' in a folder's name


def test_every_adapter_module_is_an_engine_of_the_breakdown() -> None:
    adapters = Path(test_times.ROOT, "verifier", "plugin", "adapters")
    modules = {p.stem for p in adapters.glob("*.py")} - {"__init__", "built_once"}
    assert set(ENGINES) == modules, f"add each engine's adapter module to ENGINES: {modules ^ set(ENGINES)}"


def test_a_run_at_another_revision_is_given_the_shared_trees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A --before worktree has no ../shared beside it: the run is told where this checkout's trees are,
    # unless the variable is set already.
    monkeypatch.setattr(test_times, "SHARED", {"TEST_TIMES_TREE": tmp_path, "TEST_TIMES_ABSENT": tmp_path / "none"})
    monkeypatch.delenv("TEST_TIMES_TREE", raising=False)
    show = ["-c", "import os; print(os.environ.get('TEST_TIMES_TREE'), os.environ.get('TEST_TIMES_ABSENT'))"]
    assert timed_run(show, tmp_path)[1] == f"{tmp_path} None"
    monkeypatch.setenv("TEST_TIMES_TREE", "mine")
    assert timed_run(show, tmp_path)[1] == "mine None"


def test_each_process_of_a_run_is_named_by_what_it_was() -> None:
    root = 100
    python = "/venv/bin/python3"
    assert process_kind(f"{python} -u -c 'import execnet'", root, root) == "an xdist worker"
    assert process_kind(f"{python} -I -c 'import sys'", 7, root) == "python -c"
    assert process_kind(f"{python} -m verifier check --model numpy", 7, root) == "verifier check"
    assert process_kind("/venv/bin/verifier kl --model numpy", 7, root) == "verifier kl"
    pytest_under_check = f"{python} -m pytest /suite/properties -p verifier.report.collect --model=numpy"
    assert process_kind(pytest_under_check, 7, root) == "pytest under verifier check"
    assert process_kind(f"{python} -X importtime -W error -m pytest properties -k x", 7, root) == "pytest (other)"
    assert process_kind(f"{python} /repo/tests/command/program.py", 7, root) == "program.py"
    assert process_kind("/usr/bin/cc -O3 -o run run.c -lm", 7, root) == "cc"
    assert process_kind("", 7, root) == "(exited before it was read)"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_the_sampler_finds_a_grandchild_and_the_cpu_it_used() -> None:
    # The run (as pytest is) starts a child that starts a grandchild spinning until it has used 0.5 s of
    # CPU: the sampler must find the grandchild through the child and record nearly all of that CPU (at
    # most one interval's less).
    spin = "import time\nwhile time.process_time() < 0.5: pass"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}])"
    run_ = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"
    with subprocess.Popen([sys.executable, "-c", run_]) as run:
        sampler = ProcessSampler(run.pid, interval=0.05)
        run.wait()
    sampler.stop()
    grandchildren = [cpu for parent, _, cpu in sampler.seen.values() if parent in sampler.seen]
    assert len(grandchildren) == 1 and grandchildren[0] >= 0.25, sampler.seen


def test_the_fastest_round_counts_and_a_failed_round_is_reported() -> None:
    rounds = [{"seconds": 2.5}, {"seconds": 2.1}, {"seconds": 2.9}]
    assert _fastest(rounds) == {"seconds": 2.1}
    assert _fastest([*rounds, {"error": "no llama2.c tree"}]) == {"error": "no llama2.c tree"}
