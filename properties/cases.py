"""Hypothesis strategies of the property suite's inputs: a drawn config (`verifier.properties.strategies`)
with the seed and scale of its weights and its tokens, then chunkings, edits, batches and prompts on
them. Separate from the configs, which say which models are drawn; these say what each is run on.

Every draw is labelled, so a failure names its inputs. A `Case` is one reproducible model input:
a config, the seed and scale of its weights (`verifier.model.weights.init_weights`), and the tokens.
Sizes stay small for speed, but reach the regimes where bugs hide: grouped-query attention,
odd vocab sizes, head sizes 2..64, 1..4 layers, sequences up to the context limit (256 here),
weight scales from 0.003 (small activations, where a norm's eps matters) to 3 (attention scores
in the hundreds, where a softmax that does not subtract its max overflows).

With a fixed checkpoint (`pytest --checkpoint`, `verifier.plugin.checkpoint`), `cases` draws only
what is still free: the checkpoint's config and weights are fixed, token sequences are real text
(where the checkpoint's tokenizer is known: "The capital of France is" first) or drawn ids, of
lengths up to the context limit; chunkings, batches, edits and prompts are drawn on them as usual.
Pinned cases are not the checkpoint's, so they are rejected then.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import numpy as np
from hypothesis import reject
from hypothesis import strategies as st

from verifier.model.config import FAMILIES, Family, ModelConfig, RopeScaling
from verifier.model.weights import LazyWeights, WeightMap, Weights, init_weights
from verifier.plugin import checkpoint
from verifier.plugin.checkpoint import FixedCheckpoint
from verifier.properties.recent import KEPT
from verifier.properties.strategies import (
    MAX_N_CTX,
    ORIGINAL_N_CTX,
    ROPE_FACTORS,
    SCALING_FAMILIES,
    SHORT_N_CTX,
    SOFTCAP_FAMILIES,
    WINDOW_FAMILIES,
    configs,
)

SCALES = (0.02, 0.003, 0.3, 1.0, 3.0)
LARGE_SCALES = (1.0, 3.0, 10.0)
# Real text for a fixed checkpoint whose tokenizer is known; the articles' prompt first (drawn first).
REAL_TEXTS = (
    "The capital of France is",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine.",
    "def softmax(x):\n    e = np.exp(x - x.max())\n    return e / e.sum()\n",
    "In 1905, Albert Einstein published four papers that changed physics: on the photoelectric effect, "
    "Brownian motion, special relativity and the equivalence of mass and energy.",
)


class Case(NamedTuple):
    """One reproducible input: `init_weights(config, seed=seed, scale=scale)` run on `tokens`, or
    the weights of a fixed `checkpoint` (whose config `config` is)."""

    config: ModelConfig
    seed: int
    scale: float
    tokens: tuple[int, ...]
    checkpoint: FixedCheckpoint | None = None

    @property
    def T(self) -> int:  # noqa: N802 - the suite's name for the sequence length
        return len(self.tokens)

    def token_array(self) -> np.ndarray:
        """The tokens as int64 [T]."""
        return np.array(self.tokens, dtype=np.int64)

    def weights(self) -> WeightMap:
        if self.checkpoint is not None:
            return self.checkpoint.weights
        return _weights(self.config, self.seed, self.scale)

    def describe(self) -> str:
        """A snippet that rebuilds this case, for `hypothesis.note`."""
        if self.checkpoint is not None:
            return (
                f"checkpoint = {self.checkpoint.describe()}\n"
                f"weights = verifier.formats.load_checkpoint({str(self.checkpoint.path)!r}).weights\n"
                f"tokens = np.array({list(self.tokens)})"
            )
        return (
            f"config = {self.config!r}\n"
            f"weights = init_weights(config, seed={self.seed}, scale={self.scale})\n"
            f"tokens = np.array({list(self.tokens)})"
        )


def weight_bytes(weights: WeightMap) -> int:
    """The bytes a weight set holds (a `LazyWeights`, a mapped checkpoint: its size in float32, not read)."""
    if isinstance(weights, LazyWeights):
        return 4 * sum(int(np.prod(shape)) for shape in weights.shapes.values())
    return sum(np.asarray(w).nbytes for w in weights.values())


def _weights(config: ModelConfig, seed: int, scale: float) -> Weights:
    """init_weights, kept while recent (`recent.KEPT`): properties, and the next model, ask for the same."""
    return KEPT.get(
        ("weights", config, seed, scale), lambda: init_weights(config, seed=seed, scale=scale), weight_bytes
    )


@st.composite
def windowed_cases(draw: st.DrawFn, *, at_least_T: bool = False, **kwargs: Any) -> Case:
    """A case (see `cases`) of a family with sliding windows, every layer sliding. The window W fits
    the reach it is checked at: the last position's receptive field, n_layers (W - 1) keys back,
    ends before the first token (n_layers (W - 1) + 1 < T); or, if `at_least_T`, W >= T."""
    case = draw(cases(WINDOW_FAMILIES, **{"min_T": 2, **kwargs}), label="case")
    c = case.config
    if at_least_T:
        window = draw(st.integers(max(2, case.T), case.T + 8), label="sliding_window >= T")
    else:
        widest = (case.T - 2) // c.n_layers + 1
        if widest < 2:
            reject()  # too short for a window of 2 (windows of 1: see `drawn_switches`) to end before the first token
        window = draw(st.integers(2, widest), label="sliding_window")
    return case._replace(config=c.replace(sliding_window=window, layer_types=()))


@st.composite
def capped_cases(
    draw: st.DrawFn, *, attn_caps: tuple[float, ...], final_caps: tuple[float, ...], **kwargs: Any
) -> Case:
    """A case (see `cases`) of a family with soft-caps, at large weight scales (where caps bite),
    with an attention cap from `attn_caps` and a final one from `final_caps`."""
    case = draw(cases(SOFTCAP_FAMILIES, **{"scales": LARGE_SCALES, **kwargs}), label="case")
    caps = {
        "attn_softcap": draw(st.sampled_from(attn_caps), label="attn_softcap"),
        "final_softcap": draw(st.sampled_from(final_caps), label="final_softcap"),
    }
    return case._replace(config=case.config.replace(**caps))


@st.composite
def rope_scaled_cases(draw: st.DrawFn, **kwargs: Any) -> Case:
    """A case (see `cases`) of a family with RoPE scaling, scaled (linear or llama3) with an original
    context shorter than the sequence, so that its last positions pass it."""
    case = draw(cases(SCALING_FAMILIES, **{"min_T": 2, **kwargs}), label="case")
    factor = draw(st.sampled_from(ROPE_FACTORS), label="rope scaling factor")
    if draw(st.sampled_from(("llama3", "linear")), label="rope scaling kind") == "linear":
        scaling = RopeScaling("linear", factor)
    else:
        low, high = draw(st.sampled_from(((1.0, 4.0), (1.0, 2.0), (2.0, 8.0))), label="low/high freq factors")
        shorter = [n for n in ORIGINAL_N_CTX if n < case.T] or [max(1, case.T // 2)]
        scaling = RopeScaling("llama3", factor, low, high, draw(st.sampled_from(shorter), label="original_n_ctx"))
    return case._replace(config=case.config.replace(rope_scaling=scaling))


def token_lists(config: ModelConfig, length: int) -> st.SearchStrategy[tuple[int, ...]]:
    """`length` token ids in [0, vocab_size)."""
    ids = st.integers(0, config.vocab_size - 1)
    return st.lists(ids, min_size=length, max_size=length).map(tuple)


@st.composite
def cases(
    draw: st.DrawFn,
    families: tuple[Family, ...] = FAMILIES,
    *,
    scales: tuple[float, ...] = SCALES,
    min_T: int = 1,
    full_context: bool = False,
    max_n_ctx: int = MAX_N_CTX,
    room: int = 0,
) -> Case:
    """A config, weights and a sequence of T tokens, min_T <= T <= n_ctx - room (T = n_ctx - room
    when `full_context`); `room` leaves positions free for tokens the property adds later. With a
    fixed checkpoint, its config and weights and `checkpoint_tokens` (`max_n_ctx` caps T unless
    `full_context`)."""
    fixed = checkpoint.current()
    if fixed is not None:
        if fixed.config.family not in families:
            reject()  # the property's `requires(family=...)` skips it first, saying so
        longest = fixed.config.n_ctx - room if full_context else min(max_n_ctx, fixed.config.n_ctx) - room
        if longest < min_T:
            reject()
        tokens = draw(checkpoint_tokens(fixed, min_T, longest, exactly=full_context), label="checkpoint tokens")
        return Case(fixed.config, seed=0, scale=0.0, tokens=tokens, checkpoint=fixed)
    config = draw(configs(families, max_n_ctx=max_n_ctx, min_n_ctx=min_T + room), label="config")
    longest = config.n_ctx - room
    T = longest if full_context else draw(st.integers(min_T, longest), label="T")
    return Case(
        config=config,
        seed=draw(st.integers(0, 2**16), label="weight seed"),
        scale=draw(st.sampled_from(scales), label="weight scale"),
        tokens=draw(token_lists(config, T), label="tokens"),
    )


@st.composite
def checkpoint_tokens(
    draw: st.DrawFn, fixed: FixedCheckpoint, min_T: int, max_T: int, *, exactly: bool
) -> tuple[int, ...]:
    """Tokens for `fixed`'s config, min_T <= T <= max_T (T = max_T if `exactly`): one of REAL_TEXTS (its
    ids repeated or cut to fit), where the checkpoint's tokenizer is known, or ids drawn uniformly."""
    texts = _encoded(fixed)
    if texts and draw(st.sampled_from(("real text", "drawn ids")), label="tokens are") == "real text":
        ids = draw(st.sampled_from(texts), label="text")
        T = max_T if exactly else min(max(len(ids), min_T), max_T)
        return tuple(itertools.islice(itertools.cycle(ids), T))
    # Short sequences are cheap at full size; one draw in two reaches up to max_T.
    short = st.integers(min_T, max(min_T, min(SHORT_N_CTX, max_T)))
    T = max_T if exactly else draw(st.one_of(short, st.integers(min_T, max_T)), label="T")
    return draw(token_lists(fixed.config, T), label="tokens")


