"""What the audit's checks read, each built once on first use.

- `Run`s of the NumPy reference on real-shaped models with seeded weights: GPT-2 small (float32) on
  "The capital of France is"'s ids, stories15M (float64) on "Once upon a time"'s; and the GPT-2
  sequence padded to `pad_to` (`verifier.analysis.trace.padding_effect`).
- The real tokenizers (`verifier.formats.tokenizer.find_tokenizer`).
- GPT-2's published `config.json` (`verifier.model.known_models`), and llama2.c's definition of
  stories15M: the preset (llama2.c's README table and model.py's hidden size rule), the header and
  layout of a stories15M-shaped llama2.c file written and read back by `verifier.formats`.
- `transformers` where installed: what `generate` feeds GPT-2, what Llama's KV cache holds, which
  parameters Llama has.
- Trained weights where present: GPT-2 from the Hugging Face cache (never downloaded) or `--gpt2`,
  stories15M.bin from `--stories15m`, $VERIFIER_STORIES15M or the Hugging Face cache
  (karpathy/tinyllamas).

A missing optional input is a reason string (the row says it); an input the user named that cannot
be used raises `AuditError` or the formats' own errors.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verifier import extra
from verifier.analysis.trace import Padding, padding_effect
from verifier.formats import load_checkpoint
from verifier.formats.checkpoint import Checkpoint
from verifier.formats.fileio import open_bounded
from verifier.formats.hf_cache import cached_file
from verifier.formats.llama2c import read_llama2c, write_llama2c
from verifier.formats.llama2c_layout import Header, Segment, layout, read_header
from verifier.formats.sources import SourceError, locate, resolve_repo
from verifier.formats.tokenizer import GPT2_HF_REPOS, Tokenizer, TokenizerNotFound, find_tokenizer
from verifier.messages import BoundedMessage
from verifier.model import stages
from verifier.model.config import ModelConfig, from_hf_dict
from verifier.model.known_models import known_model
from verifier.model.presets import preset
from verifier.model.weights import Weights, init_weights
from verifier.reference import NumpyModel
from verifier.reference.model import KVCache

STORIES15M_ENV = "VERIFIER_STORIES15M"
# The model inputs: GPT-2's ids of "The capital of France is" and llama2.c's of "Once upon a time"
# (BOS first), as the real tokenizers give them (tests/test_tokenizer.py checks both).
CAPITAL_TEXT = "The capital of France is"
STORY_TEXT = "Once upon a time"
GPT2_TOKENS = (464, 3139, 286, 4881, 318)
STORY_TOKENS = (1, 9038, 2501, 263, 931)
PARIS = 6342  # GPT-2's id of " Paris"
NO_TOKENIZER = "no {} tokenizer (set VERIFIER_DATA_DIR or --tokenizer)"
NO_GPT2 = (
    "needs GPT-2's trained weights: openai-community/gpt2 in the Hugging Face cache (never downloaded here) "
    "or --gpt2 DIR"
)
# Where llama2.c's author publishes the trained file on the Hugging Face hub (looked for in the cache only).
STORIES15M_HF = ("karpathy/tinyllamas", "stories15M.bin")
STORIES15M_HINT = f"--stories15m PATH, ${STORIES15M_ENV} or {STORIES15M_HF[0]} in the Hugging Face cache"
NO_STORIES15M = f"needs llama2.c's trained stories15M.bin: {STORIES15M_HINT}"


class AuditError(BoundedMessage, ValueError):
    """An input the user named for the audit that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Run:
    """The reference with seeded weights, traced on one sequence [T]; see `verifier.model.stages`."""

    name: str
    text: str
    config: ModelConfig
    weights: Weights
    model: NumpyModel
    tokens: np.ndarray
    trace: dict[str, np.ndarray]

    @property
    def T(self) -> int:  # noqa: N802  (T, the sequence length, as in every shape of the suite)
        return len(self.tokens)

    def stage(self, op: str, layer: int = 0) -> np.ndarray:
        """A layer's stage: [T, d] or per head [n_heads, T, d_head]."""
        return self.trace[stages.layer_stage(layer, op)]

    def weight(self, name: str, layer: int = 0) -> np.ndarray:
        """A weight of a layer by its name inside the layer (`attn.c_attn.weight`, `mlp.gate_proj.weight`)."""
        prefix = "transformer.h." if self.config.family == "gpt2" else "model.layers."
        return self.weights[f"{prefix}{layer}.{name}"]

    @functools.cached_property
    def decoded(self) -> Decoded:
        """Generation's view: the tokens fed one at a time through the reference's KV cache."""
        cache: KVCache | None = None
        lengths, logits = [], np.empty(0)
        for token in self.tokens:
            step, cache = self.model.decode(np.array([token]), cache)
            logits = step[-1]
            lengths.append(cache.length)
        assert cache is not None  # a run has at least one token
        return Decoded(logits, tuple(lengths), cache)


