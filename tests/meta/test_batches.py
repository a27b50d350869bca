"""The mutant catalog's batches (`tests.meta.suite_runs.Batch`): each chunk of models runs once for all
pytest-xdist workers, and a worker that finds its chunk running runs another one instead of waiting.
Two threads stand in for two workers (a file lock held by one thread excludes the other's)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.meta import suite_runs
from tests.meta.suite_runs import Batch
from verifier.report.results import Header, Report, Result

SPECS = [f"m{i}" for i in range(6)]  # three chunks of two


class FakeSuite:
    """`run_suite` without the suite: a passing result per model, each run recorded. Chunk 0 waits
    until chunk 1 has started, so the other worker must have run chunk 1 while chunk 0 was running."""

    def __init__(self, failing: str = "") -> None:
        self.runs: list[tuple[str, list[str]]] = []
        self.chunk_1_started = threading.Event()
        self.failing = failing

    def __call__(self, specs: list[str], reports: Path, *args: str, profile: str, timeout: float) -> Report:
        self.runs.append((threading.current_thread().name, specs))
        if specs == SPECS[2:4]:
            self.chunk_1_started.set()
        if specs == SPECS[:2] and not self.chunk_1_started.wait(timeout=10):
            raise RuntimeError("chunk 1 did not start while chunk 0 ran: the other worker waited instead")
        if self.failing in specs:
            raise AssertionError(f"`verifier check` wrote no report for {self.failing}")
        header = Header([], {}, hypothesis_profile=profile, hypothesis_settings={}, suite="", created="")
        report = Report(header, [Result("test_x", spec, "pass") for spec in specs])
        (reports / "conformance.json").write_text(report.to_json())
        return report


def _two_workers(root: Path, wanted: list[str]) -> dict[str, Report | BaseException]:
    """Each thread asks its own `Batch` on `root` for the report of one spec of `wanted`."""
    found: dict[str, Report | BaseException] = {}

    def worker(spec: str) -> None:
        try:
            found[spec] = Batch(root, SPECS, size=2).report(spec)
        except BaseException as e:  # the test reads it
            found[spec] = e

    threads = [threading.Thread(target=worker, args=(spec,), name=f"gw{i}") for i, spec in enumerate(wanted)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return found


def test_a_chunk_runs_once_and_a_worker_finding_it_running_runs_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = FakeSuite()
    monkeypatch.setattr(suite_runs, "run_suite", suite)
    found = _two_workers(tmp_path, ["m0", "m1"])  # both want chunk 0
    for spec in ("m0", "m1"):
        report = found[spec]
        assert isinstance(report, Report), report
        assert [r.model for r in report.results] == ["m0", "m1"]
    chunks = [specs for _, specs in suite.runs]
    assert chunks.count(SPECS[:2]) == 1 and chunks.count(SPECS[2:4]) == 1, suite.runs
    assert len({thread for thread, _ in suite.runs}) == 2, suite.runs  # the two workers shared the work
    # A later test of chunk 1 or 2 runs nothing more than it needs: chunk 1 is there, chunk 2 runs once.
    assert Batch(tmp_path, SPECS, size=2).report("m3").results[1].model == "m3"
    assert Batch(tmp_path, SPECS, size=2).report("m5").results[1].model == "m5"
    assert [specs for _, specs in suite.runs].count(SPECS[4:]) == 1, suite.runs


def test_a_chunk_that_wrote_no_report_fails_each_of_its_tests_without_running_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = FakeSuite(failing="m0")
    monkeypatch.setattr(suite_runs, "run_suite", suite)
    found = _two_workers(tmp_path, ["m0", "m1"])
    for spec in ("m0", "m1"):
        assert isinstance(found[spec], AssertionError) and "wrote no report for m0" in str(found[spec]), found
    with pytest.raises(AssertionError, match="wrote no report for m0"):
        Batch(tmp_path, SPECS, size=2).report("m1")
    assert [specs for _, specs in suite.runs].count(SPECS[:2]) == 1, suite.runs
