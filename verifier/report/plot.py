"""The error-per-stage plot of a localized failure: error / tolerance at each traced stage."""

from __future__ import annotations

import io

from verifier.report.results import Result

# Ratios of exactly zero (a stage computed bit for bit) are drawn at this floor on the log axis.
_FLOOR = 1e-6


def stage_errors_png(result: Result) -> bytes:
    """A PNG of `result.stage_errors` in compute order, the tolerance at 1, the first divergent stage marked."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    errors = result.stage_errors or {}
    stages = list(errors)
    ratios = [max(errors[s], _FLOOR) for s in stages]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.28 * len(stages) + 2), 4.5), layout="constrained")
    colors = ["tab:red" if r > 1 else "tab:blue" for r in ratios]
    ax.bar(range(len(stages)), ratios, color=colors)
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="tolerance (error / bound = 1)")
    if result.first_divergent_stage in errors:
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
