"""Sliding-window attention (Mistral, Qwen2/3's sliding layers, Gemma 2's local layers): the query at
t sees keys t - W + 1 .. t, never t - W. With every layer sliding, the logits at t reach back
n_layers (W - 1) tokens: editing the token just past that reach leaves t unchanged, and editing the
farthest token within it changes t (for one layer: the token at t - W leaves t unchanged, the one
at t - W + 1 changes it), which pins the window's off-by-one both ways. A window at least the
sequence's length is full causal attention; and decoding past the window with the model's own cache
gives the logits of one full pass (a cache that forgets the window while decoding shows there)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from verifier.analysis.divergence import chunk_list
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, windowed_cases
from verifier.properties.models import requires
from verifier.properties.oracle import oracle
from verifier.properties.pinned_cases import pinned, small_case
from verifier.properties.strategies import WINDOW_FAMILIES

# Windows of at least T: one layer, three with biases and grouped-query attention, Gemma 2 with caps.
WHOLE_WINDOWS = (
    small_case("mistral", 20, n_layers=1, n_kv_heads=2, sliding_window=20),
    small_case("qwen2", 24, n_layers=3, n_kv_heads=2, sliding_window=30),
    small_case("gemma2", 24, n_kv_heads=2, sliding_window=24, attn_softcap=3.0, final_softcap=5.0),
)
DRAWN = "configs whose every layer slides, with windows of their own"


def _reach(case: Case) -> int:
    """How many tokens back the last layer's output at t depends on: n_layers (W - 1)."""
    return case.config.n_layers * (case.config.sliding_window - 1)


@requires("logits", family=WINDOW_FAMILIES, switch="sliding_window", drawn=DRAWN)
@given(case=windowed_cases(max_n_ctx=64), data=st.data())
def test_editing_the_token_at_t_minus_w_leaves_t_unchanged_and_at_t_minus_w_plus_1_changes_it(
    model_spec: ModelSpec, case: Case, data: st.DataObject
) -> None:
    """With R = n_layers (W - 1): an edit at j leaves positions j + R + 1.. unchanged (exactly, up to
    rounding) and changes position j + R (where the oracle moves clearly beyond the noise)."""
    R = _reach(case)
    j = data.draw(st.integers(0, case.T - R - 2), label="edited position j (j + R + 1 < T)")
    shift = data.draw(st.integers(1, case.config.vocab_size - 1), label="new token - old token (mod vocab_size)")
    edited = case.token_array()
    edited[j] = (edited[j] + shift) % case.config.vocab_size
    model = models.build(model_spec, case)
    o = oracle(case)
    before, after = model.logits(case.token_array()), model.logits(edited)
    outside = slice(j + R + 1, case.T)
    checks.agree(
        after[outside], o.logits(edited)[outside], against=before[outside], model=model,
        what=f"logits at positions {j + R + 1}..{case.T - 1} after the token at {j} changed (window "
        f"{case.config.sliding_window}, {case.config.n_layers} sliding layers: they reach back {R} tokens, to {j + 1})",
    )  # fmt: skip
    expected_before, expected_after = o.logits(case.token_array()), o.logits(edited)
    edge = j + R
    moved = float(np.abs(expected_after.value[edge] - expected_before.value[edge]).max())
    noise = expected_before[edge].bound(with_neighbours=False) + expected_after[edge].bound(with_neighbours=False)
    if moved <= 8 * noise:
        checks.nothing_compared("the oracle's logits at the window's edge did not move beyond the noise")
        return
    checks.compared()
    found = float(np.abs(after[edge] - before[edge]).max())
    if found <= noise:
        checks.fail(
            model,
            f"logits at position {edge} after the token at {j} changed",
            f"did not change (by {found:.3g}, within {noise:.3g}) although the oracle's moved by {moved:.3g}: "
            f"the token at {j} is within the reach of {case.config.n_layers} layers of window "
            f"{case.config.sliding_window} (keys t - W + 1 .. t each), and the model does not see it",
        )


@requires("logits", family=WINDOW_FAMILIES, switch="sliding_window", drawn=DRAWN)
@pinned(*WHOLE_WINDOWS)
@given(case=windowed_cases(at_least_T=True, max_n_ctx=64))
def test_a_window_at_least_the_sequence_length_equals_full_causal_attention(model_spec: ModelSpec, case: Case) -> None:
    """A sliding window at least as long as the sequence equals full causal attention."""
    full = case._replace(config=case.config.replace(sliding_window=None, layer_types=()))
    windowed_model = models.build(model_spec, case)
    full_model = models.build(model_spec, full)
    tokens = case.token_array()
    checks.agree(
        windowed_model.logits(tokens), oracle(full).logits(tokens), against=full_model.logits(tokens),
        model=windowed_model,
        what=f"logits of {case.T} tokens with sliding window {case.config.sliding_window} >= T, against the same "
        "model without a window",
    )  # fmt: skip


@requires("decode", family=WINDOW_FAMILIES, switch="sliding_window", drawn=DRAWN)
@given(case=windowed_cases(max_n_ctx=64), data=st.data())
def test_decoding_past_the_window_with_the_cache_gives_the_logits_of_one_full_pass(
    model_spec: ModelSpec, case: Case, data: st.DataObject
) -> None:
    """A prefill of at most W tokens, then single steps past the window: every step's keys include
    cached ones the window must drop."""
    W = case.config.sliding_window
    prefill = data.draw(st.integers(1, min(W, case.T - 1)), label="prefill length (<= W)")
    chunks = (prefill,) + (1,) * (case.T - prefill)
    model = models.build(model_spec, case, "decode")
    tokens = case.token_array()
    cache, pieces, start = None, [], 0
    for n in chunks:
        logits, cache = model.decode(tokens[start : start + n], cache)
        pieces.append(logits)
        start += n
    found = np.concatenate(pieces, axis=-2)
    positions = [p for _, p in checks.decode_positions(model, chunks)]
    expected = oracle(case).logits(tokens)[positions]
    checks.agree(
        found, expected, model=model,
        what=f"logits decoded in chunks {chunk_list(chunks)} past sliding window {W}",
        localize=checks.decode_localizer(model, oracle(case), tokens, chunks, found, expected),
    )  # fmt: skip
