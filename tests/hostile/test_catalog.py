"""Every model of the hostile catalog (tests/hostile/catalog.py) gets its verdict in one `verifier check`,
plugged in as a user plugs a model in, beside the built-in NumPy model, which must still conform: what one
model does to the process cannot make another fail, or itself pass. The run also leaves no process and
no temporary folder behind, and its largest process stays within bounded memory."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hostile.catalog import EXPECTED
from verifier.report.results import Report

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, and the daemon needs fork"),
]

ROOT = Path(__file__).resolve().parents[2]
PROPERTIES = "test_logits_agree_with_the_oracle or test_the_same_input_gives_the_same_output"
MEMORY = 2 << 30  # for the run's largest process: PrintsGigabytes's 64 MB a call, all kept by pytest, took more
HANG_GUARD_S = 900  # the run takes a minute or two


@dataclass(frozen=True)
class Run:
    report: Report
    status: int
    left: list[int]  # the pids the models wrote down as left behind
    tmp: Path  # the run's $TMPDIR
    peak_bytes: int  # the largest resident set of verifier check and what it waited for


def _verdicts(run: Run) -> dict[str, str]:
    return {v.model: v.verdict for v in run.report.verdicts()}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("hostile")
    (root / "tmp").mkdir()
    pids = root / "pids"
    pids.touch()
    specs = ["numpy", *(f"tests.hostile.catalog:{name}" for name in EXPECTED)]
    command = [
        sys.executable, "-m", "verifier", "check", *(a for spec in specs for a in ("--model", spec)),
        "--reports", str(root / "reports"), "--call-timeout", "2", "--", "-p", "no:cacheprovider", "-k", PROPERTIES,
    ]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(root / "tmp"), "HOSTILE_PIDS": str(pids)}
    with open(root / "output", "wb") as output:
        check = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    guard = threading.Timer(HANG_GUARD_S, check.kill)
    guard.start()
    try:
        _, status, usage = os.wait4(check.pid, 0)  # wait4: the resources of this run alone, its pytest's included
    finally:
        guard.cancel()
    check.returncode = os.waitstatus_to_exitcode(status)
    path = root / "reports" / "conformance.json"
    assert path.exists(), (root / "output").read_text()[-3000:]
    left = [int(pid) for pid in pids.read_text().split()]
    return Run(Report.read(path), check.returncode, left, root / "tmp", usage.ru_maxrss * 1024)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_hostile_model_gets_its_verdict(name: str, run: Run) -> None:
    expected = EXPECTED[name]
    spec = f"tests.hostile.catalog:{name}"
    verdict = _verdicts(run)[spec]
    if expected.verdict == "conforms":
        failures = [f"{r.property}: {r.detail[:300]}" for r in run.report.failures if r.model == spec]
        assert verdict == "conforms", f"{name} ({expected.why}): {verdict}\n" + "\n".join(failures)
        return
    # A rule broken in one call is the violation's; one over several calls (`deterministic`), the property's.
    broken = [r for r in run.report.failures if r.model == spec]
    named = [r for r in broken if r.contract_rule == expected.rule or f"contract rule {expected.rule!r}" in r.detail]
    assert verdict == "fails" and named, f"{name}: {verdict}; " + "; ".join(r.detail[:300] for r in broken)


def test_the_built_in_model_beside_them_conforms(run: Run) -> None:
    assert _verdicts(run)["numpy"] == "conforms", [r.detail[:300] for r in run.report.failures if r.model == "numpy"]
    assert run.status == 1  # hostile models fail: the run does not pass


def test_nothing_the_models_started_survives_the_run(run: Run) -> None:
    assert run.left, "the daemon wrote no pid: the check below checked nothing"
    assert not [pid for pid in run.left if _alive(pid)]
    assert [p.name for p in run.tmp.iterdir() if p.name.startswith("verifier")] == []


def test_the_run_stays_within_bounded_memory(run: Run) -> None:
    assert run.peak_bytes < MEMORY, f"{run.peak_bytes / 2**30:.2f} GiB"


def test_a_model_that_swallows_the_interruption_ends_the_run_and_is_named(tmp_path: Path) -> None:
    spec = "tests.hostile.catalog:swallows_the_interruption"
    command = [
        sys.executable, "-m", "verifier", "check", "--model", spec, "--reports", str(tmp_path / "reports"),
        "--call-timeout", "1", "--", "-p", "no:cacheprovider", "-k", "test_logits_agree_with_the_oracle",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 1, done.stderr[-3000:]
    report = Report.read(tmp_path / "reports" / "conformance.json")
    (failure,) = [r for r in report.failures if r.model == spec]
    assert failure.detail.startswith("a call into the model did not return: past its deadline"), failure.detail
    assert "catalog.py" in failure.detail and "in logits" in failure.detail, failure.detail  # where it was


def test_under_plain_pytest_a_model_that_ends_the_process_fails_in_the_junit_report(tmp_path: Path) -> None:
    # Plain pytest has no `verifier check` to see the process end from outside: the exit is refused in it.
    specs = ["tests.hostile.catalog:exits_with_status_zero", "tests.hostile.catalog:exits_in_its_factory"]
    command = [
        sys.executable, "-m", "pytest", "properties", *(f"--model={spec}" for spec in specs), "-p", "no:cacheprovider",
        "-k", "test_logits_agree_with_the_oracle", f"--junitxml={tmp_path / 'junit.xml'}",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 1, done.stdout[-3000:]  # 0 was the exit status the model asked for: a CI job passed
    junit = (tmp_path / "junit.xml").read_text()
    for spec in specs:
        assert f"model '{spec}' broke the contract rule 'keeps-the-process'" in junit, junit[-3000:]
