"""The benchmark plots, drawn at build time from the figures the benchmark scripts commit
(benchmarks/data/*.json, written by `speed.py`, `full_size.py` and `scaling.py` with `--write`): a page
of SVG figures, each with the run's machine, command and date, so that a plot cannot drift from its data."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display at build time
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data"


def _svg(draw: Callable[[Any], None], width: float = 7.0, height: float = 3.6) -> str:
    figure, axes = plt.subplots(figsize=(width, height))
    try:
        draw(axes)
        figure.tight_layout()
        out = io.StringIO()
        figure.savefig(out, format="svg", metadata={"Date": None})  # no timestamp: the same data, the same file
        return out.getvalue()
    finally:
        plt.close(figure)


def _bars(axes: Any, groups: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        axes.bar([g + i * width for g in range(len(groups))], values, width, label=name)
    axes.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))], groups)
    axes.set_ylabel(ylabel)
    axes.legend(fontsize="small")


def prefill(data: dict[str, Any]) -> str:
    """Seconds of one GPT-2 124M prefill, per length, for each implementation (and before, if measured)."""
    results, lengths = data["results"], data["prefill_lengths"]
    names = {"oracle": "oracle (float64)", "numpy": "reference (float32)", "transformers": "transformers (float32)"}
    series = {label: [results[f"prefill/{key}/{T}"]["seconds"] for T in lengths] for key, label in names.items()}
    if data.get("before"):
        for key in ("oracle", "numpy"):
            series[f"{names[key]}, at {data['before']}"] = [
                results[f"before/prefill/{key}/{T}"]["seconds"] for T in lengths
            ]

    def draw(axes: Any) -> None:
        _bars(axes, [f"T = {T:,}" for T in lengths], series, "seconds (median of 3)")
        axes.set_yscale("log")
        axes.set_title("Prefill, GPT-2 124M")

    return _svg(draw)


def decode(data: dict[str, Any]) -> str:
    """Tokens per second of greedy decoding on the stories15M shape, each implementation measured."""
    measured = [(p, data["results"][f"decode/{p}"]) for p in data["decode_peers"]]
    measured = [(p, r["tok_s"]) for p, r in measured if "tok_s" in r]

    def draw(axes: Any) -> None:
        axes.barh([p for p, _ in measured], [v for _, v in measured])
        axes.set_xlabel("tokens per second")
        axes.invert_yaxis()
        axes.set_title("Decode, stories15M shape, 256 positions")

    return _svg(draw)


def full_size(data: dict[str, Any]) -> str:
    """The streamed oracle's time (cold) against reading the checkpoint once from disk, per model."""
    models = data["models"]
    series = {"read once from disk": [m["bytes"] / m["disk_bps"] for m in models]}
    series["oracle, cold"] = [m["runs"]["oracle"]["seconds"] for m in models]
    if data.get("before"):
        series[f"oracle, cold, at {data['before']}"] = [m["runs"]["oracle-before"]["seconds"] for m in models]

    def draw(axes: Any) -> None:
        _bars(axes, [m["name"] for m in models], series, "seconds")
        axes.set_yscale("log")
        axes.set_title("Full size: the streamed float64 oracle against the disk")

    return _svg(draw)


def scaling(data: dict[str, Any]) -> str:
    """One `verifier check`'s wall time per setup of workers, per model."""
    models = data["models"]
    setups = [row["setup"] for row in next(iter(models.values()))]
    series = {model: [row["seconds"] for row in rows] for model, rows in models.items()}

    def draw(axes: Any) -> None:
        _bars(axes, [s.replace(" (as remote hosts)", "") for s in setups], series, "seconds")
        axes.tick_params(axis="x", labelsize="small")
        axes.set_title("verifier check over pytest-xdist workers")

    return _svg(draw)


# (data file, figure file, caption, drawing): each figure of the page, in order.
FIGURES: tuple[tuple[str, str, str, Callable[[dict[str, Any]], str]], ...] = (
    ("speed", "prefill.svg", "Prefill of GPT-2 124M: the oracle and the reference against transformers", prefill),
    ("speed", "decode.svg", "Decode speed on the stories15M shape", decode),
    ("full_size", "full-size.svg", "The streamed oracle at full size against one read of the weights", full_size),
    ("scaling", "scaling.svg", "One verification spread over workers", scaling),
)


def render() -> dict[str, str]:
    """{path in the site's docs: text}: the plots page (benchmarks/plots.md) and its SVG figures."""
    out: dict[str, str] = {}
    lines = [
        "# Benchmark plots",
        "",
        "Drawn when the site is built from the figures the benchmark scripts commit in `benchmarks/data/`; "
        "the tables, and what each run decided, are in [the results](results.md).",
    ]
    for name, figure, caption, draw in FIGURES:
        data = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
        out[f"benchmarks/{figure}"] = draw(data)
        lines += [
            "",
            f"## {caption}",
            "",
            f"![{caption}]({figure})",
            "",
            f"`{data['command']}` ({data['date']}), {data['machine']}.",
        ]
    out["benchmarks/plots.md"] = "\n".join(lines) + "\n"
    return out