@dataclass(frozen=True)
class Decoded:
    """A run decoded token by token: the last step's logits [V] (the next token's), the cache length
    after each step, and the final cache (`verifier.reference.model.KVCache`)."""

    next_logits: np.ndarray
    lengths: tuple[int, ...]
    cache: KVCache


def _run(name: str, text: str, seed: int, tokens: tuple[int, ...], dtype: type) -> Run:
    config = preset(name)
    weights = init_weights(config, seed=seed, dtype=dtype)
    model = NumpyModel(config, weights, dtype)
    ids = np.array(tokens)
    return Run(name, text, config, weights, model, ids, model.trace(ids))


@dataclass(frozen=True)
class Published:
    """A model's published config.json: the suite's config of it, the fields, and where it is published."""

    config: ModelConfig
    fields: dict[str, Any]
    source: str


@dataclass(frozen=True)
class Llama2cFile:
    """A llama2.c model file: where it is, its header, its tensors in file order, and its size."""

    path: str
    header: Header
    segments: tuple[Segment, ...]
    size: int

    @property
    def stored_values(self) -> int:
        return sum(s.count for s in self.segments)

    def count(self, key: str) -> int:
        return sum(s.count for s in self.segments if s.key == key)

    def segment(self, key: str) -> Segment:
        return next(s for s in self.segments if s.key == key)


def _read_llama2c_file(path: Path) -> Llama2cFile:
    with open_bounded(path) as reader:
        header = read_header(reader)  # checks every field and the file size
        return Llama2cFile(str(path), header, tuple(layout(header)), reader.size)


