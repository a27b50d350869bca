"""The test-time benchmark sums pytest's durations per file and per property from pytest's own output."""

from __future__ import annotations

from benchmarks.test_times import junit_times, where_time_goes

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
