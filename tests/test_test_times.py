"""The test-time benchmark sums pytest's durations per file and per property from pytest's own output,
and a run's CPU time per process it started; the speed benchmark keeps each prefill's fastest round."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.speed import _fastest
from benchmarks.test_times import ProcessSampler, junit_times, process_kind, where_time_goes

DURATIONS = """\
============================= slowest durations ==============================
12.50s call     properties/test_kv_cache.py::test_decode_matches_prefill[numpy@llama]
3.00s setup    properties/test_kv_cache.py::test_decode_matches_prefill[transformers@gpt2]
2.00s call     properties/test_shapes.py::test_logits_shape[numpy@gpt2]
1.25s call     tests/test_audit.py::test_render
0.00s teardown tests/test_audit.py::test_render
=========== 2 passed in 18.75s ===========
"""


def test_durations_are_summed_per_file_and_per_property_over_its_parameters() -> None:
    files, properties = where_time_goes(DURATIONS)
    assert files == {"properties/test_kv_cache.py": 15.5, "properties/test_shapes.py": 2.0, "tests/test_audit.py": 1.25}
    assert properties == {"test_decode_matches_prefill": 15.5, "test_logits_shape": 2.0}


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
