"""`verifier kl`: how far a model's next-token distributions are from the float64 oracle's over a real
text, in the statistics of llama.cpp's KL-divergence tool (`verifier.analysis.agreement.distribution_agreement`).

The text (default: the bundled `verifier/data/text/sample.txt`) is tokenized by the family's real
tokenizer (GPT-2's BPE for gpt2, llama2.c's Llama 2 vocabulary for the others) and run through the
model and the oracle: with `--checkpoint`, on its config and weights (the user's real model); else,
per family, on the suite's probe config of that family with the tokenizer's vocabulary and seeded
weights (`--seed`, `--scale`), which shows how a precision class moves the distributions, not how a
trained model's would move. The probe config is in the first shape the model declares (`Constraints`)
that admits the family: a block-quantized model (llama.cpp's Q8_0) gets one whose matrix widths fill
its blocks. A model that refuses a config is listed with its reason; one that raises on the text, with
the error (exit status 1). Beside a model of a narrower class than float32, the same statistics of the
class alone (the reference run at it: its rounding, a quantized file's own weights) tell what the
number format moves from what the engine does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from verifier.analysis.agreement import DistributionAgreement, distribution_agreement
from verifier.cli import arguments
from verifier.fixtures import plugin
from verifier.formats import load_checkpoint
from verifier.formats.tokenizer import find_tokenizer
from verifier.model.config import FAMILIES, ModelConfig
from verifier.model.weights import WeightMap, init_weights
from verifier.plugin.contract import ContractViolation, build_checked
from verifier.plugin.interface import Constraints, Unsupported
from verifier.plugin.probes import FREE_SHAPE, PROBE_KINDS, probe_config
from verifier.plugin.registry import ModelSpec, load_spec
from verifier.reference import NumpyModel

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "text" / "sample.txt"


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "kl",
        help="KL divergence and top-token statistics of a model against the oracle over a real text",
        description="Run a model and the float64 oracle over a text tokenized by a real tokenizer (GPT-2's BPE for "
        "gpt2, llama2.c's Llama 2 vocabulary for the other families) and "
        "print llama.cpp's KL-divergence statistics: mean, median, 99th percentile and max KL, how often the top "
        "token is the same, and the change in the next token's probability.",
    )
    p.add_argument("--model", action="append", required=True, metavar="SPEC", help="a model; repeatable")
    p.add_argument(
        "--families", type=arguments.families, default=list(FAMILIES), metavar="gpt2,llama,...",
        help="the families, seeded weights on each (default: all; ignored with --checkpoint)",
    )  # fmt: skip
    p.add_argument("--checkpoint", type=arguments.nonempty, metavar="PATH", help="a checkpoint's config and weights")
    p.add_argument("--text", type=arguments.nonempty, metavar="FILE", help=f"the text (default: {SAMPLE.name})")
    p.add_argument("--seed", type=arguments.seed, default=0, help="the seed of the drawn weights (default 0)")
    p.add_argument(
        "--scale", type=float, default=0.3,
        help="the drawn weights' standard deviation (default 0.3: peaked next-token distributions, not uniform)",
    )  # fmt: skip
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.set_defaults(func=run)


def seeded_config(family: str, vocab_size: int, n_ctx: int, shape: Constraints = FREE_SHAPE) -> ModelConfig | None:
    """The suite's probe config of `family` (its first kind) in `shape` with a real tokenizer's
    vocabulary, or None if `shape` excludes it."""
    kind = next(k for k, (f, _, _) in PROBE_KINDS.items() if f == family)
    config = probe_config(kind, shape)
    return None if config is None else config.replace(vocab_size=vocab_size, n_ctx=n_ctx)


def _shape(spec: ModelSpec, family: str) -> Constraints:
    """The first shape `spec` declares that admits `family`'s probe config (the free shape if it declares none)."""
    found = [c for c in spec.constraints or (FREE_SHAPE,) if seeded_config(family, 32, 16, c) is not None]
    return found[0] if found else FREE_SHAPE  # none: the free shape, which the model then refuses with its reason


def run(args: argparse.Namespace) -> int:
    plugin.import_fixture_modules()  # the registered names
    arguments.import_from_the_current_directory()  # the user's module.path:factory specs
    specs = [load_spec(m) for m in dict.fromkeys(args.model)]
    text = Path(args.text).read_text(encoding="utf-8") if args.text else SAMPLE.read_text(encoding="utf-8")
    # Each case: a config, its weights, and the models run on it.
    cases: list[tuple[ModelConfig, WeightMap, list[ModelSpec]]] = []
    if args.checkpoint:
        loaded = load_checkpoint(args.checkpoint)
        cases.append((loaded.config, loaded.weights, specs))
    for family in [] if args.checkpoint else args.families:
        vocab = 50257 if family == "gpt2" else 32000
        by_shape: dict[Constraints, list[ModelSpec]] = {}
        for spec in specs:
            by_shape.setdefault(_shape(spec, family), []).append(spec)
        for shape, on_it in by_shape.items():
            config = seeded_config(family, vocab, 1024, shape)
            assert config is not None  # `_shape` chose a shape that admits the family
            cases.append((config, init_weights(config, seed=args.seed, scale=args.scale), on_it))
    rows, status = [], 0
    for config, weights, on_it in cases:
        tokenizer = find_tokenizer(config.family, config.vocab_size)
        tokens = np.array(tokenizer.encode(text)[: config.n_ctx], dtype=np.int64)
        reference = NumpyModel(config, weights, dtype=np.float64).logits(tokens)
        for spec in on_it:
            row: dict[str, Any] = {"model": spec.name, "family": config.family, "tokens": len(tokens)}
            try:
                model = build_checked(spec, config, weights)
                stats = _stats(model, reference, tokens)
                own = _class_stats(model, config, weights, reference, tokens)
            except Unsupported as e:
                row["unsupported"] = str(e) or "it raised Unsupported"
                print(f"{spec.name} on {config.family}: unsupported ({row['unsupported']})")
            except ContractViolation as e:  # one model's error on the text: the others' rows still come
                row["error"] = str(e)
                print(f"{spec.name} on {config.family}: {e}")
                status = 1
            else:
                row |= dataclasses.asdict(stats)
                print(f"{spec.name} on {config.family}: {stats.describe()}")
                if own is not None:  # what the model's number format alone moves, for comparison
                    label = model.precision.label
                    row |= {"class": label, "class_mean_kl": own.mean_kl, "class_same_top": own.same_top}
                    print(f"  its class {label} alone (the reference rounded as it declares): {own.describe()}")
            rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return status


def _class_stats(
    model: Any, config: ModelConfig, weights: WeightMap, reference: np.ndarray, tokens: np.ndarray
) -> DistributionAgreement | None:
    """The statistics of the model's declared class alone: the reference run at the class
    (`Precision.emulation`: its rounding, a quantized file's own weights), or None for float32."""
    if model.precision.rounding is None:
        return None
    return distribution_agreement(reference, model.precision.emulation(config, weights).logits(tokens), tokens)


def _stats(model: Any, reference: np.ndarray, tokens: np.ndarray) -> DistributionAgreement:
    if not model.every_position:
        raise Unsupported("it gives the last position's logits only; the statistics need every position's")
    return distribution_agreement(reference, np.asarray(model.logits(tokens)), tokens)
