"""Runs the readers on fuzzed inputs in a separate, limited process, and judges the outcome.

The invariant (issue 25), per input and per reader: it returns (a validated config and weights, for
the model readers), or raises `CheckpointError` with a one-line message shorter than MAX_MESSAGE;
within TIME_LIMIT seconds and an address space of the file's size times MEMORY_PER_BYTE plus
MEMORY_CONSTANT above what the worker already holds. Anything else is a violation: another exception
(MemoryError, RecursionError, ...), a long or multi-line message, a crash (a signal), a timeout.

One long-lived worker (tests/fuzz/worker.py) serves the inputs, restarted when it dies or overruns.
A violating input is saved (`save`) so it can be run again: `python -m tests.fuzz.runner FOLDER`.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.formats.test_hostile_binary import MAX_MESSAGE
from tests.fuzz.mutations import FuzzInput

ROOT = Path(__file__).resolve().parents[2]
TIME_LIMIT = 30.0  # seconds for all readers on one input: 2 to 30 ms is usual; generous for a shared, noisy machine
MEMORY_CONSTANT = 256 * 2**20
MEMORY_PER_BYTE = 8  # Q8_0 bytes become float32 (4x), read then converted (2x)
VIOLATIONS_DIR = Path(tempfile.gettempdir()) / "verifier-fuzz-violations"


@dataclass
class Result:
    """The outcome of each reader on one input, and what broke the invariant."""

    outcomes: dict[str, str] = field(default_factory=dict)  # reader -> "returned" / "refused"
    violations: list[str] = field(default_factory=list)
    peak_rss_kib: int = 0


def judge(answer: dict[str, Any]) -> Result:
    """The invariant applied to the worker's answer."""
    result = Result(peak_rss_kib=answer["peak_rss_kib"])
    for reader, outcome, detail in answer["outcomes"]:
        result.outcomes[reader] = outcome
        if outcome == "raised":
            result.violations.append(f"{reader}: raised {detail}")
        elif outcome == "refused":
            message, length = detail["message"], detail["length"]
            if not message.isprintable() or length >= MAX_MESSAGE:  # a line break, a control character
                result.violations.append(
                    f"{reader}: a message of {length:,} characters, not one printable line shorter than "
                    f"{MAX_MESSAGE}: {message[:300]!r}"
                )
    return result


class Runner:
    """A worker process that runs the readers on paths; restarted when it crashes or times out."""

    def __init__(self, time_limit: float = TIME_LIMIT, command: list[str] | None = None) -> None:
        """`command` starts the worker (tests of the runner itself give another)."""
        self.time_limit = time_limit
        self.command = command or [sys.executable, "-m", "tests.fuzz.worker"]
        self.peak_rss_kib = 0
        self.restarts = 0
        self._worker: subprocess.Popen[str] | None = None
        self._stderr: IO[bytes] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self._worker is None:
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - open as long as the worker runs; closed by _stop
            env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
            self._worker = subprocess.Popen(
                self.command,
                cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            )  # fmt: skip
        return self._worker

    def _stop(self) -> str:
        """Kill the worker; the tail of its stderr (a crash's traceback)."""
        worker, stderr = self._worker, self._stderr
        self._worker = self._stderr = None
        if worker is None or stderr is None:
            return ""
        if worker.poll() is None:
            worker.kill()
        worker.wait()
        for pipe in (worker.stdin, worker.stdout):
            if pipe is not None:
                pipe.close()
        stderr.seek(0)
        tail = stderr.read().decode(errors="replace").strip().splitlines()[-12:]
        stderr.close()
        self.restarts += 1
        return " | ".join(tail)

    @staticmethod
    def _exit_status(worker: subprocess.Popen[str]) -> int | None:
        """The status of a worker that closed its answers (it is exiting: its end of the pipe closes first)."""
        try:
            return worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None

    def run(self, path: Path, size: int) -> Result:
        """Every reader on `path` (`size` bytes in all) in the worker, judged."""
        worker = self._start()
        assert worker.stdin is not None and worker.stdout is not None
        request = {"path": str(path), "memory": MEMORY_CONSTANT + MEMORY_PER_BYTE * size}
        try:
            worker.stdin.write(json.dumps(request) + "\n")
            worker.stdin.flush()
        except BrokenPipeError:
            pass  # it died: reported below
        ready, _, _ = select.select([worker.stdout], [], [], self.time_limit)
        line = worker.stdout.readline() if ready else ""
        if not line:
            timed_out = not ready
            status = None if timed_out else self._exit_status(worker)
            stderr = self._stop()
            if timed_out:
                return Result(violations=[f"no answer within {self.time_limit:.0f} s (killed); stderr: {stderr}"])
            died = f"signal {signal.Signals(-status).name}" if status and status < 0 else f"exit status {status}"
            return Result(violations=[f"the worker died ({died}); stderr: {stderr}"])
        result = judge(json.loads(line))
        self.peak_rss_kib = max(self.peak_rss_kib, result.peak_rss_kib)
        return result

    def check(self, fuzz_input: FuzzInput) -> Result:
        """Write `fuzz_input` into a fresh folder and run it; a violating one is saved (see `save`)."""
        with tempfile.TemporaryDirectory(prefix="verifier-fuzz-") as tmp:
            result = self.run(fuzz_input.write(Path(tmp)), fuzz_input.size)
        if result.violations:
            saved = save(fuzz_input, result)
            result.violations.append(f"input saved in {saved} (run it again: python -m tests.fuzz.runner {saved})")
        return result

    def close(self) -> None:
        if self._worker is not None:
            self._stop()
            self.restarts -= 1  # a stop at the end is no restart

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def save(fuzz_input: FuzzInput, result: Result, folder: Path = VIOLATIONS_DIR) -> Path:
    """The input's files in `folder`/<digest>/, with input.json (target, format, mutations, violations)."""
    digest = hashlib.sha256(json.dumps(sorted((k, v.hex()) for k, v in fuzz_input.files.items())).encode())
    where = folder / digest.hexdigest()[:16]
    where.mkdir(parents=True, exist_ok=True)
    fuzz_input.write(where)
    about = {"target": fuzz_input.target, "format": fuzz_input.format, "labels": fuzz_input.labels,
             "violations": result.violations}  # fmt: skip
    (where / "input.json").write_text(json.dumps(about, indent=2) + "\n")
    return where


def main() -> None:
    """Run a saved input again: `python -m tests.fuzz.runner FOLDER` (a folder `save` wrote)."""
    where = Path(sys.argv[1])
    about = json.loads((where / "input.json").read_text())
    size = sum(p.stat().st_size for p in where.rglob("*") if p.is_file() and p.name != "input.json")
    with Runner() as runner:
        result = runner.run(where / about["target"], size)
    print(json.dumps({"outcomes": result.outcomes, "violations": result.violations}, indent=2))
    sys.exit(1 if result.violations else 0)


if __name__ == "__main__":
    main()
