"""RoPE, through the model's trace (q, k before and q_rope, k_rope after the rotation), on every
family that rotates (`ROTARY`: all but GPT-2, with their q/k norms, partial rotary, GLM's interleaved
pairs, windows and soft-caps): it keeps the norm of every pair and head vector, is the identity at
position 0, turns pair i at position p by p theta^(-2i/r) (r the rotated dims) and passes the other
dims, composes (R(m) R(n) = R(m+n)), makes layer-0 scores depend only on m - n, and gives the scores
llama2.c's interleaved pairing gives on permuted q/k rows. Also: the reference's tables equal the ones
llama2.c computes and stores (its model.py's computation, transcribed into NumPy float32;
tests/test_reference.py checks them against torch's run of it).

Pairs are (i, i + r/2) of each head vector's first r dims: the `transformers` (rotate-half) layout that
`verifier.model.stages` documents for q and k; GLM's are (2i, 2i + 1), its own order. A model whose trace
holds rotate-half pairs interleaved declares `rope_layout = "interleaved"` and `CheckedModel.trace`
reorders them; one that does not declare it fails here, and the failure's localization (the first
divergent stage, layer 0 q) says what to declare.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from hypothesis import given

from verifier.analysis.divergence import Divergence
from verifier.model import stages
from verifier.model.config import FAMILIES, ModelConfig
from verifier.model.presets import preset
from verifier.plugin.contract import CheckedModel
from verifier.plugin.probes import PROBE_CONFIGS
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Case, cases
from verifier.properties.models import requires
from verifier.properties.oracle import exact, oracle, precision
from verifier.properties.pinned_cases import (
    CANCELLING_SCORES,
    ONE_KV_HEAD,
    RICH_FAMILIES,
    RICH_LLAMA,
    SINGLE_HEAD,
    SMALL_ACTIVATIONS,
    pinned,
)
from verifier.reference.layers import rope_tables

# The families whose q and k RoPE turns: every one whose configs use it (all but GPT-2).
ROTARY = tuple(f for f in FAMILIES if any(c.family == f and c.uses_rope for c in PROBE_CONFIGS.values()))
LLAMA_PINNED = (RICH_LLAMA, SMALL_ACTIVATIONS, SINGLE_HEAD, ONE_KV_HEAD)
rotary_cases = cases(ROTARY, min_T=2, max_n_ctx=96)


def _halves(x: np.ndarray, config: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
    """[..., d_head] -> the two members of every rotated pair, [..., r/2] each: (i, i + r/2) of the first
    r = `config.rotated_dims` dims, or (2i, 2i + 1) where the family pairs them so (GLM)."""
    r = config.rotated_dims
    x = np.asarray(x, np.float64)
    if config.rope_pairs == stages.INTERLEAVED:
        return x[..., 0:r:2], x[..., 1:r:2]
    return x[..., : r // 2], x[..., r // 2 : r]


def _formula_angles(T: int, config: ModelConfig) -> np.ndarray:
    """[T, r/2]: p * theta^(-2i/r), written from the formula, with the config's RoPE scaling:
    "linear" divides every frequency by the factor; "llama3" keeps the high band (wavelengths below
    original_n_ctx / high_freq_factor), divides the low band (above original_n_ctx / low_freq_factor)
    by the factor, and interpolates between them in original_n_ctx / wavelength."""
    d = config.rotated_dims
    inv_freq = config.rope_theta ** (-np.arange(0, d, 2) / d)
    s = config.rope_scaling
    if s is not None and s.kind == "linear":
        inv_freq = inv_freq / s.factor
    elif s is not None:
        wavelength = 2 * np.pi / inv_freq
        smooth = (s.original_n_ctx / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
        middle = (1 - smooth) * inv_freq / s.factor + smooth * inv_freq
        low_band = np.where(wavelength > s.original_n_ctx / s.low_freq_factor, inv_freq / s.factor, middle)
        inv_freq = np.where(wavelength < s.original_n_ctx / s.high_freq_factor, inv_freq, low_band)
    return np.arange(T)[:, None] * inv_freq[None, :]


def _rotate(x: np.ndarray, angles: np.ndarray, config: ModelConfig) -> np.ndarray:
    """Rotate the pairs (`_halves`) of x [heads, T, d_head] by angles [T, r/2]; the other dims pass."""
    x1, x2 = _halves(x, config)
    cos, sin = np.cos(angles), np.sin(angles)
    r = config.rotated_dims
    if config.rope_pairs == stages.INTERLEAVED:
        rotated = np.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).reshape(*x.shape[:-1], r)
    else:
        rotated = np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return np.concatenate([rotated, np.asarray(x, np.float64)[..., r:]], axis=-1)


def _traced(model_spec: ModelSpec, case: Case) -> tuple[CheckedModel, dict[str, np.ndarray]]:
    model = models.build(model_spec, case, "trace")
    return model, model.trace(case.token_array())


def _localize(model: CheckedModel, case: Case) -> Callable[[], Divergence | None]:
    """On failure, the first stage of the model's trace that departs from the oracle's: the rotated
    stage for a RoPE bug, or layer 0 q for a trace in a q/k order the model does not declare."""
    return checks.localizer(model, oracle(case), case.token_array())


def _rotated_pairs(trace: dict[str, np.ndarray], config: ModelConfig) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    for layer in filter(config.rotates, range(config.n_layers)):  # not a NoPE layer (test_nope.py)
        # what RoPE turns: q and k, or their q/k norms (Qwen3)
        pairs = (("q_norm", "q_rope"), ("k_norm", "k_rope")) if config.qk_norm else (("q", "q_rope"), ("k", "k_rope"))
        for before, after in pairs:
            b, a = stages.layer_stage(layer, before), stages.layer_stage(layer, after)
            if b in trace and a in trace:
                yield f"layer {layer} {before}", trace[b], trace[a]
            else:  # a trace may leave stages out; these properties read only the pairs it has
                checks.nothing_compared(f"the trace has no {before} and {after} pair (layers.<i>.{before}, .{after})")


@requires("trace", family=ROTARY)
@pinned(*LLAMA_PINNED)
@given(case=rotary_cases)
def test_rope_preserves_the_norm_of_every_pair_and_head_vector(model_spec: ModelSpec, case: Case) -> None:
    """RoPE keeps the norm of every rotated pair and of every head vector."""
    model, trace = _traced(model_spec, case)
    for name, before, after in _rotated_pairs(trace, case.config):
        (b1, b2), (a1, a2) = _halves(before, case.config), _halves(after, case.config)
        pair_norms = exact(np.hypot(b1, b2), case.T)
        checks.agree(np.hypot(a1, a2), pair_norms, what=f"{name}: norm of every pair after RoPE", model=model,
                     localize=_localize(model, case))  # fmt: skip
        head_norms = exact(np.linalg.norm(np.asarray(before, np.float64), axis=-1), case.T)
        found = np.linalg.norm(np.asarray(after, np.float64), axis=-1)
        checks.agree(found, head_norms, what=f"{name}: norm of every head vector after RoPE", model=model,
                     localize=_localize(model, case))  # fmt: skip


@requires("trace", family=ROTARY)
@pinned(*LLAMA_PINNED)
@given(case=rotary_cases)
def test_rope_is_the_identity_at_position_0(model_spec: ModelSpec, case: Case) -> None:
    """RoPE is the identity at position 0."""
    model, trace = _traced(model_spec, case)
    for name, before, after in _rotated_pairs(trace, case.config):
        checks.agree(after[:, 0], exact(before[:, 0]), what=f"{name} at position 0 after RoPE", model=model,
                     localize=_localize(model, case))  # fmt: skip


@requires("trace", family=ROTARY)
# Llama 3.1's scaled bands pinned (RICH_FAMILIES[0]: positions past original_n_ctx 32): a mutant scaling every
# band passed the drawn cases once the draws changed.
@pinned(*LLAMA_PINNED, RICH_FAMILIES[0])
@given(case=rotary_cases)
def test_rope_turns_pair_i_at_position_p_by_p_times_theta_to_the_minus_2i_over_d_head(
    model_spec: ModelSpec, case: Case
) -> None:
    """RoPE turns pair i at position p by the angle p * theta^(-2i/d_head)."""
    model, trace = _traced(model_spec, case)
    c = case.config
    angles = _formula_angles(case.T, c)
    for name, before, after in _rotated_pairs(trace, c):
        checks.agree(after, exact(_rotate(before, angles, c), case.T), what=f"{name} rotated by RoPE", model=model,
                     localize=_localize(model, case))  # fmt: skip


def _measured_angles(before: np.ndarray, after: np.ndarray, config: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
    """The angle the model turned each pair by, [T, d_head/2], read from the head whose pair is
    longest, and that pair's length relative to the largest (how far the angle can be trusted)."""
    (b1, b2), (a1, a2) = _halves(before, config), _halves(after, config)
    best = np.argmax(np.hypot(b1, b2), axis=0)[None]  # [1, T, d_head/2]: the longest pair over heads
    b1, b2, a1, a2 = (np.take_along_axis(x, best, axis=0)[0] for x in (b1, b2, a1, a2))
    angle = np.arctan2(b1 * a2 - b2 * a1, b1 * a1 + b2 * a2)
    length = np.hypot(b1, b2)
    return angle, length / max(float(length.max()), np.finfo(np.float64).tiny)


