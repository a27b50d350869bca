"""The test-time benchmark sums pytest's durations per file and per property from pytest's own output."""

from __future__ import annotations

from benchmarks.test_times import where_time_goes

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
