"""The error-per-stage plot of a localized failure: error / tolerance bound at each traced stage.

Written as SVG text directly: a bar per stage on a log axis needs no plotting library, and drawing it
with matplotlib took 0.5 s a plot (a run with 12 localized failures spent 7 s of its 30 s on them).
"""

from __future__ import annotations

import math
from html import escape

from verifier.report.results import Result

# Ratios of exactly zero (a stage computed bit for bit) are drawn at this floor on the log axis;
# infinite ones (a stage of the wrong shape) to the top, hatched.
_FLOOR = 1e-6
_RED, _BLUE = "#d62728", "#1f77b4"
# Pixels: the plot area's margins (the stage names hang below it, turned upright), each stage's width.
_LEFT, _RIGHT, _TOP, _BOTTOM, _STAGE = 78, 16, 52, 150, 18
_HEIGHT = 260


def stage_errors_svg(result: Result) -> str:
    """An SVG of `result.stage_errors` in compute order, the tolerance at 1, the first divergent stage marked."""
    rows = result.stage_errors or []
    stages = [stage for stage, _, _ in rows]
    ratios = [error / bound if bound > 0 else math.inf for _, error, bound in rows]
    finite = [r for r in ratios if math.isfinite(r)]
    top = max([10.0, *finite]) * 10
    low, high = math.log10(_FLOOR), math.ceil(math.log10(top))
    width = _LEFT + _RIGHT + max(len(stages) * _STAGE, 420)

    def y(value: float) -> float:
        """The height of `value` on the log axis, in pixels from the top of the picture."""
        share = (math.log10(min(max(value, _FLOOR), 10.0**high)) - low) / (high - low)
        return _TOP + _HEIGHT * (1 - share)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{_TOP + _HEIGHT + _BOTTOM}" '
        'font-family="sans-serif" font-size="11">',
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        f'<rect width="6" height="6" fill="{_RED}"/><line y2="6" stroke="white" stroke-width="2"/></pattern></defs>',
        f'<text x="{width / 2:.0f}" y="18" text-anchor="middle" font-size="12">{escape(result.model or "")}: '
        f"{escape(result.property)}</text>",
        f'<text transform="translate(16 {_TOP + _HEIGHT / 2}) rotate(-90)" text-anchor="middle">'
        "max |error| / tolerance bound</text>",
    ]
    for power in range(int(low), int(high) + 1):  # a tick per decade
        at = y(10.0**power)
        out.append(f'<line x1="{_LEFT - 4}" x2="{width - _RIGHT}" y1="{at:.1f}" y2="{at:.1f}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{_LEFT - 6}" y="{at + 4:.1f}" text-anchor="end">1e{power}</text>')
    for i, (stage, ratio) in enumerate(zip(stages, ratios, strict=True)):
        x = _LEFT + i * _STAGE
        fill = "url(#hatch)" if not math.isfinite(ratio) else _RED if ratio > 1 else _BLUE
        head = y(ratio)
        label = "infinite (wrong shape)" if not math.isfinite(ratio) else f"{ratio:.3g}"
        out.append(
            f'<rect x="{x + 2}" y="{head:.1f}" width="{_STAGE - 4}" height="{_TOP + _HEIGHT - head:.1f}" '
            f'fill="{fill}"><title>{escape(stage)}: {label}</title></rect>'
        )
        base = _TOP + _HEIGHT + 6
        out.append(
            f'<text transform="translate({x + _STAGE / 2 + 4:.0f} {base}) rotate(-90)" text-anchor="end" '
            f'font-size="9">{escape(stage)}</text>'
        )
    one = y(1.0)
    out.append(f'<line x1="{_LEFT}" x2="{width - _RIGHT}" y1="{one:.1f}" y2="{one:.1f}" stroke="black" '
               'stroke-dasharray="5 3"/>')  # fmt: skip
    legend = ["- - tolerance (error / bound = 1)"]
    if result.first_divergent_stage in stages:
        mark = _LEFT + stages.index(result.first_divergent_stage) * _STAGE + _STAGE / 2
        out.append(
            f'<line x1="{mark}" x2="{mark}" y1="{_TOP}" y2="{_TOP + _HEIGHT}" stroke="{_RED}" stroke-opacity="0.5"/>'
        )
        legend.append(f"| first divergent stage: {result.first_divergent_stage}")
    for n, line in enumerate(legend):
        out.append(f'<text x="{_LEFT + 6}" y="{_TOP - 20 + 14 * n}">{escape(line)}</text>')
    out.append(f'<rect x="{_LEFT}" y="{_TOP}" width="{width - _LEFT - _RIGHT}" height="{_HEIGHT}" fill="none" '
               'stroke="black"/>')  # fmt: skip
    out.append("</svg>")
    return "\n".join(out) + "\n"
