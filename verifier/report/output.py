"""Writing the report files: Markdown, JSON, HTML and error-per-stage plots, each atomically."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from verifier.report import html, plot, render
from verifier.report.results import Report, Result

MARKDOWN = "conformance.md"
JSON = "conformance.json"
HTML = "conformance.html"


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
