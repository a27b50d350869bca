"""conformance.html: self-contained, every cell colored by its outcome (a failure's first divergent stage in
it, its note number a link to the note), whole messages, plots inline; and it renders in a real headless
browser where one is installed."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest

from verifier.report import plot
from verifier.report.html import html
from verifier.report.output import write_reports
from verifier.report.results import Header, ModelCard, Report, Result

CHROMIUM = "/usr/bin/chromium"
MESSAGE = "logits differ from the oracle\nworst |a - b| = 3.1e-02 at [0, 7] <&> 'quoted'"


def _report() -> Report:
    cards = [ModelCard("numpy", "built-in", {"gpt2": "logits"}), ModelCard("wrong", "--model", {"gpt2": "logits"})]
    header = Header(cards, {"numpy": "2"}, "ci", {"max_examples": "20"}, "properties", "2026-01-01T00:00:00+00:00")
    stages = [("embed", 0.0, 1e-5), ("layers.0.attn_norm", 3e-2, 1e-5)]
    return Report(
        header,
        [
            Result("test_agreement.py::test_logits", "numpy", "pass", worst_error_ratio=0.012),
            Result("test_agreement.py::test_logits", "wrong", "fail", MESSAGE, 3.1e3, "layers.0.attn_norm", stages),
            Result("test_rope.py::test_rotation", "numpy", "skip", "model 'numpy' runs no llama config"),
            Result("test_rope.py::test_rotation", "wrong", "pass"),
        ],
    )


def test_the_page_holds_the_table_colored_the_whole_messages_and_the_plot_inline() -> None:
    page = html(_report())
    assert '<td class="pass">pass 0.012</td>' in page
    assert '<td class="fail">FAIL 3.1e+03 from layers.0.attn_norm <a href="#note-1">[1]</a></td>' in page
    assert '<td class="skip">skip <a href="#note-2">[2]</a></td>' in page
    assert '<li id="note-1"><p><strong>test_agreement.py::test_logits / wrong</strong> (fail)</p>' in page
    assert '<li id="note-2">' in page and 'id="note-3"' not in page
    assert "worst |a - b| = 3.1e-02 at [0, 7] &lt;&amp;&gt; &#x27;quoted&#x27;" in page  # whole, escaped
    assert page.count('<img src="data:image/svg+xml;base64,PHN2Zy') == 1  # the failure's stage errors: "<svg"
    assert "wrong: FAILS" in page and "<dt>model</dt><dd><code>wrong (--model)</code></dd>" in page
    assert "http" not in page.replace("http-equiv", "") and "<link" not in page and "<script" not in page


def test_verifier_check_s_reports_include_the_page(tmp_path: Path) -> None:
    written = write_reports(_report(), tmp_path)
    assert tmp_path / "conformance.html" in written
    assert (tmp_path / "conformance.html").read_text().startswith("<!DOCTYPE html>")


def test_the_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no {CHROMIUM} (Debian's chromium package) to render the page in")
    page = tmp_path / "conformance.html"
    page.write_text(html(_report()))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    profile = f"--user-data-dir={tmp_path / 'profile'}"
    dom = subprocess.run(
        [CHROMIUM, *flags, profile, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr
    assert '<a href="#note-1">[1]</a>' in dom.stdout and "data:image/svg+xml;base64," in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run(
        [CHROMIUM, *flags, profile, f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)


def test_a_cell_whose_property_met_router_near_ties_says_so_below_its_outcome() -> None:
    report = _report()
    report.results[0].near_ties = "1 router near-tie met; either choice accepted, the other one never taken\n..."
    page = html(report)
    assert (
        '<td class="pass">pass 0.012<br><small class="near-ties">1 router near-tie met; either choice accepted, the '
        "other one never taken</small></td>"
    ) in page
    assert page.count('class="near-ties"') == 1


def test_each_failure_s_plot_is_drawn_once_for_the_page_and_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The page and the plot's file each drew it: 0.3 s more per localized failure of every run.
    drawn: list[str] = []
    draw = plot.stage_errors_svg
    monkeypatch.setattr(plot, "stage_errors_svg", lambda result: drawn.append(result.model) or draw(result))
    written = write_reports(_report(), tmp_path, plots=True)
    assert drawn == ["wrong"]
    (svg,) = [path for path in written if path.suffix == ".svg"]
    assert base64.b64encode(svg.read_bytes()).decode() in (tmp_path / "conformance.html").read_text()
