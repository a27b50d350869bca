"""Writing the report files: Markdown, JSON, HTML and error-per-stage plots, each atomically."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import filelock

from verifier.formats.fileio import atomic_write
from verifier.report import html, plot, render
from verifier.report.results import Report, Result

MARKDOWN = "conformance.md"
JSON = "conformance.json"
HTML = "conformance.html"
LOG = "pytest.log"  # pytest's whole output of a `verifier check` run
LOCK = ".verifier-check.lock"  # held by the `verifier check` run writing into a reports directory


class ReportError(ValueError):
    """A reports directory that cannot hold the reports; the message names it and why."""


def check_directory(directory: Path) -> None:
    """Make `directory` if needed; raise ReportError unless it is a writable directory (before a long run)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportError(f"{directory}: cannot be the reports directory: {e.strerror or e}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ReportError(f"{directory}: cannot be the reports directory: not writable")


@contextlib.contextmanager
def only_run(directory: Path) -> Iterator[None]:
    """Hold `directory`'s lock for one run, and remove the previous run's reports as the run starts.

    Two runs into one directory would overwrite each other's reports, leaving a Markdown, JSON and HTML
    from different runs: the second is refused (ReportError) instead of waiting, as a CI job should fail
    than hang. The old reports go before the run, so a run stopped before it writes any never leaves
    the previous run's "conforms" beside its own log.
    """
    lock = filelock.FileLock(directory / LOCK, timeout=0)  # non-blocking: held means refused
    try:
        lock.acquire()
    except filelock.Timeout:
        raise ReportError(
            f"{directory}: another verifier check is writing its reports here; wait for it or give another --reports"
        ) from None
    except OSError as e:
        raise ReportError(f"{directory}: cannot lock the reports directory: {e.strerror or e}") from None
    try:
        for name in (MARKDOWN, JSON, HTML):
            (directory / name).unlink(missing_ok=True)
        yield
    finally:
        lock.release()


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` all or nothing (`verifier.formats.fileio.atomic_write`), making its directory."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as handle:
            handle.write(data)
    except OSError as e:
        raise ReportError(f"{path}: cannot write the report: {e.strerror or e}") from None


def plot_path(directory: Path, result: Result) -> Path:
    """`stage-errors_<model>_<property>.png`, with characters unsafe in file names replaced."""
    stem = f"stage-errors_{result.model or 'any'}_{result.property}"
    return directory / (re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-") + ".png")


def write_reports(report: Report, directory: Path, *, plots: bool = False) -> list[Path]:
    """Write conformance.md, conformance.json, conformance.html (self-contained, its plots inline)
    and, if `plots`, one PNG per localized failure that recorded its stage errors. Returns the paths written."""
    written = [directory / MARKDOWN, directory / JSON, directory / HTML]
    write_atomic(written[0], render.markdown(report).encode())
    write_atomic(written[1], report.to_json().encode())
    write_atomic(written[2], html.html(report).encode())
    if plots:
        for result in report.failures:
            if result.stage_errors:
                path = plot_path(directory, result)
                write_atomic(path, plot.stage_errors_png(result))
                written.append(path)
    return written