_ENCODED: dict[FixedCheckpoint, tuple[tuple[int, ...], ...]] = {}


def _encoded(fixed: FixedCheckpoint) -> tuple[tuple[int, ...], ...]:
    """REAL_TEXTS in `fixed`'s tokenizer, encoded once; none without a tokenizer."""
    if fixed not in _ENCODED:
        tokenizer = fixed.tokenizer
        _ENCODED[fixed] = () if tokenizer is None else tuple(tuple(tokenizer.encode(t)) for t in REAL_TEXTS)
    return _ENCODED[fixed]


@st.composite
def chunkings(draw: st.DrawFn, T: int) -> tuple[int, ...]:
    """Chunk lengths summing to T: a prefill then single steps, or arbitrary cuts."""
    if T == 1:
        return (1,)
    if draw(st.booleans(), label="prefill then single steps"):
        prefill = draw(st.integers(1, T), label="prefill length")
        return (prefill,) + (1,) * (T - prefill)
    cuts = draw(st.sets(st.integers(1, T - 1), max_size=min(T - 1, 8)), label="cuts")
    bounds = [0, *sorted(cuts), T]
    return tuple(b - a for a, b in itertools.pairwise(bounds))


class Chunked(NamedTuple):
    """A case whose tokens are decoded in chunks of these lengths (summing to T), each after the
    cache of the ones before."""

    case: Case
    chunks: tuple[int, ...]