@requires("trace", family=ROTARY)
@pinned(*LLAMA_PINNED)
@given(case=rotary_cases)
def test_rope_rotations_compose_r_m_times_r_n_is_r_m_plus_n(model_spec: ModelSpec, case: Case) -> None:
    """RoPE's rotations compose: R(m) R(n) = R(m + n)."""
    model, trace = _traced(model_spec, case)
    T = min(case.T, 48)  # every (m, n) with m + n < T: quadratic in T
    for name, before, after in _rotated_pairs(trace, case.config):
        angle, trust = _measured_angles(before[:, :T], after[:, :T], case.config)
        m, n = np.triu_indices(T)
        keep = m + n < T
        m, n = m[keep], n[keep]
        gap = np.angle(np.exp(1j * (angle[m] + angle[n] - angle[m + n])))  # wrapped to (-pi, pi]
        # An angle read from a pair of relative length r is good to about the class's identity error / r
        # (float32: eps32 (ULPS + T) / r).
        slack = precision().identity_relative(T) * (1 / trust[m] + 1 / trust[n] + 1 / trust[m + n])
        ratio = np.abs(gap) / slack
        worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        checks.record_ratio(float(ratio[worst]))
        if ratio[worst] > 1:
            k, i = worst
            divergence = _localize(model, case)()
            where = ""
            if divergence is not None:  # as checks.agree says it
                where = ("\nfirst divergent stage: " if divergence.first else "\n") + divergence.describe()
            checks.fail(
                model,
                f"{name}: R(m) R(n) = R(m+n)",
                f"pair {i}: R({m[k]}) then R({n[k]}) turns by {angle[m[k], i] + angle[n[k], i]:.6g} rad, "
                f"R({m[k] + n[k]}) by {angle[m[k] + n[k], i]:.6g} rad (mod 2 pi: {gap[k, i]:.3g} apart, "
                f"tolerance {slack[k, i]:.3g}){where}",
                divergence,
            )


