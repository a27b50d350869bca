"""The KV cache: decoding a sequence in chunks (a prefill then single steps, or arbitrary
chunks, one row or a batch) gives the logits of one full pass; a cache that exposes its layout
has the documented shape [n_layers, 2, B, S, n_kv_heads, d_head] and that many elements' bytes;
a cache stays usable after decoding from it (branching, restarting, interleaving); and two sequences
decoded in turns keep their own caches, with no state kept in the model between calls. A model that
gives only the last position's logits is compared at the last position of each chunk. A failure
names the first divergent chunk and position (`checks.decode_localizer`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given

from verifier.analysis.divergence import chunk_list
from verifier.plugin.contract import RULES, CheckedModel, build_checked
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, Chunked, cases, chunked_cases
from verifier.properties.models import requires
from verifier.properties.oracle import Expected, oracle
from verifier.properties.pinned_cases import (
    FULL_CONTEXT,
    LENGTH_1,
    ONE_KV_HEAD,
    PUBLISHED_GPT2,
    PUBLISHED_LLAMA,
    RICH_GPT2,
    RICH_LLAMA,
    SINGLE_HEAD,
    pinned,
)

CHUNKED = (
    *(Chunked(case, (8,) + (1,) * 16) for case in (RICH_LLAMA, RICH_GPT2)),
    Chunked(RICH_LLAMA, (3, 9, 1, 11)),
    Chunked(RICH_GPT2, (1, 1, 5, 17)),
    *(Chunked(case, (8,) + (1,) * 16) for case in (PUBLISHED_LLAMA, PUBLISHED_GPT2)),
    Chunked(PUBLISHED_LLAMA, (3, 9, 1, 11)),
    Chunked(PUBLISHED_GPT2, (1, 1, 5, 17)),
    Chunked(LENGTH_1, (1,)),
    Chunked(SINGLE_HEAD, (5, 7)),
    Chunked(ONE_KV_HEAD, (2, 2, 2, 14)),
    Chunked(FULL_CONTEXT, (100, 30, 1, 29)),
)


def _decode_in_chunks(
    model: CheckedModel, tokens: np.ndarray, chunks: tuple[int, ...]
) -> tuple[np.ndarray, list[int], Any]:
    """tokens [T] or [B, T] decoded chunk after chunk -> (the logits the model gives, [..., n, V]; the
    n positions they are at: every one, or each chunk's last; the last cache)."""
    cache, pieces, start = None, [], 0
    for n in chunks:
        logits, cache = model.decode(tokens[..., start : start + n], cache)
        pieces.append(logits)
        start += n
    return np.concatenate(pieces, axis=-2), [p for _, p in checks.decode_positions(model, chunks)], cache


def _given(model: CheckedModel, expected: Expected) -> Expected:
    """The rows of `expected` [..., T, V] that a decode of T tokens gives: all, or the last one."""
    return expected if model.every_position else expected[..., -1:, :]


def _check_layout(model: CheckedModel, cache: Any, case: Case, B: int) -> None:
    """The documented layout, checked where the cache exposes `shape` (and `nbytes`)."""
    __tracebackhide__ = True
    shape = getattr(cache, "shape", None)
    if shape is None:
        return
    c = case.config
    documented = (c.n_layers, 2, B, case.T, c.n_kv_heads, c.d_head)
    if tuple(shape) != documented:
        checks.fail(model, "the cache after decoding", f"has shape {list(shape)}, documented [n_layers, 2, B, S, "
                    f"n_kv_heads, d_head] = {list(documented)}")  # fmt: skip
    nbytes = getattr(cache, "nbytes", None)
    if nbytes is not None and nbytes not in {math.prod(documented) * size for size in (2, 4, 8)}:
        checks.fail(
            model, "the cache's size", f"is {nbytes} bytes for {math.prod(documented)} elements of 2, 4 or 8 bytes"
        )


@requires("decode")
@pinned(*CHUNKED, arg="chunked")
@given(chunked=chunked_cases())
def test_decoding_in_chunks_gives_the_logits_of_one_full_pass(model_spec: ModelSpec, chunked: Chunked) -> None:
    """Decoding in any chunks (a prefill, single steps) through the KV cache gives the logits of one full pass."""
    case = chunked.case
    model = models.build(model_spec, case, "decode")
    tokens = case.token_array()
    found, positions, cache = _decode_in_chunks(model, tokens, chunked.chunks)
    expected = oracle(case).logits(tokens)[positions]
    checks.agree(
        found,
        expected,
        what=f"logits decoded in chunks {chunk_list(chunked.chunks)}",
        model=model,
        localize=checks.decode_localizer(model, oracle(case), tokens, chunked.chunks, found, expected),
    )
    _check_layout(model, cache, case, B=1)


@requires("decode", "batch")
@pinned(*CHUNKED[:8], arg="chunked")
@given(chunked=chunked_cases(max_n_ctx=64))
def test_decoding_a_batch_in_chunks_gives_the_logits_of_one_full_pass(model_spec: ModelSpec, chunked: Chunked) -> None:
    """Decoding a batch in chunks through the KV cache gives the batch's full-pass logits."""
    case = chunked.case
    model = models.build(model_spec, case, "decode", "batch")
    batch = np.stack([case.token_array(), case.token_array()[::-1].copy()])
    found, positions, cache = _decode_in_chunks(model, batch, chunked.chunks)
    expected = oracle(case).logits(batch)[:, positions]
    checks.agree(
        found, expected, what=f"a [2, {case.T}] batch decoded in chunks {chunk_list(chunked.chunks)}", model=model,
        localize=checks.decode_localizer(model, oracle(case), batch, chunked.chunks, found, expected),
    )  # fmt: skip
    _check_layout(model, cache, case, B=2)


@requires("decode")
@pinned(RICH_LLAMA, RICH_GPT2, PUBLISHED_LLAMA, PUBLISHED_GPT2, ONE_KV_HEAD)
@given(case=cases(min_T=2, max_n_ctx=64))
def test_a_cache_stays_usable_after_decoding_from_it(model_spec: ModelSpec, case: Case) -> None:
    """A cache stays usable after decoding from it: continuing it twice with the same chunk gives the same logits."""
    model = models.build(model_spec, case, "decode")
    tokens = case.token_array()
    half = case.T // 2
    prefix, rest = tokens[:half], tokens[half:]
    other = (rest + 1) % case.config.vocab_size
    o = oracle(case)
    rule = f"contract rule 'cache-reusable' ({RULES['cache-reusable']})"

    _, cache = model.decode(prefix)
    first, _ = model.decode(rest, cache)
    model.decode(other, cache)  # a branch from the same cache
    again, _ = model.decode(rest, cache)
    expected_rest = _given(model, o.logits(tokens)[half:])
    checks.agree(again, expected_rest, what=f"{rule}: the same chunk decoded again from one cache", model=model,
                 against=first)  # fmt: skip
    checks.agree(
        first, expected_rest, what="the chunk decoded after the prefix's cache", model=model,
        localize=checks.decode_localizer(model, o, tokens, (case.T - half,), first, expected_rest, cached=half),
    )  # fmt: skip

    model.decode(other)  # another sequence decoded in between: nothing may leak
    restarted, _ = model.decode(tokens, None)
    expected = _given(model, o.logits(tokens))
    checks.agree(restarted, expected, what="decode(tokens, None) after decoding another sequence", model=model,
                 localize=checks.decode_localizer(model, o, tokens, (case.T,), restarted, expected))  # fmt: skip
    interleaved, _ = model.decode(rest, cache)
    checks.agree(
        interleaved, expected_rest, model=model,
        what=f"{rule}: the chunk decoded from a cache kept while another sequence was decoded",
        localize=checks.decode_localizer(model, o, tokens, (case.T - half,), interleaved, expected_rest, cached=half),
    )  # fmt: skip


@requires("decode")
@pinned(RICH_LLAMA, RICH_GPT2, PUBLISHED_LLAMA, PUBLISHED_GPT2, ONE_KV_HEAD)
@given(case=cases(min_T=2, max_n_ctx=64))
def test_two_sequences_decoded_alternately_each_give_their_own_full_pass(model_spec: ModelSpec, case: Case) -> None:
    """Two generations in one model, as a server interleaves them: sequence A prefilled, then B
    (cache=None), then each continued a token at a time from its own cache, in turns; and B
    prefilled again afterwards. A cache must hold its sequence's state and the model none between
    calls: keys kept in the model's buffers (Meta's `self.cache_k[:bsz, start_pos : start_pos +
    seqlen] = xk`, the cache handed back a view of them), a prefill that continues what the model
    last decoded, or a cache that follows the last one decoded all show here."""
    model = models.build(model_spec, case, "decode")
    # with a fixed checkpoint the model is built once: the same instance stands for a new one
    new = model if case.checkpoint else build_checked(model_spec, case.config, case.weights())
    T, o = case.T, oracle(case)
    a = case.token_array()
    b = (a + 1) % case.config.vocab_size  # differs from A at every position
    ha, hb = T // 2, max(1, T // 2 - 1)  # prefills of different lengths: positions differ between the caches

    fresh_b, _ = new.decode(b[:hb])  # B's prefill in a model that has decoded nothing else
    a_out, cache_a = model.decode(a[:ha])
    b_out, cache_b = model.decode(b[:hb])
    a_steps, b_steps = [a_out], [b_out]
    for i in range(T - hb):  # hb <= ha: B has at least as many steps as A
        if ha + i < T:
            out, cache_a = model.decode(a[ha + i : ha + i + 1], cache_a)
            a_steps.append(out)
        out, cache_b = model.decode(b[hb + i : hb + i + 1], cache_b)
        b_steps.append(out)
    again_b, _ = model.decode(b[:hb])

    for name, tokens, h, steps in (("A", a, ha, a_steps), ("B", b, hb, b_steps)):
        chunks = (h,) + (1,) * (T - h)
        found = np.concatenate(steps, axis=-2)
        expected = o.logits(tokens)[[p for _, p in checks.decode_positions(model, chunks)]]
        checks.agree(
            found, expected, model=model,
            what=f"sequence {name} decoded in chunks {chunk_list(chunks)} in turns with another (A prefilled, B "
            "prefilled with cache=None, then a token of A and one of B, each from its own cache)",
            localize=checks.decode_localizer(model, o, tokens, chunks, found, expected),
        )  # fmt: skip
    checks.agree(
        again_b, _given(model, o.logits(b)[:hb]), model=model, against=fresh_b,
        what=f"contract rule 'deterministic' ({RULES['deterministic']}): B's prefill decode(b, None) after both "
        "sequences' decodes, against the same prefill in a model that decoded nothing else",
    )  # fmt: skip
