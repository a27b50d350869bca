"""Writing the report files: Markdown, JSON, HTML and error-per-stage plots, each atomically, and the
reports folder of one `verifier check` run (`only_run`, `publish`).

What a reports folder holds, whatever stops a run (Ctrl-C, SIGTERM, SIGKILL, a crash):

- files of one run at most: a run, holding the folder's lock, first removes the previous run's set
  (`SET`) and what a killed run left (its staging folder); it writes its own set into a fresh
  staging folder inside the reports folder, `.verifier-run-XXXXXXXX/` (its pytest.log while pytest
  runs), and only when the set is whole renames each file into place (`publish`): a rename within a
  folder replaces a file at once, so no report is ever half-written, and the set appears together,
  but for the instant between its renames (a run killed in that instant leaves part of its own set);
- no lock file: the lock is a `flock` on the folder itself, which the system releases when the run
  ends, even killed;
- after a SIGKILL, the killed run's staging folder (with its pytest.log), until the next run removes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from verifier.formats.fileio import atomic_write
from verifier.messages import BoundedMessage
from verifier.report import html, plot, render
from verifier.report.results import Report, Result

MARKDOWN = "conformance.md"
JSON = "conformance.json"
HTML = "conformance.html"
LOG = "pytest.log"  # pytest's whole output of a `verifier check` run
PLOTS = "stage-errors_*.svg"  # `plot_path`
# The files of one run (glob patterns), replaced together; with the PNG plots earlier versions wrote.
SET = (MARKDOWN, JSON, HTML, LOG, PLOTS, "stage-errors_*.png")
STAGING = ".verifier-run-"  # the prefix of a run's staging folder inside the reports folder


class ReportError(BoundedMessage, ValueError):
    """A reports directory that cannot hold the reports; the message names it and why."""


def problem(error: OSError) -> str:
    """What the system said of a failed write, as a message says it: `no space left on device`."""
    said = error.strerror or str(error)
    return said[:1].lower() + said[1:]


def cannot_write(error: OSError, what: str | Path) -> ReportError:
    """The one-line error of a write the system refused: `no space left on device writing
    reports/conformance.json` (a full disk, a quota, a file system mounted read-only)."""
    return ReportError(f"{problem(error)} writing {what}")


def check_directory(directory: Path) -> None:
    """Make `directory` if needed; raise ReportError unless it is a writable directory (before a long run)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportError(f"{directory}: cannot be the reports directory: {e.strerror or e}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ReportError(f"{directory}: cannot be the reports directory: not writable")


@contextlib.contextmanager
def only_run(directory: Path) -> Iterator[Path]:
    """Hold `directory`'s lock for one run, remove the previous run's files, and give the run its
    staging folder (removed at the end; after a SIGKILL, by the next run).

    Two runs into one directory would overwrite each other's reports, leaving a Markdown, JSON and HTML
    from different runs: the second is refused (ReportError) instead of waiting, as a CI job should fail
    than hang. The old reports go before the run, so a run stopped before it writes any never leaves
    the previous run's "conforms" beside its own log.
    """
    check_directory(directory)
    try:
        fd = os.open(directory, os.O_RDONLY)  # not inherited by pytest (PEP 446): the lock ends with this process
    except OSError as e:
        raise ReportError(f"{directory}: cannot lock the reports directory: {e.strerror or e}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # non-blocking: held means refused
        except BlockingIOError:
            raise ReportError(
                f"{directory}: another verifier check is writing its reports here; wait for it or give another "
                "--reports"
            ) from None
        except OSError as e:
            raise ReportError(f"{directory}: cannot lock the reports directory: {e.strerror or e}") from None
        for pattern in SET:
            for path in directory.glob(pattern):
                path.unlink(missing_ok=True)
        for path in directory.glob(STAGING + "*"):  # a killed run's
            shutil.rmtree(path, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=STAGING, dir=directory))
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        os.close(fd)  # releases the lock


def publish(paths: Sequence[Path], directory: Path) -> list[Path]:
    """Move the staged files `paths` into `directory` (renames in one file system: each replaces at once)."""
    published = []
    for path in paths:
        target = directory / path.name
        try:
            os.replace(path, target)
        except OSError as e:
            raise cannot_write(e, target) from None
        published.append(target)
    return published


def write_atomic(path: Path, data: bytes, shown: Path | None = None) -> None:
    """Write `data` to `path` all or nothing (`verifier.formats.fileio.atomic_write`), making its directory;
    an error names `shown` (where a staged file will be published) or else `path`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as handle:
            handle.write(data)
    except OSError as e:
        raise cannot_write(e, shown or path) from None


def plot_path(directory: Path, result: Result) -> Path:
    """`stage-errors_<model>_<property>.svg`, with characters unsafe in file names replaced."""
    stem = f"stage-errors_{result.model or 'any'}_{result.property}"
    return directory / (re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-") + ".svg")


def write_reports(
    report: Report, directory: Path, *, plots: bool = False, published_to: Path | None = None
) -> list[Path]:
    """Write conformance.md, conformance.json, conformance.html (self-contained, its plots inline)
    and, if `plots`, one SVG per localized failure that recorded its stage errors. Returns the paths written.
    An error names the file in `published_to`, where `directory` (a staging folder) will be published."""
    drawn: dict[int, str] = {}  # each plot drawn once for the page and its file

    def svg(result: Result) -> str:
        if id(result) not in drawn:
            drawn[id(result)] = plot.stage_errors_svg(result)
        return drawn[id(result)]

    def write(path: Path, text: str) -> None:
        write_atomic(path, text.encode(), published_to / path.name if published_to is not None else None)

    written = [directory / MARKDOWN, directory / JSON, directory / HTML]
    write(written[0], render.markdown(report))
    write(written[1], report.to_json())
    write(written[2], html.html(report, svg))
    if plots:
        for result in report.failures:
            if result.stage_errors:
                path = plot_path(directory, result)
                write(path, svg(result))
                written.append(path)
    return written