@st.composite
def chunked_cases(draw: st.DrawFn, **kwargs: Any) -> Chunked:
    """A case (see `cases`) and a chunking of its tokens."""
    case = draw(cases(**kwargs), label="case")
    return Chunked(case, draw(chunkings(case.T), label="chunks"))


class Edited(NamedTuple):
    """A case and one edit of its tokens: `token` (a different id) at `position`."""

    case: Case
    position: int
    token: int

    def edited_tokens(self) -> np.ndarray:
        tokens = self.case.token_array()
        tokens[self.position] = self.token
        return tokens


@st.composite
def edited_cases(draw: st.DrawFn, **kwargs: Any) -> Edited:
    """A case (see `cases`), a position in [0, T) and a token id other than the one there."""
    case = draw(cases(**kwargs), label="case")
    position = draw(st.integers(0, case.T - 1), label="edited position")
    shift = draw(st.integers(1, case.config.vocab_size - 1), label="new token - old token (mod vocab_size)")
    return Edited(case, position, (case.tokens[position] + shift) % case.config.vocab_size)


class Batched(NamedTuple):
    """A case whose tokens are the first row of a batch; `rows` are the others. Rows shorter
    than T are left-padded with token 0 and masked."""

    case: Case
    rows: tuple[tuple[int, ...], ...]

    def all_rows(self) -> list[tuple[int, ...]]:
        return [self.case.tokens, *self.rows]

    def padded(self) -> tuple[np.ndarray, np.ndarray]:
        """tokens [B, T] (left-padded with 0) and the attention mask [B, T] (1 = real token)."""
        rows, T = self.all_rows(), self.case.T
        tokens = np.zeros((len(rows), T), dtype=np.int64)
        mask = np.zeros((len(rows), T), dtype=np.int64)
        for b, row in enumerate(rows):
            tokens[b, T - len(row) :] = row
            mask[b, T - len(row) :] = 1
        return tokens, mask


@st.composite
def batched_cases(draw: st.DrawFn, *, ragged: bool, max_rows: int = 3, **kwargs: Any) -> Batched:
    """A case (see `cases`) and 1..max_rows other rows: of length T, or of lengths 1..T if `ragged`."""
    case = draw(cases(**kwargs), label="case")
    n_rows = draw(st.integers(1, max_rows), label="other rows")
    lengths = [draw(st.integers(1, case.T), label=f"length of row {b}") if ragged else case.T for b in range(n_rows)]
    rows = tuple(draw(token_lists(case.config, n), label=f"row {b + 1}") for b, n in enumerate(lengths))
    return Batched(case, rows)


class Prompted(NamedTuple):
    """A case whose tokens are a prompt, to be continued by `n_new` greedy tokens (T + n_new <= n_ctx)."""

    case: Case
    n_new: int


@st.composite
def prompted_cases(draw: st.DrawFn, *, max_new: int = 8, **kwargs: Any) -> Prompted:
    """A prompt case (see `cases`) with room for 1..max_new generated tokens."""
    n_new = draw(st.integers(1, max_new), label="n_new")
    return Prompted(draw(cases(room=n_new, **kwargs), label="prompt case"), n_new)