@requires("trace", family=ROTARY)
@pinned(*LLAMA_PINNED, CANCELLING_SCORES)
@given(case=cases(ROTARY, min_T=3, max_n_ctx=96))
def test_rope_layer_0_scores_depend_only_on_the_distance_m_minus_n(model_spec: ModelSpec, case: Case) -> None:
    # Tokens alternate a, b, a, b, ...: in layer 0, q and k depend on the token alone, so the score of
    # query m and key n equals that of m + 2 and n + 2 exactly when RoPE is relative.
    """Layer 0's attention scores depend only on the distance m - n between positions."""
    a, b = case.tokens[0], case.tokens[1]
    periodic = case._replace(tokens=tuple(a if p % 2 == 0 else b for p in range(case.T)))
    model = models.build(model_spec, periodic, "trace")
    scores = model.trace(periodic.token_array()).get(stages.layer_stage(0, "scores"))
    if scores is None:
        checks.nothing_compared("the trace has no layers.0.scores stage")
        return
    visible = _visible(case.T - 2, case.config.window(0))  # the same distances on both sides
    later, earlier = np.where(visible, scores[:, 2:, 2:], 0.0), np.where(visible, scores[:, :-2, :-2], 0.0)
    # Each side is a score rounded once and a sum of terms rounded each: the bound is relative to
    # |score| plus the terms' root-sum-square on both sides (sized on the oracle's q and k).
    q, k = stages.layer_stage(0, "q_rope"), stages.layer_stage(0, "k_rope")
    layer_0 = next(g for g in oracle(periodic).model.trace_layers(periodic.token_array()) if q in g)
    terms = _term_sizes(layer_0[q], layer_0[k])
    scale = np.abs(earlier) + np.tril(terms[:, 2:, 2:]) + np.tril(terms[:, :-2, :-2])
    expected = exact(earlier, case.T, scale=scale)
    checks.agree(later, expected, what="layer 0 scores of (m+2, n+2) against (m, n)", model=model)