class Inputs:
    """The inputs of every check, each built on first use (see the module docstring)."""

    def __init__(
        self,
        *,
        tokenizer_path: str | Path | None = None,
        pad_to: int = 1024,
        seed: int = 0,
        gpt2: str | None = None,
        stories15m: str | Path | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        n_ctx = preset("gpt2").n_ctx
        if not len(GPT2_TOKENS) <= pad_to <= n_ctx:
            raise AuditError(
                f"--pad must be between the {len(GPT2_TOKENS)} tokens and GPT-2's n_ctx={n_ctx}, found {pad_to}"
            )
        self.tokenizer_path = tokenizer_path
        self.pad_to = pad_to
        self.seed = seed
        self.gpt2_spec = gpt2
        self.stories15m_path = stories15m if stories15m is not None else os.environ.get(STORIES15M_ENV) or None
        self._progress = progress or (lambda message: None)

    def load_named(self) -> None:
        """Read what the user named (--tokenizer, --gpt2, --stories15m or $VERIFIER_STORIES15M) now, so that
        a path that cannot be used fails before the long work."""
        if self.tokenizer_path is not None:
            _ = self.gpt2_tokenizer
        if self.gpt2_spec is not None:
            _ = self.real_gpt2
        if self.stories15m_path is not None:
            _ = self.stories15m

    # ---- seeded runs of the reference --------------------------------------------------------

    @functools.cached_property
    def gpt2(self) -> Run:
        """GPT-2 small (124M) with seeded weights, float32, on "The capital of France is"."""
        self._progress(f"GPT-2 small with seeded weights (seed {self.seed}), float32, 5 tokens")
        return _run("gpt2", CAPITAL_TEXT, self.seed, GPT2_TOKENS, np.float32)

    @functools.cached_property
    def story(self) -> Run:
        """stories15M with seeded weights, float64, on "Once upon a time"."""
        self._progress(f"stories15M with seeded weights (seed {self.seed}), float64, 5 tokens")
        return _run("llama2c-stories15M", STORY_TEXT, self.seed, STORY_TOKENS, np.float64)

    @functools.cached_property
    def padding(self) -> Padding:
        """The GPT-2 run's tokens padded to `pad_to` with <|endoftext|>, against the unpadded run."""
        self._progress(f"GPT-2 small padded to {self.pad_to} positions")
        return padding_effect(self.gpt2.model, self.gpt2.tokens, self.pad_to)

    # ---- tokenizers --------------------------------------------------------------------------

    @functools.cached_property
    def gpt2_tokenizer(self) -> Tokenizer | str:
        """GPT-2's tokenizer, or why there is none (a --tokenizer that cannot be read raises)."""
        try:
            return find_tokenizer("gpt2", 50257, self.tokenizer_path)
        except TokenizerNotFound:
            return NO_TOKENIZER.format("GPT-2")

    @functools.cached_property
    def llama_tokenizer(self) -> Tokenizer | str:
        """llama2.c's tokenizer.bin (32,000 pieces), or why there is none."""
        try:
            return find_tokenizer("llama", 32000)
        except TokenizerNotFound:
            return NO_TOKENIZER.format("llama2.c").replace(" or --tokenizer", "")

    # ---- published definitions ---------------------------------------------------------------

    @functools.cached_property
    def gpt2_published(self) -> Published:
        """openai-community/gpt2's published config.json."""
        known = known_model("gpt2")
        return Published(from_hf_dict(known.fields), known.fields, known.source)

    @functools.cached_property
    def llama2c_written(self) -> Llama2cFile:
        """A stories15M-shaped llama2.c file (version 0, as llama2.c's export writes stories15M.bin),
        written by `verifier.formats` from the preset and its header and layout read back."""
        config = preset("llama2c-stories15M")
        self._progress("a stories15M-shaped llama2.c file, written and read back")
        with tempfile.TemporaryDirectory(prefix="verifier-audit-") as tmp:
            path = Path(tmp) / "stories15M-shaped.bin"
            write_llama2c(path, config, init_weights(config, seed=self.seed), version=0)
            written = _read_llama2c_file(path)
        return dataclasses.replace(written, path="a stories15M-shaped file written by verifier.formats")

    @functools.cached_property
    def stories15m(self) -> tuple[Llama2cFile, Checkpoint] | str:
        """The real stories15M.bin (header, layout and weights), or why there is none."""
        if self.stories15m_path is not None:
            path = Path(self.stories15m_path)
        else:
            cached = cached_file(*STORIES15M_HF)
            if cached is None:
                return NO_STORIES15M
            path = cached
        self._progress(f"llama2.c's stories15M.bin at {path}")
        file = _read_llama2c_file(path)
        h = file.header
        if h.version != 0:
            raise AuditError(
                f"{path}: expected the version 0 file llama2.c publishes as stories15M.bin, found version {h.version}"
            )
        if (h.dim, h.n_layers) != (288, 6):
            raise AuditError(
                f"{path}: not llama2.c's stories15M: expected a header with dim 288 and n_layers 6, "
                f"found {h.describe()}"
            )
        return file, read_llama2c(path)

    @functools.cached_property
    def real_gpt2(self) -> Checkpoint | str:
        """GPT-2 small's trained weights from --gpt2 or the Hugging Face cache, or why there are none."""
        if self.gpt2_spec is not None:
            path = locate(self.gpt2_spec)  # named by the user: SourceError if it is not there
        else:
            for repo in GPT2_HF_REPOS:
                try:
                    path = resolve_repo(repo)
                    break
                except SourceError:
                    continue
            else:
                return NO_GPT2
        self._progress(f"GPT-2's trained weights at {path}")
        checkpoint = load_checkpoint(path)
        c = checkpoint.config
        if (c.family, c.vocab_size, c.d_model, c.n_layers, c.n_heads) != ("gpt2", 50257, 768, 12, 12):
            raise AuditError(
                f"{path}: not GPT-2 small: expected a gpt2 model with vocab_size 50257, d_model 768, 12 layers and "
                f"12 heads, found {c.family}, {c.vocab_size}, {c.d_model}, {c.n_layers}, {c.n_heads}"
            )
        return checkpoint

    # ---- transformers ------------------------------------------------------------------------

    @functools.cached_property
    def transformers(self) -> str | None:
        """None if transformers and torch are installed, else why the claims that need them skip."""
        return extra.missing("the comparison with transformers")

    @functools.cached_property
    def generation_inputs(self) -> tuple[tuple[int, ...], ...]:
        """The input_ids shape of every forward pass of transformers' greedy `generate` on a GPT-2 with
        n_ctx 1,024 and GPT-2's vocabulary (narrow widths: the loop does not depend on them), given the
        5 tokens and asked for 3 more."""
        import torch

        from verifier.formats.hf import build_model

        config = preset("gpt2").replace(d_model=64, n_heads=4, n_kv_heads=4, d_ff=256, n_layers=2)
        model = build_model(config, init_weights(config, seed=self.seed))
        shapes: list[tuple[int, ...]] = []

        def record(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            ids = kwargs["input_ids"] if kwargs.get("input_ids") is not None else args[0]
            shapes.append(tuple(ids.shape))

        model.transformer.register_forward_pre_hook(record, with_kwargs=True)
        ids = torch.tensor([GPT2_TOKENS])
        with torch.no_grad():
            model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False, pad_token_id=50256
            )
        return tuple(shapes)

    @functools.cached_property
    def hf_llama(self) -> tuple[dict[str, np.ndarray], tuple[str, ...], tuple[str, ...]]:
        """transformers' LlamaForCausalLM holding the story run's weights (float32), run on its tokens
        with use_cache: layer 0's cached keys and values [n_kv_heads, T, d_head], the names of its
        parameters and of its buffers."""
        import torch

        from verifier.formats.hf import build_model

        run = self.story
        model = build_model(run.config, {k: v.astype(np.float32) for k, v in run.weights.items()})
        with torch.no_grad():
            cache = model(torch.from_numpy(run.tokens[None]), use_cache=True).cache
        # transformers 5 keeps a cache's tensors per layer; earlier versions index (keys, values) pairs.
        keys, values = (cache.layers[0].keys, cache.layers[0].values) if hasattr(cache, "layers") else cache[0]
        cached = {"keys": keys[0].double().numpy(), "values": values[0].double().numpy()}
        return cached, tuple(n for n, _ in model.named_parameters()), tuple(n for n, _ in model.named_buffers())
