"""Small configs of every RoPE family with their free switches drawn (head_dim, RoPE scaling, attention
biases, sliding windows with layer_types, Gemma 2's caps and query scale, routed experts with their
sizes, renormalisation, shared expert and dense layers, partial rotary, NoPE layers), for the config reader's and the
parameter formula's tests. The fixed switches are the family's (FAMILY_SWITCHES)."""

from __future__ import annotations

from hypothesis import strategies as st

from verifier.model.config import FAMILY_SWITCHES, LAYER_TYPES, ROPE_FAMILIES, ModelConfig, RopeScaling


@st.composite
def rope_scalings(draw: st.DrawFn, n_ctx: int) -> RopeScaling | None:
    kind = draw(st.sampled_from([None, "linear", "llama3"]), label="rope scaling")
    factor = draw(st.sampled_from([1.0, 2.0, 8.0, 32.0]), label="factor")
    if kind is None:
        return None
    if kind == "linear":
        return RopeScaling("linear", factor)
    low = draw(st.sampled_from([0.5, 1.0, 2.0]), label="low_freq_factor")
    return RopeScaling("llama3", factor, low, low * draw(st.sampled_from([1.5, 4.0])), draw(st.integers(1, n_ctx)))


@st.composite
def expert_switches(draw: st.DrawFn, free: tuple[str, ...], n_layers: int) -> dict:
    """A MoE family's routed experts, and those of its expert size, renormalisation, shared expert and dense
    layers it leaves free."""
    if "n_experts" not in free:
        return {}
    n_experts = draw(st.integers(1, 4), label="n_experts")
    switches: dict = {"n_experts": n_experts, "top_k": draw(st.integers(1, n_experts), label="top_k")}
    if "d_expert" in free:
        switches["d_expert"] = draw(st.none() | st.integers(1, 24), label="d_expert")
    if "norm_topk" in free:
        switches["norm_topk"] = draw(st.booleans(), label="norm_topk")
    if "d_shared_expert" in free:
        switches["d_shared_expert"] = draw(st.none() | st.integers(1, 24), label="d_shared_expert")
    if "dense_layers" in free:
        layers = draw(st.sets(st.integers(0, n_layers - 1)), label="dense_layers")
        switches["dense_layers"] = tuple(sorted(layers))
    return switches


@st.composite
def family_configs(draw: st.DrawFn, families: tuple[str, ...] = ROPE_FAMILIES) -> ModelConfig:
    """A config of one of `families`, every free switch of the family drawn."""
    family = draw(st.sampled_from(families), label="family")
    fixed, free = FAMILY_SWITCHES[family]  # type: ignore[index]
    n_kv_heads = draw(st.integers(1, 3), label="n_kv_heads")
    n_heads = n_kv_heads * draw(st.integers(1, 3), label="query heads per kv head")
    n_layers = draw(st.integers(1, 4), label="n_layers")
    n_ctx = draw(st.sampled_from([16, 64]), label="n_ctx")
    d_model = n_heads * 2 * draw(st.integers(1, 4), label="d_model / n_heads / 2")
    switches: dict = dict(fixed)
    if "head_dim" in free and draw(st.booleans(), label="decoupled head_dim"):
        switches["head_dim"] = 2 * draw(st.integers(1, 6), label="head_dim / 2")
    if "rope_scaling" in free:
        switches["rope_scaling"] = draw(rope_scalings(n_ctx))
    if "o_bias" in free:
        switches["qkv_bias"] = switches["o_bias"] = draw(st.booleans(), label="attention_bias")
    elif "qkv_bias" in free:
        switches["qkv_bias"] = draw(st.booleans(), label="q/k/v biases")
    if "sliding_window" in free and draw(st.booleans(), label="sliding window"):
        switches["sliding_window"] = draw(st.integers(1, n_ctx), label="sliding_window")
        if "layer_types" in free and draw(st.booleans(), label="explicit layer_types"):
            switches["layer_types"] = tuple(draw(st.lists(st.sampled_from(LAYER_TYPES), min_size=n_layers,
                                                          max_size=n_layers), label="layer_types"))  # fmt: skip
    if "attn_softcap" in free:
        switches["attn_softcap"] = draw(st.sampled_from([None, 50.0, 7.5]), label="attn_softcap")
        switches["final_softcap"] = draw(st.sampled_from([None, 30.0, 2.5]), label="final_softcap")
        switches["query_scale"] = draw(st.sampled_from([None, 7, 256]), label="query_scale")
    if "rotary_dim" in free:
        d_head = switches.get("head_dim", d_model // n_heads)
        switches["rotary_dim"] = draw(st.none() | st.integers(1, d_head // 2).map(lambda h: 2 * h), label="rotary_dim")
    if "nope_layers" in free:
        switches["nope_layers"] = tuple(sorted(draw(st.sets(st.integers(0, n_layers - 1)), label="nope_layers")))
    switches |= draw(expert_switches(free, n_layers))
    return ModelConfig(
        family=family,  # type: ignore[arg-type]
        vocab_size=draw(st.integers(2, 300), label="vocab_size"),
        n_ctx=n_ctx,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=draw(st.integers(1, 40), label="d_ff"),
        norm_eps=draw(st.sampled_from([1e-6, 1e-5]), label="norm_eps"),
        tie_embeddings=draw(st.booleans(), label="tie_embeddings"),
        rope_theta=draw(st.sampled_from([10000.0, 500000.0]), label="rope_theta"),
        **switches,
    )


def transformers_in_memory_shapes(
    config: ModelConfig, shapes: dict[str, tuple[int, ...]]
) -> dict[str, tuple[int, ...]]:
    """Published weight names and shapes as transformers 5 holds them in memory: each layer's routed experts
    stacked into experts.gate_up_proj [E, 2f, d] and experts.down_proj [E, d, f], Mixtral's block_sparse_moe
    named mlp (save_pretrained writes the published names back)."""
    held = {}
    for name, shape in shapes.items():
        name = name.replace(".block_sparse_moe.", ".mlp.")
        prefix, expert, _ = name.partition(".experts.")
        if not expert or ".shared_expert" in name:
            held[name] = tuple(shape)
            continue
        f, d = config.expert_d_ff, config.d_model
        held[prefix + ".experts.gate_up_proj"] = (config.n_experts, 2 * f, d)
        held[prefix + ".experts.down_proj"] = (config.n_experts, d, f)
    return held
