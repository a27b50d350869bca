"""The life of a tensor drawn as the articles draw it: data tensors and the weights they meet as boxes.

Top to bottom: tokens, the embedding, one block expanded (its repetition marked), the final norm,
the logits and the next token. Each stage is a data box with its shape; a stage computed with
weights has a weight box beside it with the shape of the part it uses. SVG keeps text as text.
matplotlib is imported on first use, so the rest of the suite loads without it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from verifier.analysis.trace import Life, Step, TraceError, format_shape, short_weight_name
from verifier.model import stages

FORMATS = {".svg": "svg", ".png": "png"}
DATA_COLOUR, DATA_EDGE = "#cfe2f3", "#3d85c6"
WEIGHT_COLOUR, WEIGHT_EDGE = "#fce5cd", "#e69138"
TABLE_COLOUR, TABLE_EDGE = "#eeeeee", "#999999"  # RoPE's cos/sin: computed from positions, not learned
_ROW = 0.8  # vertical distance between stages, in data units
_BOX_H = 0.6
_DATA_X, _DATA_W = 0.0, 3.0
_WEIGHT_X, _WEIGHT_W = 4.0, 3.8


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def plot_format(path: str | Path) -> str:
    """The format, "svg" or "png", from the file's suffix; TraceError for another or a missing directory."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise TraceError(f"--plot {path}: the file must end in .svg or .png, found {suffix or 'no suffix'!r}")
    if not path.parent.is_dir():
        raise TraceError(f"--plot {path}: the directory {path.parent} does not exist")
    return FORMATS[suffix]


def _box(ax: Any, x: float, width: float, y: float, text: str, colours: tuple[str, str]) -> None:
    from matplotlib.patches import FancyBboxPatch

    face, edge = colours
    ax.add_patch(FancyBboxPatch((x, y - _BOX_H / 2), width, _BOX_H, boxstyle="round,pad=0.04", fc=face, ec=edge))
    ax.text(x + width / 2, y, text, ha="center", va="center", fontsize=7, family="monospace")


def _arrow(ax: Any, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": "#555555", "lw": 1})


def _weight_text(step: Step, life: Life) -> str:
    """One weight as name and shape on two lines; two (GPT-2's wte + wpe) one line each; `+ bias` if biased."""
    matrices = [w for w in step.weights if not w.name.endswith(".bias")]
    names = [f"{short_weight_name(w.name, life.config)}{w.part}" for w in matrices]
    shapes = [format_shape(w.part_shape) for w in matrices]
    bias = " + bias" if len(matrices) < len(step.weights) else ""
    if len(matrices) == 1:
        return f"{names[0]}\n{shapes[0]}{bias}"
    return "\n+ ".join(f"{n} {s}" for n, s in zip(names, shapes, strict=True)) + bias


def plot(life: Life, path: str | Path) -> Path:
    """Draw `life` (its first layer expanded) to `path` (.svg or .png); returns the path written."""
    fmt = plot_format(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    c = life.config
    shown = [s for s in life.steps if (stages.split_stage(s.stage)[0] or 0) == 0]
    labels: list[tuple[str, str, Step | None]] = [("tokens", format_shape([life.n_positions]), None)]
    labels += [(s.stage.removeprefix("layers.0."), format_shape(s.shape, s.per_head), s) for s in shown]
    at_final = next(i for i, item in enumerate(labels) if item[0] == stages.FINAL_NORM)
    labels.insert(at_final + 1, ("last row", format_shape([c.d_model]), None))
    labels.append((f"next token {life.prediction.token}", format_shape([c.vocab_size]) + " -> argmax", None))

    height = _ROW * len(labels) + 1.5
    data, weight, table = (DATA_COLOUR, DATA_EDGE), (WEIGHT_COLOUR, WEIGHT_EDGE), (TABLE_COLOUR, TABLE_EDGE)
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "verifier"}):
        fig, ax = plt.subplots(figsize=(10, height * 0.62))
        ax.set_xlim(-2.2, 12.5)
        ax.set_ylim(-_ROW * (len(labels) - 1) - 0.6, 1.0)
        ax.axis("off")
        ax.set_title(f"{life.model}: the life of a tensor, T = {life.n_positions}", fontsize=11)
        ys = [-i * _ROW for i in range(len(labels))]
        block = [y for y, item in zip(ys, labels, strict=True) if item[2] and stages.split_stage(item[2].stage)[0] == 0]
        top, bottom = block[0] + _ROW / 2, block[-1] - _ROW / 2
        ax.add_patch(Rectangle((-2.1, bottom), 14.5, top - bottom, fill=False, ls="--", ec="#777777"))
        ax.text(-2.0, block[0], f"block\nx {c.n_layers}\n(layer 0\nshown)", fontsize=9, va="top", color="#444444")
        for i, (y, (name, shape, step)) in enumerate(zip(ys, labels, strict=True)):
            _box(ax, _DATA_X, _DATA_W, y, f"{name}\n{shape}", data)
            if i:
                _arrow(ax, (_DATA_W / 2, ys[i - 1] - _BOX_H / 2), (_DATA_W / 2, y + _BOX_H / 2))
            if step is None:
                continue
            if step.weights:
                _box(ax, _WEIGHT_X, _WEIGHT_W, y, _weight_text(step, life), weight)
                _arrow(ax, (_WEIGHT_X, y), (_DATA_X + _DATA_W, y))
            elif life.rope and name in ("q_rope", "k_rope"):
                _box(ax, _WEIGHT_X, _WEIGHT_W, y, f"cos, sin tables\n2 x {format_shape(life.rope.table_shape)}", table)
                _arrow(ax, (_WEIGHT_X, y), (_DATA_X + _DATA_W, y))
            ax.text(_WEIGHT_X + _WEIGHT_W + 0.3, y, step.operation, fontsize=7, va="center", color="#333333")
        ax.legend(
            handles=[
                Patch(fc=DATA_COLOUR, ec=DATA_EDGE, label="data tensor"),
                Patch(fc=WEIGHT_COLOUR, ec=WEIGHT_EDGE, label="weight (learned)"),
                *([Patch(fc=TABLE_COLOUR, ec=TABLE_EDGE, label="RoPE table (fixed)")] if life.rope else []),
            ],
            loc="upper right",
            fontsize=8,
        )
        path = Path(path)
        # Written beside the target and renamed, so an interrupted run leaves no half-written file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                fig.savefig(f, format=fmt, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else None)
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, path)
        finally:
            plt.close(fig)
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path
