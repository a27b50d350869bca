"""Calibrate the precision classes (`verifier/analysis/precision.py`) on correct implementations.

    python benchmarks/precision_calibration.py                # measure and print a Markdown section
    python benchmarks/precision_calibration.py --write        # ... and put it into benchmarks/RESULTS.md
    python benchmarks/precision_calibration.py --cases 40     # fewer cases, to try it

Cases are drawn by the property suite's own strategy (`cases`, derandomized), at weight scales
0.003 to 10. Each correct implementation at a class (transformers on the CPU in bfloat16 and
float16, the NumPy reference rounded to each format, the mutant catalog's correct implementation at
each class, this project's version-2 reader, llama2.c's runq.c, llama.cpp on Q8_0 and Q4_0 GGUF
files and on the files its own quantizer makes (Q4_K_M, Q5_K_M, Q6_K); runq.c's prompts it declines
are left out) runs every case its factory accepts, and 8 more cases whose rows are multiples of 32
and 8 of 256 (llama.cpp's files need them, the strategy seldom draws them), and is measured
against the float64 oracle at its class (on the dequantized weights for the quantized classes):
- floor units: max |error| / (eps max |expected| depth), on well-conditioned cases (scale <= 0.3):
  what the floor (`ulps`) must exceed;
- error / spread: max |error| over the largest distance of the neighbours (the oracle on weights
  nudged by (1 + eps z), the reference rounded to the class): what `conditioning` must exceed;
- error / bound: the class's bound as it stands (at most 1 passes);
- for float16, whether the cases the class calls out of range are those where it overflows;
- for the quantized classes, the next-token statistics against the original weights (`distribution_agreement`):
  mean KL and same top token, and the mean KL over the largest of the dequantized oracle's, the class
  emulation's and the nudged oracles' (what `kl_factor` bounds);
  for runq.c (greedy only), each generated token's shortfall in the dequantized oracle's logits
  over the class's bound for a tie.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, settings  # noqa: E402

from benchmarks._machine import describe  # noqa: E402
from benchmarks.results_file import write_section  # noqa: E402
from tests.meta.mutants import catalog  # noqa: E402
from verifier.analysis import agreement, tolerance  # noqa: E402
from verifier.analysis.precision import BFLOAT16, FLOAT16, Q4_0, Q8_0, TF32, Precision, resolve  # noqa: E402
from verifier.model.config import ModelConfig  # noqa: E402
from verifier.model.presets import preset  # noqa: E402
from verifier.plugin.adapters import hf_transformers, llama2c, llamacpp, reference  # noqa: E402
from verifier.plugin.interface import Unsupported  # noqa: E402
from verifier.properties.cases import Case, cases  # noqa: E402
from verifier.properties.oracle import Oracle  # noqa: E402
from verifier.reference import NumpyModel  # noqa: E402

SECTION = "## Precision classes: calibration"
SCALES = (0.003, 0.02, 0.3, 1.0, 3.0, 10.0)
WELL_CONDITIONED = 0.3  # weight scales up to this one: attention is far from one-hot

# Correct implementations, each at the class it declares; `base-<class>` is the mutant catalog's correct
# implementation (tests/meta/mutants/base.py), whose rounding is written independently of the reference's.
IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "transformers-bfloat16": hf_transformers.build_bfloat16,
    "numpy-bfloat16": reference.rounded(BFLOAT16),
    "base-bfloat16": catalog.at.bfloat16.correct,
    "transformers-float16": hf_transformers.build_float16,
    "numpy-float16": reference.rounded(FLOAT16),
    "base-float16": catalog.at.float16.correct,
    "numpy-tf32": reference.rounded(TF32),
    "base-tf32": catalog.at.tf32.correct,
    "numpy-q8_0": reference.rounded(Q8_0),
    "base-q8_0": catalog.at.q8_0.correct,
    "llama2c-v2-reader": llama2c.build_v2_reader,
    "runq": llama2c.build_runq,
    "llamacpp-q8_0": llamacpp.build_q8_0,
    "numpy-q4_0": reference.rounded(Q4_0),
    "llamacpp-q4_0": llamacpp.build_q4_0,
    "llamacpp-q4_k_m": llamacpp.build_q4_k_m,
    "llamacpp-q5_k_m": llamacpp.build_q5_k_m,
    "llamacpp-q6_k": llamacpp.build_q6_k,
}
# llama.cpp's Q8_0 and Q4_0 files need rows a multiple of 32, which the strategy seldom draws: these cases
# (both families, d_model 64 and 288, d_ff 256 and 768) are run as well, by every implementation.
ROWS_OF_32 = [
    Case(config, seed, scale, tuple(int(t) for t in np.random.default_rng(seed).integers(0, config.vocab_size, T)))
    for config in (
        ModelConfig(
            family="gpt2",
            vocab_size=512,
            n_ctx=64,
            d_model=64,
            n_layers=2,
            n_heads=4,
            n_kv_heads=4,
            d_ff=256,
            norm_eps=1e-5,
            tie_embeddings=True,
        ),
        preset("llama2c-stories15M").replace(n_layers=2, n_ctx=64),
    )
    for seed, (scale, T) in enumerate(((0.02, 12), (0.3, 24), (1.0, 40), (3.0, 16)))
]
# llama.cpp's quantizer's K types need rows a multiple of 256: the same cases at d_model and d_ff 256, 4 heads.
ROWS_OF_256 = [
    case._replace(config=case.config.replace(d_model=256, d_ff=256, n_heads=4, n_kv_heads=4)) for case in ROWS_OF_32
]
N_NEW = 4  # greedy tokens per runq.c case
GRID_ULPS = (2, 4, 8, 16)
GRID_CONDITIONING = (2, 4, 8)


@dataclass
class Row:
    """One implementation on one case."""

    impl: str
    precision: str
    scale: float
    n_layers: int
    floor_units: float = math.nan
    over_spread: float = math.nan
    ratio: float = math.nan
    out_of_range: bool = False
    finite: bool = True
    refused: bool = False  # a black box that declined the prompt (a declared limit)
    kl: float = math.nan
    kl_correct: float = math.nan
    same_top: float = math.nan
    terms: tuple[float, ...] = ()  # error, the floor per ulp, the RoPE floor, the spread

    def ratio_with(self, ulps: float, conditioning: float) -> float:
        """error / bound had the class these constants."""
        error, per_ulp, rope_floor, spread = self.terms
        return error / (per_ulp * ulps + rope_floor + conditioning * spread) if error else 0.0


def _spread(expected: np.ndarray, neighbours: tuple[np.ndarray, ...]) -> float:
    return max(float(np.max(np.abs(n - expected), initial=0.0)) for n in neighbours)


def measure_logits(impl: str, model: Any, p: Precision, case: Case) -> Row:
    tokens = case.token_array()
    o = Oracle(case.config, case.weights(), p)
    expected = o.model.logits(tokens)
    row = Row(impl, p.label, case.scale, case.config.n_layers)
    reason = p.out_of_range(o.trace(tokens), case.config.d_head)
    row.out_of_range = reason is not None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = np.asarray(model.logits(tokens), np.float64)
    row.finite = bool(np.isfinite(found).all())
    if row.out_of_range or not row.finite:
        return row
    neighbours = tuple(m.logits(tokens) for m in o.neighbour_models(p))
    error = float(np.max(np.abs(found - expected)))
    scale = float(np.max(np.abs(expected)))
    row.floor_units = error / (p.eps * scale * p.depth(case.config.n_layers)) if scale else 0.0
    spread = _spread(expected, neighbours)
    row.over_spread = error / spread if spread else (0.0 if error == 0 else math.inf)
    rope = o._rope_positions(case.T)
    row.ratio = error / p.bound(expected, neighbours, rope_positions=rope, n_layers=case.config.n_layers)
    rope_floor = tolerance.EPS32 * rope * scale  # RoPE angles stay float32 in every class
    row.terms = (error, p.eps * p.depth(case.config.n_layers) * scale, rope_floor, spread)
    if p.quantized:
        original = NumpyModel(case.config, case.weights(), np.float64).logits(tokens)
        found_stats = agreement.distribution_agreement(original, found)
        row.kl, row.same_top = found_stats.mean_kl, found_stats.same_top
        correct = o.quantized_logits(tokens)
        row.kl_correct = max(agreement.distribution_agreement(original, q).mean_kl for q in correct)
    return row


def measure_greedy(impl: str, model: Any, p: Precision, case: Case) -> Row:
    """runq.c: each greedy token's shortfall in the dequantized oracle's logits over the tie bound."""
    n_new = min(N_NEW, case.config.n_ctx - 1)
    prompt = case.token_array()[: case.config.n_ctx - n_new]
    row = Row(impl, p.label, case.scale, case.config.n_layers)
    if n_new < 1:
        row.refused = True
        return row
    try:
        picked = np.asarray(model.greedy(prompt, n_new))
    except Unsupported:
        row.refused = True
        return row
    tokens = np.concatenate([prompt, picked])
    o = Oracle(case.config, case.weights(), p)
    expected = o.logits(tokens)[len(prompt) - 1 : -1]
    ratios = []
    for step, token in enumerate(picked):
        values = expected.value[step]
        ratios.append(float(values.max() - values[token]) / expected[step].bound())
    row.ratio = max(ratios)
    original = NumpyModel(case.config, case.weights(), np.float64).logits(tokens)[len(prompt) - 1 : -1]
    row.same_top = float(np.mean(np.argmax(original, axis=-1) == picked))
    return row


def collect(n_cases: int) -> list[Row]:
    rows: list[Row] = []

    def run_all(case: Case) -> None:
        for impl, factory in IMPLEMENTATIONS.items():
            try:
                model = factory(case.config, {k: v.copy() for k, v in case.weights().items()})
            except Unsupported:
                continue
            p = resolve(model.precision)
            if hasattr(model, "logits"):
                rows.append(measure_logits(impl, model, p, case))
            else:
                rows.append(measure_greedy(impl, model, p, case))

    @settings(max_examples=n_cases, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=cases(scales=SCALES, max_n_ctx=64))
    def run(case: Case) -> None:
        run_all(case)

    run()
    for case in ROWS_OF_32 + ROWS_OF_256:
        run_all(case)
    return rows


def _worst(values: list[float]) -> str:
    finite = [v for v in values if not math.isnan(v)]
    return f"{max(finite):.3g}" if finite else "-"


def _quantile(values: list[float], q: float) -> str:
    finite = [v for v in values if not math.isnan(v)]
    return f"{np.quantile(finite, q):.3g}" if finite else "-"


def render(rows: list[Row], n_cases: int, seconds: float) -> str:
    lines = [
        SECTION,
        "",
        f"Machine: {describe()}.  ",
        f"Command: `python benchmarks/precision_calibration.py --write` ({time.strftime('%Y-%m-%d')}), "
        f"{n_cases} cases drawn by the suite's `cases` strategy (derandomized, weight scales "
        f"{', '.join(map(str, SCALES))}, n_ctx <= 64) and 8 cases each with rows of 32 and of 256, "
        f"{seconds / 60:.0f} min.",
        "",
        "Floor units: max |error| / (eps max |expected| depth) on well-conditioned cases (scale <= 0.3); "
        "error / spread: max |error| over the neighbours' largest distance from the oracle; "
        "error / bound: under the class's bound as it stands (<= 1 passes).",
        "",
        "| implementation | class | cases run | out of range (non-finite there) | floor units, median / worst "
        "| error / spread, worst | error / bound, worst |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for impl in IMPLEMENTATIONS:
        mine = [r for r in rows if r.impl == impl and not r.refused]
        if not mine:
            continue
        ran = [r for r in mine if r.finite and not r.out_of_range]
        outside = [r for r in mine if r.out_of_range]
        broke = [r for r in mine if not r.finite and not r.out_of_range]
        well = [r.floor_units for r in ran if r.scale <= WELL_CONDITIONED]
        lines.append(
            f"| {impl} | {mine[0].precision} | {len(ran)} | {len(outside)} ({sum(not r.finite for r in outside)})"
            + (f", {len(broke)} non-finite in range" if broke else "")
            + f" | {_quantile(well, 0.5)} / {_worst(well)} | {_worst([r.over_spread for r in ran])} "
            f"| {_worst([r.ratio for r in ran])} |"
        )
    grid = [(u, k) for u in GRID_ULPS for k in GRID_CONDITIONING]
    lines += [
        "",
        "Worst error / bound per class had it other constants (ulps, conditioning), over every implementation "
        "of the class that returns logits:",
        "",
        "| class | " + " | ".join(f"{u:g}, {k:g}" for u, k in grid) + " |",
        "|---|" + "---:|" * len(grid),
    ]
    for label in dict.fromkeys(r.precision for r in rows if r.terms):
        mine = [r for r in rows if r.precision == label and r.terms]
        worst = [max(r.ratio_with(u, k) for r in mine) for u, k in grid]
        lines.append(f"| {label} | " + " | ".join(f"{w:.3g}" for w in worst) + " |")
    quantized = [r for r in rows if not math.isnan(r.same_top)]
    if quantized:
        lines += [
            "",
            "The quantized classes against the original weights (llama.cpp's statistics): mean KL divergence of "
            "next-token distributions, the model's over the largest of the dequantized oracle's, the class "
            "emulation's and the nudged oracles', and the share of positions with the same top token.",
            "",
            "| implementation | class | cases | mean KL, median / worst (nats) | KL / correct models' KL, worst "
            "| same top token, median / lowest |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for impl in dict.fromkeys(r.impl for r in quantized):
            mine = [r for r in quantized if r.impl == impl]
            kl_ratio = [r.kl / max(r.kl_correct, 1e-12) for r in mine if not math.isnan(r.kl)]
            same = [r.same_top for r in mine]
            lines.append(
                f"| {impl} | {mine[0].precision} | {len(mine)} | {_quantile([r.kl for r in mine], 0.5)} / "
                f"{_worst([r.kl for r in mine])} | {_worst(kl_ratio)} | {np.median(same):.1%} / {min(same):.1%} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=300, help="cases drawn (default 300)")
    parser.add_argument("--write", action="store_true", help="update the section in benchmarks/RESULTS.md")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    rows = collect(args.cases)
    section = render(rows, args.cases, time.perf_counter() - start)
    print(section)
    if args.write:
        write_section(section)


if __name__ == "__main__":
    main()