def _term_sizes(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """q [h, T, d_head], k [kv, S, d_head] -> [h, T, S]: the root-sum-square of the terms of each
    score q k^T / sqrt(d_head), sqrt(sum_i (q_i k_i)^2) / sqrt(d_head) (query head h on kv head
    h // group): how large the roundings of the terms add up to, where the score may be far smaller."""
    k = np.repeat(np.asarray(k, np.float64), q.shape[0] // k.shape[0], axis=0)
    return np.sqrt(np.square(np.asarray(q, np.float64)) @ np.square(k).transpose(0, 2, 1)) / np.sqrt(q.shape[-1])


def _visible(T: int, window: int | None) -> np.ndarray:
    """[T, T]: where query m may see key n (n <= m, and m - n < the window where the layer has one), the
    entries of `scores` a trace defines."""
    m, n = np.arange(T)[:, None], np.arange(T)[None, :]
    return (n <= m) & (m - n < (window or T))


def _interleaved_scores(q: np.ndarray, k: np.ndarray, config: ModelConfig, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """llama2.c's way: each head's first r = `config.rotated_dims` q/k dims permuted to interleaved pairs
    (2i, 2i+1) (GLM's already are), each rotated as a complex number by p theta^(-2i/r) (scaled as the
    config says: `_formula_angles`), the other dims passed; then q k^T times the config's attention scale
    with query head h on kv head h // group, soft-capped where the family caps. Returns the scores [h, T, T]
    and the root-sum-square of each one's terms (`_term_sizes`), both 0 where the query cannot see the key."""
    r, T = config.rotated_dims, q.shape[1]
    perm = np.arange(r)
    if config.rope_pairs != stages.INTERLEAVED:
        perm = np.stack([np.arange(r // 2), np.arange(r // 2) + r // 2], axis=-1).reshape(-1)
    freqs = np.exp(1j * _formula_angles(T, config))  # [T, r/2]

    def rotate(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)
        pairs = x[..., perm].reshape(*x.shape[:-1], r // 2, 2)
        z = (pairs[..., 0] + 1j * pairs[..., 1]) * freqs
        return np.concatenate([np.stack([z.real, z.imag], axis=-1).reshape(*x.shape[:-1], r), x[..., r:]], axis=-1)

    qr, kr = rotate(q), rotate(k)
    scores = qr @ np.repeat(kr, q.shape[0] // k.shape[0], axis=0).transpose(0, 2, 1) * config.attention_scale
    if config.attn_softcap is not None:
        scores = config.attn_softcap * np.tanh(scores / config.attn_softcap)
    terms = _term_sizes(qr, kr) * config.attention_scale * np.sqrt(q.shape[-1])
    visible = _visible(T, config.window(layer))
    return np.where(visible, scores, 0.0), np.where(visible, terms, 0.0)


@requires("trace", family=ROTARY)
@pinned(*LLAMA_PINNED)
@given(case=rotary_cases)
def test_rope_interleaved_and_rotate_half_pairings_give_the_same_scores(model_spec: ModelSpec, case: Case) -> None:
    """The interleaved pairing and the rotate-half pairing (with the q/k rows permuted) give the same scores."""
    model, trace = _traced(model_spec, case)
    turned = ("q_norm", "k_norm") if case.config.qk_norm else ("q", "k")  # what RoPE turns (Qwen3: the norms)
    for layer in filter(case.config.rotates, range(case.config.n_layers)):  # not a NoPE layer
        q, k, scores = (trace.get(stages.layer_stage(layer, op)) for op in (*turned, "scores"))
        if q is None or k is None or scores is None:
            checks.nothing_compared(
                f"the trace has no {', '.join(turned)} and scores stages (layers.<i>.{turned[0]}, ...)"
            )
            continue
        # A score is rounded once (eps |score|) and sums terms rounded each (their root-sum-square):
        # where the terms cancel, the second is large against the score (measured: transformers in
        # bfloat16, 9% of a score of -0.0014, 1.09x a bound of 8 eps max |score|).
        interleaved, terms = _interleaved_scores(q, k, case.config, layer)
        expected = exact(interleaved, case.T, scale=np.abs(interleaved) + terms)
        checks.agree(
            np.where(_visible(case.T, case.config.window(layer)), scores, 0.0),
            expected,
            what=f"layer {layer} scores against llama2.c's interleaved RoPE",
            model=model,
            localize=_localize(model, case),
        )


def _llama2c_tables(d_head: int, n_ctx: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """llama2.c's model.py `precompute_freqs_cis`, the tables its export stores (float32): its torch
    lines in NumPy, so that a run whose models need no torch does not import it (seconds)."""
    # freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    freqs = np.float32(1) / np.float32(theta) ** (np.arange(0, d_head, 2)[: d_head // 2].astype(np.float32) / d_head)
    # t = torch.arange(end, device=freqs.device); freqs = torch.outer(t, freqs).float()
    angles = np.outer(np.arange(n_ctx).astype(np.float32), freqs)  # [n_ctx, d_head/2]
    return np.cos(angles), np.sin(angles)  # freqs_cos = torch.cos(freqs); freqs_sin = torch.sin(freqs)


def test_rope_tables_equal_the_ones_llama2c_stores() -> None:
    """RoPE's cos/sin tables equal the ones llama2.c's model.py computes and stores."""
    for name in ("llama2c-stories260K", "llama2c-stories15M", "llama2c-stories110M"):
        c = preset(name)
        cos, sin = rope_tables(np.arange(c.n_ctx), c.d_head, c.rope_theta)
        theirs_cos, theirs_sin = _llama2c_tables(c.d_head, c.n_ctx, c.rope_theta)
        for ours, theirs, what in ((cos, theirs_cos, "cos"), (sin, theirs_sin, "sin")):
            checks.agree(ours, exact(theirs, c.n_ctx), what=f"{name} {what} table", model="reference")
