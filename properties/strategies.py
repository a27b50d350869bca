"""Hypothesis strategies of the property suite's configs: which models the properties draw.

Configs are drawn within the Constraints of the model under test (`drawing_for`, set by the suite's
conftest from the model's declaration or its probes), so a model that runs only published shapes
gets only those, directly, never filtered. Within what a model allows, one draw in two is a
published shape (GPT-2: d_ff = 4 x d_model, tied, eps 1e-5; llama2.c: its hidden-size rule with
multiple_of 32, 4 or 256, eps 1e-5, theta 10000), the other a free one (d_ff unrelated to d_model,
either eps, either theta, tied or not), which catches shape bugs.

Every family (`verifier.model.config.FAMILIES`) is drawn among the examples, each as often as the
others (never as extra test sessions: the default run's time does not grow with the families), and
each switch its family leaves free is drawn on or off, and when on, where a missing piece shows
(`drawn_switches`): RoPE scaling with an original context shorter than the drawn one, windows of a few
keys, local and global layers mixed, soft-caps small enough to bite, a head_dim decoupled from
d_model / n_heads, attention biases (drawn non-zero by `init_weights`, which also gives Gemma's
norm weights near 0 and q/k norm weights that differ per entry). A MoE family always has its experts
(`drawn_experts`: 2 to 8, top-2 first, below n_experts in most draws so that the router chooses;
`init_weights` draws routers whose choices vary across tokens and never tie in float64), and
Qwen2-MoE's expert size, renormalisation, shared expert and dense layers each on or off; partial
rotary is drawn strictly partial (a pair rotated and a pair passed).

The inputs drawn on these configs (cases, tokens, chunkings, batches) are `verifier.properties.cases`;
the edge cases pinned with `@example` are `verifier.properties.pinned_cases`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import reject
from hypothesis import strategies as st

from verifier.model.config import (
    FAMILIES,
    FAMILY_SWITCHES,
    LAYER_TYPES,
    MOE_FAMILIES,
    TIED_FAMILIES,
    Family,
    ModelConfig,
    RopeScaling,
)
from verifier.model.presets import gpt2_d_ff, llama2c_hidden_dim
from verifier.plugin.interface import Constraints
from verifier.plugin.probes import FREE_SHAPE

# Every family, drawn in proportion (FAMILIES is imported from the config). Order matters: Hypothesis
# shrinks a sampled value towards the first entry (GPT-2, then Llama, then the Llama layout's switches).
MAX_N_CTX = 256
SHORT_N_CTX = 48
MAX_D_MODEL = 128  # head sizes up to 64 with 1 or 2 heads
MULTIPLES_OF = (32, 4, 256)  # llama2.c's multiple_of: train.py's default, stories260K's, model.py's default


_drawing_for: list[tuple[Constraints, ...]] = []


@contextmanager
def drawing_for(shapes: tuple[Constraints, ...]) -> Iterator[None]:
    """Inside this block, `configs` draws only configs that one of `shapes` admits (the model under
    test's declared or probed Constraints)."""
    _drawing_for.append(shapes)
    try:
        yield
    finally:
        _drawing_for.pop()


def published_d_ff(family: Family, d_model: int, block: int = 1) -> st.SearchStrategy[int]:
    """GPT-2's 4 x d_model, or llama2.c's hidden size for one of MULTIPLES_OF (those that are
    multiples of `block`: the hidden size is a multiple of its multiple_of)."""
    if family == "gpt2":
        return st.just(gpt2_d_ff(d_model))
    multiples = [m for m in MULTIPLES_OF if m % block == 0]
    return st.sampled_from(multiples).map(lambda multiple_of: llama2c_hidden_dim(d_model, multiple_of))


def _width_step(n_heads: int, block: int, *, even: bool) -> int:
    """The smallest step of d_head for which n_heads x d_head is a multiple of `block` (and d_head
    even, where `even`: RoPE rotates pairs)."""
    step = block // math.gcd(n_heads, block)
    return math.lcm(step, 2) if even else step


@st.composite
def configs(
    draw: st.DrawFn,
    families: tuple[Family, ...] = FAMILIES,
    *,
    max_n_ctx: int = MAX_N_CTX,
    min_n_ctx: int = 1,
    max_layers: int = 4,
    switches: tuple[str, ...] | None = None,
) -> ModelConfig:
    """Valid configs the model under test runs (see `drawing_for`): one of `families`, each drawn as
    often as the others; 1..8 heads (the Llama layout: any n_kv_heads dividing n_heads), d_head 2..64
    (even for RoPE; d_model <= 128, or one block of a quantized format's if wider, or a decoupled
    head_dim where the family allows it), 1..4 layers, vocab 2..600, n_ctx up to `max_n_ctx`; a
    published shape or a free one (d_ff 1..256); and the
    switches the family leaves free drawn where they show (`drawn_switches`), or only those of `switches`
    (`()`: each family's plain form, as a format that stores no switch needs)."""
    shapes = [c for c in (_drawing_for[-1] if _drawing_for else (FREE_SHAPE,)) if set(c.families) & set(families)]
    if not shapes:
        reject()  # the model runs none of `families`: the property's `requires` skips it first
    shape = shapes[0] if len(shapes) == 1 else draw(st.sampled_from(shapes), label="declared shape")
    family = draw(st.sampled_from([f for f in families if f in shape.families]), label="family")
    fixed, free = FAMILY_SWITCHES[family]
    if shape.switches is not None:  # the free switches the model runs
        free = tuple(name for name in free if name in shape.switches)
    if switches is not None:  # the free switches the caller asks for
        free = tuple(name for name in free if name in switches)
    # The fields the shape leaves free: all published values together, or each drawn on its own.
    published = draw(st.booleans(), label="published shape")
    if published and family == "llama":
        free = ()  # llama2.c's published shape is the plain Llama
    block = shape.block or 1  # every matrix input width a multiple of it (a quantized format's block)
    max_width = max(MAX_D_MODEL, block)  # one block wide at least (llama.cpp's K types: 256)
    if block == 1:
        n_heads = draw(st.integers(1, 8), label="n_heads")
    else:  # the head counts whose widths n_heads x d_head reach a multiple of the block within max_width
        fits = [n for n in range(1, 9) if n * _width_step(n, block, even=family != "gpt2") <= max_width]
        n_heads = draw(st.sampled_from(fits), label="n_heads")
    max_d_head = max(2, max_width // n_heads)
    head_dim = None
    if family == "gpt2":
        n_kv_heads = n_heads
        step = _width_step(n_heads, block, even=False)
        d_model = n_heads * step * draw(st.integers(-(-2 // step), max_d_head // step), label="d_head")
    else:
        divisors = [d for d in range(1, n_heads + 1) if n_heads % d == 0 and (shape.grouped_query or d == n_heads)]
        n_kv_heads = draw(st.sampled_from(divisors[::-1]), label="n_kv_heads")
        step = _width_step(n_heads, block, even=True)
        d_head = step * draw(st.integers(1, max_d_head // step), label=f"d_head / {step}")
        d_model = n_heads * d_head
        per_model = _width_step(n_heads, block, even=False)
        others = [k for k in range(per_model, max_width // n_heads + 1, per_model) if k != d_head]
        if "head_dim" in free and others and draw(st.booleans(), label="head_dim decoupled from d_model / n_heads"):
            # Qwen3-0.6B, Gemma-7B: d_model still a multiple of n_heads (transformers' Llama refuses
            # another), but not n_heads x d_head.
            head_dim = d_head
            if block == 1:
                per_head = st.integers(1, max(1, max_width // n_heads)).filter(lambda k: k != d_head)
            else:
                per_head = st.sampled_from(others)
            d_model = n_heads * draw(per_head, label="d_model / n_heads (not d_head)")
    max_n_ctx = min(max_n_ctx, shape.max_n_ctx or max_n_ctx)
    if min_n_ctx > max_n_ctx:
        reject()  # the property needs a longer context than the model runs
    # Most contexts are short (cheap); one draw in two reaches up to `max_n_ctx`.
    short = st.integers(min_n_ctx, max(min_n_ctx, min(SHORT_N_CTX, max_n_ctx)))
    n_ctx = draw(st.one_of(short, st.integers(min_n_ctx, max_n_ctx)), label="n_ctx")
    if shape.d_ff is not None:
        d_ff = shape.d_ff(d_model)
    elif published and family in ("gpt2", "llama"):
        d_ff = draw(published_d_ff(family, d_model, block), label="d_ff")
    else:
        d_ff = block * draw(st.integers(1, 256 // block), label="d_ff")
    if shape.tie_embeddings is not None:
        tie_embeddings = shape.tie_embeddings
    else:
        tie_embeddings = (published and family in TIED_FAMILIES) or draw(st.booleans(), label="tie_embeddings")
    published_eps = 1e-5 if family in ("gpt2", "llama") else 1e-6
    norm_eps = shape.norm_eps or (published_eps if published else draw(st.sampled_from([1e-5, 1e-6]), label="norm_eps"))
    rope_theta = 10000.0
    if family != "gpt2":
        free_theta = st.sampled_from([10000.0, 500000.0, 1000000.0])
        rope_theta = shape.rope_theta or (10000.0 if published else draw(free_theta, label="rope_theta"))
    n_layers = draw(st.integers(1, max_layers), label="n_layers")
    config = ModelConfig(
        family=family,
        vocab_size=draw(st.integers(2, 600), label="vocab_size"),
        n_ctx=n_ctx,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=d_ff,
        norm_eps=norm_eps,
        tie_embeddings=tie_embeddings,
        rope_theta=rope_theta,
        head_dim=head_dim,
        **fixed,
        **draw(drawn_switches(free, n_ctx, n_layers, head_dim or d_model // n_heads), label="switches"),
        **(draw(drawn_experts(free, n_layers, block), label="experts") if family in MOE_FAMILIES else {}),
    )
    if shape.supports is not None and not shape.supports(config):
        reject()  # the declaration's predicate: what its fields cannot say is filtered
    return config


# RoPE scaling's drawn values: factors of the published checkpoints (Llama 3.1: 8, 3.2: 32) and
# smaller; original contexts past which drawn sequences reach, and long enough that the shortest
# wavelength (2 pi) falls below original_n_ctx / high_freq_factor: all three bands of llama3 occur.
ROPE_FACTORS = (8.0, 2.0, 4.0, 32.0)
ORIGINAL_N_CTX = (32, 26, 48, 64)
# Soft-caps: the published ones (Gemma 2: 50 on scores, 30 on logits) bite only at large weights;
# the small ones bite at every scale.
ATTN_SOFTCAPS = (50.0, 1.0, 3.0)
FINAL_SOFTCAPS = (30.0, 2.0, 5.0)


@st.composite
def drawn_switches(draw: st.DrawFn, free: tuple[str, ...], n_ctx: int, n_layers: int, d_head: int) -> dict[str, Any]:
    """The `free` switches (those of `FAMILY_SWITCHES` the family leaves free and the model runs),
    each on or off, and when on drawn where a missing piece shows: RoPE scaling with an original
    context drawn positions pass, windows shorter than the sequence, local and global layers mixed,
    caps that bite, biases."""
    found: dict[str, Any] = {}
    if "rope_scaling" in free and draw(st.booleans(), label="rope scaling"):
        kind = draw(st.sampled_from(("llama3", "linear")), label="rope scaling kind")
        factor = draw(st.sampled_from(ROPE_FACTORS), label="rope scaling factor")
        if kind == "linear":
            found["rope_scaling"] = RopeScaling("linear", factor)
        else:
            low, high = draw(st.sampled_from(((1.0, 4.0), (1.0, 2.0), (2.0, 8.0))), label="low/high freq factors")
            # Shorter than the context (as in published configs, and so that positions pass it).
            shorter = [n for n in ORIGINAL_N_CTX if n < n_ctx] or [max(1, n_ctx // 2)]
            original = draw(st.sampled_from(shorter), label="original_n_ctx")
            found["rope_scaling"] = RopeScaling("llama3", factor, low, high, original)
    if "qkv_bias" in free and draw(st.booleans(), label="attention bias"):
        found["qkv_bias"] = True
        found["o_bias"] = "o_bias" in free
    if "sliding_window" in free and draw(st.booleans(), label="sliding window"):
        # Mostly a few keys (so that T passes it), sometimes anything up to the context. Not 1: a
        # query that sees itself alone is no published model, and transformers' sliding cache, which
        # keeps W - 1 keys, decodes it wrongly (a 0.27 logit difference, or a raised error for a chunk).
        window = draw(st.one_of(st.integers(2, 8), st.integers(2, max(2, n_ctx))), label="sliding_window")
        found["sliding_window"] = window
        if "layer_types" in free:
            pattern = draw(st.sampled_from(("alternating", "drawn", "all sliding")), label="layer types")
            if pattern == "alternating":  # Gemma 2's: even layers slide, odd ones see every key
                found["layer_types"] = tuple(LAYER_TYPES[1] if i % 2 == 0 else LAYER_TYPES[0] for i in range(n_layers))
            elif pattern == "drawn":
                types = st.lists(st.sampled_from(LAYER_TYPES), min_size=n_layers, max_size=n_layers)
                found["layer_types"] = tuple(draw(types, label="layer_types"))
    if "attn_softcap" in free and draw(st.booleans(), label="attention soft-cap"):
        found["attn_softcap"] = draw(st.sampled_from(ATTN_SOFTCAPS), label="attn_softcap")
    if "final_softcap" in free and draw(st.booleans(), label="final soft-cap"):
        found["final_softcap"] = draw(st.sampled_from(FINAL_SOFTCAPS), label="final_softcap")
    if "query_scale" in free and draw(st.booleans(), label="query_pre_attn_scalar other than d_head"):
        found["query_scale"] = draw(st.integers(1, 256).filter(lambda q: q != d_head), label="query_scale")
    if "rotary_dim" in free and d_head >= 4 and draw(st.booleans(), label="partial rotary"):
        # strictly partial: at least one pair rotated and one passed (Phi-4-mini's 0.75, GLM's 0.5)
        found["rotary_dim"] = 2 * draw(st.integers(1, d_head // 2 - 1), label="rotary_dim / 2")
    if "nope_layers" in free and draw(st.booleans(), label="layers without RoPE"):
        # SmolLM3's pattern (every fourth layer: none below 4 layers), or any layers
        if draw(st.booleans(), label="every fourth layer without RoPE"):
            found["nope_layers"] = tuple(i for i in range(n_layers) if (i + 1) % 4 == 0)
        else:
            found["nope_layers"] = tuple(sorted(draw(st.sets(st.integers(0, n_layers - 1), min_size=1),
                                                     label="nope_layers")))  # fmt: skip
    return found


# Experts a MoE layer: Mixtral's 8 and top-2 among the draws, Qwen1.5-MoE's top-4 where n_experts allows.
MAX_EXPERTS = 8


@st.composite
def drawn_experts(draw: st.DrawFn, free: tuple[str, ...], n_layers: int, block: int = 1) -> dict[str, Any]:
    """A MoE family's routed experts, always set (its config needs them): n_experts 2..8 and top_k
    1..min(4, n_experts), top-2 first (Mixtral's), below n_experts in most draws so that the router
    chooses; and the switches Qwen2-MoE leaves free, each on or off: an expert size of its own, the
    renormalisation, a shared expert, dense layers (never all of them: a MoE layer stays)."""
    n = draw(st.integers(2, MAX_EXPERTS), label="n_experts")
    top_k = draw(st.sampled_from(sorted({min(2, n), *range(1, min(4, n) + 1)}, key=lambda k: k != min(2, n))),
                 label="top_k")  # fmt: skip
    found: dict[str, Any] = {"n_experts": n, "top_k": top_k}
    if "d_expert" in free and draw(st.booleans(), label="expert size other than d_ff"):
        found["d_expert"] = block * draw(st.integers(1, max(1, 64 // block)), label="d_expert")
    if "norm_topk" in free:
        found["norm_topk"] = draw(st.booleans(), label="norm_topk")
    if "d_shared_expert" in free and draw(st.booleans(), label="shared expert"):
        found["d_shared_expert"] = block * draw(st.integers(1, max(1, 64 // block)), label="d_shared_expert")
    if "dense_layers" in free and n_layers > 1 and draw(st.booleans(), label="dense layers"):
        dense = draw(st.sets(st.integers(0, n_layers - 1), min_size=1, max_size=n_layers - 1), label="dense_layers")
        found["dense_layers"] = tuple(sorted(dense))
    return found


# The families that allow each switch (FAMILY_SWITCHES), for the properties about it.
WINDOW_FAMILIES = tuple(f for f in FAMILIES if "sliding_window" in FAMILY_SWITCHES[f][1])
SCALING_FAMILIES = tuple(f for f in FAMILIES if "rope_scaling" in FAMILY_SWITCHES[f][1])
SOFTCAP_FAMILIES = tuple(f for f in FAMILIES if "attn_softcap" in FAMILY_SWITCHES[f][1])
QK_NORM_FAMILIES = tuple(f for f in FAMILIES if FAMILY_SWITCHES[f][0].get("qk_norm"))
NOPE_FAMILIES = tuple(f for f in FAMILIES if "nope_layers" in FAMILY_SWITCHES[f][1])
NORM_AFTER_FAMILIES = tuple(f for f in FAMILIES if FAMILY_SWITCHES[f][0].get("sandwich_norm"))
