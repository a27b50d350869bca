"""`verifier trace MODEL`: the life of a tensor through the reference, stage by stage."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from verifier.analysis import trace, trace_plot
from verifier.cli import arguments
from verifier.formats import checkpoint_config, load_checkpoint
from verifier.formats.data import DATA_DIR_ENV
from verifier.formats.sources import locate, names_preset
from verifier.formats.tokenizer import Tokenizer, TokenizerNotFound, find_tokenizer
from verifier.model.config import FAMILIES, ModelConfig
from verifier.model.presets import PRESETS
from verifier.model.weights import WeightMap, init_weights

# GPT-2's example is the articles'; the Llama-layout families share llama2.c's.
DEFAULT_TEXT = {family: "The capital of France is" if family == "gpt2" else "Once upon a time" for family in FAMILIES}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "trace",
        help="the life of a tensor: each stage's shape, the weights it meets, its values",
        description="Run one sequence through the NumPy reference and print every stage: its shape, the weights "
        "it meets and their shapes, and its leading values; then the next token, RoPE's tables (Llama) and "
        "the KV cache growing one row per token. A checkpoint brings its weights; a preset or a config.json "
        "gets seeded random ones.",
    )
    p.add_argument(
        "model",
        help="a preset (gpt2, llama2c-stories15M, ...), a checkpoint file or directory, a Hugging Face repo id "
        "in the local cache, or a config.json",
    )
    given = p.add_mutually_exclusive_group()
    given.add_argument(
        "--text",
        help="text, tokenized with the model's tokenizer (default: "
        + f"{DEFAULT_TEXT['gpt2']!r} for gpt2, {DEFAULT_TEXT['llama']!r} for the others"
        + ")",
    )
    given.add_argument("--tokens", help="token ids, e.g. 464,3139,286 (needs no tokenizer)")
    p.add_argument(
        "--tokenizer",
        metavar="PATH",
        help=f"a GPT-2 tokenizer directory (vocab.json, merges.txt) or llama2.c's tokenizer.bin "
        f"(default: the model's directory, ${DATA_DIR_ENV}, then the Hugging Face cache)",
    )
    p.add_argument("--pad", type=int, metavar="N", help="show the shapes of the sequence padded to N positions")
    p.add_argument("--layers", choices=("first", "all"), default="first", help="show the first layer (default) or all")
    p.add_argument(
        "--seed", type=arguments.seed, default=0, help="seed of the random weights of a preset or config.json"
    )
    p.add_argument("--download", action="store_true", help="download a repo id that is not in the local cache")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--plot", metavar="FILE", help="also draw the flow to FILE (.svg or .png)")
    p.set_defaults(func=run)


def parse_tokens(text: str) -> list[int]:
    """Token ids from `464,3139,286`, `464 3139 286` or `[464, 3139, 286]`."""
    parts = [p for p in re.split(r"[\s,]+", text.strip().strip("[]")) if p]
    if not parts or not all(re.fullmatch(r"\d+", p) for p in parts):
        raise trace.TraceError(f"--tokens must be non-negative integers separated by commas or spaces, found {text!r}")
    too_large = next((p for p in parts if len(p) > 18 and int(p) > np.iinfo(np.int64).max), None)
    if too_large is not None:  # before NumPy, which cannot hold it (OverflowError); the vocabulary check comes later
        shown = too_large if len(too_large) <= 40 else too_large[:40] + "..."
        raise trace.TraceError(f"--tokens: {shown} is no token id (ids are below the vocabulary size)")
    return [int(p) for p in parts]


def _model(args: argparse.Namespace) -> tuple[ModelConfig, WeightMap, str, Path | None]:
    """The config, the weights, where the weights come from, and the model's directory (None for a preset).

    A preset or a `config.json` gets seeded random weights; any other file, directory or repo id is a
    checkpoint, read with its weights.
    """
    seeded = f"seeded random (init_weights seed {args.seed}): the shapes and the flow are the model's; "
    seeded += "the next token is not a trained model's"
    if names_preset(args.model):
        config = PRESETS[args.model]
        return config, init_weights(config, seed=args.seed), seeded, None
    path = locate(args.model, download=args.download)
    directory = path if path.is_dir() else path.parent
    if path.suffix == ".json":
        config = checkpoint_config(path)
        return config, init_weights(config, seed=args.seed), seeded, directory
    checkpoint = load_checkpoint(path)
    version = f" v{checkpoint.version}" if checkpoint.version is not None else ""
    return checkpoint.config, checkpoint.weights, f"{checkpoint.path} ({checkpoint.format}{version})", directory


def _tokens(
    args: argparse.Namespace, config: ModelConfig, model_dir: Path | None
) -> tuple[list[int], Tokenizer | None]:
    """The ids to trace and the tokenizer that names them (None: ids given, no tokenizer found)."""
    if args.tokens is not None:
        tokens = parse_tokens(args.tokens)
        try:
            return tokens, find_tokenizer(config.family, config.vocab_size, args.tokenizer, model_dir=model_dir)
        except TokenizerNotFound:
            return tokens, None
    text = DEFAULT_TEXT[config.family] if args.text is None else args.text
    try:
        tokenizer = find_tokenizer(config.family, config.vocab_size, args.tokenizer, model_dir=model_dir)
    except TokenizerNotFound as e:
        raise TokenizerNotFound(
            f"cannot tokenize {text!r}: {e}. Give token ids with --tokens (e.g. --tokens 1,2,3), "
            f"or a tokenizer with --tokenizer PATH or ${DATA_DIR_ENV}"
        ) from None
    tokens = tokenizer.encode(text)
    if not tokens:
        raise trace.TraceError(f"--text {text!r} gives no tokens to trace: give some text, or ids with --tokens")
    return tokens, tokenizer


def run(args: argparse.Namespace) -> int:
    if args.plot:
        trace_plot.plot_format(args.plot)  # a bad file name fails before the work
    config, weights, weights_source, model_dir = _model(args)
    tokens, tokenizer = _tokens(args, config, model_dir)
    life = trace.life_of_a_tensor(
        args.model,
        config,
        weights,
        tokens,
        weights_source=weights_source,
        tokenizer=tokenizer,
        layers=args.layers,
        pad=args.pad,
    )
    print(json.dumps(trace.to_json(life), indent=2) if args.json else trace.render(life))
    if args.plot:
        print(f"plot written to {trace_plot.plot(life, args.plot)}", file=sys.stderr)
    return 0
