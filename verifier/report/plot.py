"""The error-per-stage plot of a localized failure: error / tolerance bound at each traced stage."""

from __future__ import annotations

import io
import math

from verifier.report.results import Result

# Ratios of exactly zero (a stage computed bit for bit) are drawn at this floor on the log axis;
# infinite ones (a stage of the wrong shape) at the top, hatched.
_FLOOR = 1e-6


def stage_errors_png(result: Result) -> bytes:
    """A PNG of `result.stage_errors` in compute order, the tolerance at 1, the first divergent stage marked."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    rows = result.stage_errors or []
    stages = [stage for stage, _, _ in rows]
    ratios = [error / bound if bound > 0 else math.inf for _, error, bound in rows]
    finite = [r for r in ratios if math.isfinite(r)]
    top = max([10.0, *finite]) * 10
    heights = [min(max(r, _FLOOR), top) for r in ratios]
    fig, ax = plt.subplots(figsize=(min(max(6.0, 0.2 * len(stages) + 2), 30.0), 4.5), layout="constrained")
    colors = ["tab:red" if r > 1 else "tab:blue" for r in ratios]
    bars = ax.bar(range(len(stages)), heights, color=colors)
    for bar, ratio in zip(bars, ratios, strict=True):
        if not math.isfinite(ratio):
            bar.set_hatch("//")
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="tolerance (error / bound = 1)")
    if result.first_divergent_stage in stages:
        ax.axvline(stages.index(result.first_divergent_stage), color="tab:red", linewidth=1, alpha=0.5,
                   label=f"first divergent stage: {result.first_divergent_stage}")  # fmt: skip
    ax.set_xticks(range(len(stages)), stages, rotation=90, fontsize=7)
    ax.set_ylabel("max |error| / tolerance bound")
    ax.set_title(f"{result.model}: {result.property}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    return buffer.getvalue()
