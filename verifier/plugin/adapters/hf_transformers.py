"""`transformers`' model of each family on the CPU, as a model under test: `GPT2LMHeadModel`,
`LlamaForCausalLM` (RoPE scaling included), `MistralForCausalLM`, `Qwen2ForCausalLM`,
`Qwen3ForCausalLM`, `GemmaForCausalLM`, `Gemma2ForCausalLM`, `MixtralForCausalLM`, `Qwen2MoeForCausalLM`,
`Phi3ForCausalLM`, `GlmForCausalLM` (`verifier.model.config.HF_CLASSES`), built from
`ModelConfig.to_transformers()` with eager attention (and eager experts), in float32 or a narrower
class, holding the canonical weights as transformers 5 holds them in memory (`transformers_state`: a MoE
layer's experts stacked).

The KV cache is transformers' own `DynamicCache`, passed and returned as `cache` (the name since
transformers 5.24, which deprecates `past_key_values` and drops it in 5.40; an older transformers
ignores an argument named `cache`, so it is refused, see `verifier.extra.MINIMUM`), copied before
each call because transformers extends it in place and the contract promises that a cache stays
reusable. Built from the model's config, it holds a `DynamicSlidingWindowLayer` for each sliding layer
(Mistral, Gemma 2's local layers), which keeps the last W - 1 keys: decoding past the window is exact.

`trace` records stages with forward hooks on transformers' own modules (eager attention, so the
attention module returns its probabilities). Three kinds of stage are computed inside functions
no hook reaches; they are rebuilt from captured tensors with transformers' own code:
q, k, v of GPT-2 (split from `c_attn`'s fused output as `GPT2Attention` splits it), q_rope / k_rope
of the RoPE families (`apply_rotary_pos_emb` with the captured rotary tables, on Qwen3's normed q
and k), and `scores` (q k^T times the attention module's own `scaling`, soft-capped by its own
`attn_logit_softcapping` in Gemma 2). Phi-3's q, k, v are split from `qkv_proj`'s output, gate and up
from a fused `gate_up_proj`'s (Phi-3, GLM), and a MoE layer's `router_probs` are the softmax of its
router's logits, its `experts` the top-k indices its router returns and its experts use; q_rope / k_rope
use the family's own `apply_rotary_pos_emb` (Phi-3's and GLM's partial rotary, GLM's interleaved pairs),
where the attention module applies it (SmolLM3's `use_rope`).
"""

from __future__ import annotations

import copy
import importlib
from typing import Any

import numpy as np

from verifier import extra
from verifier.formats.hf import build_model
from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.weights import LazyWeights, WeightMap, Weights, expert_names, moe_prefix, weight_shapes

# Where each stage is read: (module path, what). Paths under a layer are relative to it ("" is
# the layer itself); what is "in" (the first input), "out" (the output), or an output index.
_GPT2_TOP: dict[str, tuple[str, str | int]] = {
    stages.EMBED: ("transformer.drop", "out"),
    stages.FINAL_NORM: ("transformer.ln_f", "out"),
}
_GPT2_LAYER: dict[str, tuple[str, str | int]] = {
    "attn_norm": ("ln_1", "out"),
    "qkv": ("attn.c_attn", "out"),
    "probs": ("attn", 1),
    "attn": ("attn.c_proj", "in"),
    "attn_out": ("attn", 0),
    "resid_attn": ("ln_2", "in"),
    "mlp_norm": ("ln_2", "out"),
    "mlp_up": ("mlp.c_fc", "out"),
    "mlp_act": ("mlp.act", "out"),
    "mlp_out": ("mlp", "out"),
    "resid_mlp": ("", "out"),
}
# Every other family has the Llama layout. The embedding is read where layer 0 reads it, after Gemma's
# normaliser (sqrt(d_model), which the model applies to embed_tokens' output).
_LLAMA_TOP: dict[str, tuple[str, str | int]] = {
    stages.EMBED: ("model.layers.0.input_layernorm", "in"),
    stages.FINAL_NORM: ("model.norm", "out"),
    "rotary": ("model.rotary_emb", "out"),
}
_LLAMA_LAYER: dict[str, tuple[str, str | int]] = {
    "attn_norm": ("input_layernorm", "out"),
    "q": ("self_attn.q_proj", "out"),
    "k": ("self_attn.k_proj", "out"),
    "v": ("self_attn.v_proj", "out"),
    "probs": ("self_attn", 1),
    "attn": ("self_attn.o_proj", "in"),
    "attn_out": ("self_attn", 0),
    "resid_attn": ("post_attention_layernorm", "in"),
    "mlp_norm": ("post_attention_layernorm", "out"),
    "mlp_gate": ("mlp.gate_proj", "out"),
    "mlp_up": ("mlp.up_proj", "out"),
    "mlp_act": ("mlp.down_proj", "in"),
    "mlp_out": ("mlp", "out"),
    "resid_mlp": ("", "out"),
}
# Qwen3's per-head norms ([1, T, heads, d_head], before the heads are transposed).
_QK_NORM_LAYER: dict[str, tuple[str, str | int]] = {"q_norm": ("self_attn.q_norm", "out"),
                                                     "k_norm": ("self_attn.k_norm", "out")}  # fmt: skip
# Gemma 2's sandwich: post_attention_layernorm normalises the attention output, and the MLP has norms of its own.
_SANDWICH_LAYER: dict[str, tuple[str, str | int]] = {
    "attn_post_norm": ("post_attention_layernorm", "out"),
    "resid_attn": ("pre_feedforward_layernorm", "in"),
    "mlp_norm": ("pre_feedforward_layernorm", "out"),
    "mlp_post_norm": ("post_feedforward_layernorm", "out"),
}
# OLMo 2: no norm before attention or the MLP; the MLP reads the residual stream itself.
_NO_PRE_NORM_LAYER: dict[str, tuple[str, str | int]] = {"resid_attn": ("mlp", "in")}


# Phi-3's fused q/k/v (split as `Phi3Attention` splits it), and Phi-3's and GLM's fused gate/up
# (split in two halves, gate first, as their MLPs `chunk` it).
_FUSED_QKV_LAYER: dict[str, tuple[str, str | int]] = {"qkv": ("self_attn.qkv_proj", "out")}
_FUSED_GATE_UP_LAYER: dict[str, tuple[str, str | int]] = {"mlp_gate_up": ("mlp.gate_up_proj", "out")}
# A MoE layer: the router's logits [T, n_experts] (its first output), made probabilities as it makes them,
# and the top-k indices [T, top_k] it hands the experts (its third: `_, weights, indices = self.gate(h)`).
_MOE_LAYER: dict[str, tuple[str, str | int]] = {"router_logits": ("mlp.gate", 0), "experts": ("mlp.gate", 2)}
_DENSE_MLP_OPS = ("mlp_gate", "mlp_up", "mlp_act")


def _layer_points(config: ModelConfig, i: int) -> dict[str, tuple[str, str | int]]:
    """Where each stage of layer `i` is read, relative to the layer, with what is split or rebuilt
    from it (GPT-2's and Phi-3's "qkv", the fused "mlp_gate_up", a MoE layer's "router_logits")."""
    if config.family == "gpt2":
        return _GPT2_LAYER
    layer = dict(_LLAMA_LAYER)
    layer |= _QK_NORM_LAYER if config.qk_norm else {}
    layer |= _SANDWICH_LAYER if config.sandwich_norm else {}
    if not config.pre_norm:
        layer = {op: point for op, point in layer.items() if op not in ("attn_norm", "mlp_norm")} | _NO_PRE_NORM_LAYER
    if config.fused_qkv:
        layer = {op: point for op, point in layer.items() if op not in ("q", "k", "v")} | _FUSED_QKV_LAYER
    if config.is_moe_layer(i):
        layer = {op: point for op, point in layer.items() if op not in _DENSE_MLP_OPS} | _MOE_LAYER
    elif config.fused_gate_up:
        layer = {op: point for op, point in layer.items() if op not in ("mlp_gate", "mlp_up")} | _FUSED_GATE_UP_LAYER
    return layer


def _points(config: ModelConfig) -> dict[str, tuple[str, str | int]]:
    """Where each stage of `config`'s trace is read (plus what is split from them, and the rotary tables)."""
    top, prefix = (_GPT2_TOP, "transformer.h") if config.family == "gpt2" else (_LLAMA_TOP, "model.layers")
    points = dict(top)
    if not config.pre_norm:  # no input_layernorm: the embedding is layer 0's input
        points[stages.EMBED] = ("model.layers.0", "in")
    for i in range(config.n_layers):
        for op, (path, what) in _layer_points(config, i).items():
            points[stages.layer_stage(i, op)] = (f"{prefix}.{i}.{path}".rstrip("."), what)
    return points


def transformers_state(config: ModelConfig, weights: WeightMap) -> WeightMap:
    """`weights` (canonical: the published checkpoint names, `verifier.model.weights`) under the names
    and shapes of the live `transformers` 5 model's parameters (its `state_dict()`), each made when
    looked up (one layer's experts at a time).

    transformers 5 converts a MoE checkpoint when it loads one and reverses that when it saves: in
    memory each MoE layer's block is `mlp` (Mixtral's `block_sparse_moe` too), its router
    `mlp.gate.weight` [n_experts, d_model], and its experts two stacked tensors,
    `mlp.experts.gate_up_proj` [n_experts, 2 d_expert, d_model] (each expert's gate rows, then its up
    rows: `MixtralExperts` chunks the product in two, gate first) and `mlp.experts.down_proj`
    [n_experts, d_model, d_expert]. Without a shared expert, Qwen2-MoE's block still holds one of size
    0 (`shared_expert_intermediate_size` 0) and its gate, which multiplies nothing: they are zeros.
    Every other weight keeps its name.
    """
    if config.n_experts == 0:
        return weights
    d, moved = config.d_model, set()
    sources: dict[str, Any] = {}
    for i in range(config.n_layers):
        if not config.is_moe_layer(i):
            continue
        prefix, live = moe_prefix(config, i), f"model.layers.{i}.mlp."
        names = [expert_names(config, i, e) for e in range(config.n_experts)]
        moved |= {prefix + "gate.weight", *(n for expert in names for n in expert)}
        sources[live + "gate.weight"] = ((config.n_experts, d), lambda p=prefix: weights[p + "gate.weight"])
        f = config.expert_d_ff
        sources[live + "experts.gate_up_proj"] = (
            (config.n_experts, 2 * f, d),
            lambda names=names: np.stack([np.concatenate([weights[g], weights[u]]) for g, u, _ in names]),
        )
        sources[live + "experts.down_proj"] = ((config.n_experts, d, f), lambda names=names: np.stack(
            [weights[down] for _, _, down in names]))  # fmt: skip
        if config.family == "qwen2_moe" and config.d_shared_expert is None:
            for name, shape in (("gate_proj", (0, d)), ("up_proj", (0, d)), ("down_proj", (d, 0))):
                sources[f"{live}shared_expert.{name}.weight"] = (shape, lambda s=shape: np.zeros(s, np.float32))
            sources[live + "shared_expert_gate.weight"] = ((1, d), lambda: np.zeros((1, d), np.float32))
    shapes = weight_shapes(config)
    for name in shapes:
        if name not in moved:
            sources[name] = (shapes[name], lambda name=name: weights[name])
    return LazyWeights({name: shape for name, (shape, _) in sources.items()}, lambda name: sources[name][1]())


class TransformersModel:
    """A transformers causal LM behind the suite's model interface."""

    def __init__(self, config: ModelConfig, weights: Weights, dtype: Any = None) -> None:
        extra.require("the built-in transformers model")  # installed, and new enough to take `cache`
        import torch

        self._torch = torch
        self.config = config
        self.model = build_model(config, transformers_state(config, weights), dtype=dtype)
        if config.n_experts:
            # Each expert as its own matrix product, the plain math (as eager attention). transformers'
            # default, "grouped_mm", raises on the CPU where an expert's rows are not a multiple of 16
            # bytes ("strides should be multiple of 16 bytes", measured: d_model 16, d_expert 24, float32).
            self.model.set_experts_implementation("eager")
        # The precision class it declares: its weights and activations are in `dtype`.
        self.precision = {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dtype, "float32")
        if dtype == torch.float16:
            # No "attention_mask": transformers' eager attention adds finfo(float16).min = -65,504 to
            # masked scores, which overflows to -inf for a score below -16; a padded query sees only
            # masked keys, so its softmax row is all -inf and gives NaN, and the next layer reads that
            # padded position's NaN key and value at the real positions (NaN x 0 is NaN). Measured:
            # gpt2 d_model 6, 2 layers, weight scale 1, rows (0, 0) and (0,) left-padded: NaN at every
            # real position of the padded row (bfloat16's min, -3.4e38, absorbs a score: no NaN).
            self.capabilities = frozenset({"logits", "decode", "trace"})

    def _run(self, tokens: np.ndarray, **kwargs: Any) -> Any:
        torch = self._torch
        ids = torch.from_numpy(np.asarray(tokens, dtype=np.int64).reshape(-1, np.shape(tokens)[-1]))
        with torch.no_grad():
            return self.model(input_ids=ids, **kwargs)

    def _out(self, logits: Any, tokens: np.ndarray) -> np.ndarray:
        array = logits.float().numpy() if logits.dtype != self._torch.float64 else logits.numpy()
        return array if np.ndim(tokens) == 2 else array[0]

    def logits(self, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        """[T] -> [T, V] or [B, T] -> [B, T, V]; with a mask, positions count real tokens only."""
        if attention_mask is None:
            return self._out(self._run(tokens, use_cache=False).logits, tokens)
        torch = self._torch
        mask = torch.from_numpy(np.asarray(attention_mask, dtype=np.int64).reshape(-1, np.shape(tokens)[-1]))
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self._run(tokens, attention_mask=mask, position_ids=positions, use_cache=False)
        return self._out(out.logits, tokens)

    def decode(self, tokens: np.ndarray, cache: Any = None) -> tuple[np.ndarray, Any]:
        """Logits of a chunk after `cache` (a DynamicCache, or None) and the extended cache."""
        out = self._run(tokens, cache=copy.deepcopy(cache), use_cache=True)
        return self._out(out.logits, tokens), out.cache

    def trace(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """Every stage of one sequence [T], named and shaped as in `verifier.model.stages`."""
        if np.ndim(tokens) != 1:
            raise ValueError(f"trace takes one sequence [T], found shape {np.shape(tokens)}")
        captured: dict[str, Any] = {}
        handles = [
            self.model.get_submodule(path).register_forward_hook(_keep(captured, key, what))
            for key, (path, what) in _points(self.config).items()
        ]
        try:
            logits = self._run(tokens, use_cache=False).logits
        finally:
            for handle in handles:
                handle.remove()
        captured[stages.LOGITS] = logits
        self._split_fused(captured)
        self._rebuild_attention(captured)
        order = stages.stage_shapes(self.config, len(tokens))
        return {stage: _array(captured[stage][0]) for stage in order}

    def _split_fused(self, captured: dict[str, Any]) -> None:
        """Phi-3's q, k, v from its fused output (rows q, then k, then v); gate and up from a fused
        gate/up output (its two halves); a MoE layer's router probabilities [1, T, n_experts], the
        softmax in float32 as the router computes it (its logits are [T, n_experts], tokens flattened),
        and the experts it chose, int [1, T, top_k]."""
        c = self.config
        for i in range(c.n_layers):

            def stage(op: str, i: int = i) -> str:
                return stages.layer_stage(i, op)

            if c.fused_qkv:
                q_rows, kv_rows = c.n_heads * c.d_head, c.n_kv_heads * c.d_head
                qkv = captured.pop(stage("qkv"))
                captured[stage("q")], captured[stage("k")], captured[stage("v")] = qkv.split(
                    [q_rows, kv_rows, kv_rows], dim=-1
                )
            if c.is_moe_layer(i):
                logits = captured.pop(stage("router_logits"))
                captured[stage("router_probs")] = self._torch.softmax(logits.float(), dim=-1)[None]
                captured[stage("experts")] = captured[stage("experts")][None]
            elif c.fused_gate_up:
                captured[stage("mlp_gate")], captured[stage("mlp_up")] = captured.pop(stage("mlp_gate_up")).chunk(
                    2, dim=-1
                )

    def _rebuild_attention(self, captured: dict[str, Any]) -> None:
        """Add q, k, v (and Qwen3's q_norm, k_norm) in heads [1, heads, T, d_head], q_rope / k_rope of the
        RoPE families, and scores (scaled by the module's own `scaling`, soft-capped as Gemma 2 caps)."""
        c = self.config
        for i in range(c.n_layers):

            def stage(op: str, i: int = i) -> str:
                return stages.layer_stage(i, op)

            attention = self.model.get_submodule(
                f"transformer.h.{i}.attn" if c.family == "gpt2" else f"model.layers.{i}.self_attn"
            )
            if c.family == "gpt2":
                q, k, v = captured.pop(stage("qkv")).split(c.d_model, dim=2)
                captured[stage("q")], captured[stage("k")], captured[stage("v")] = (
                    _heads(x, c.d_head) for x in (q, k, v)
                )
                q, k = captured[stage("q")], captured[stage("k")]
            else:
                # The family's own RoPE (Phi-3's and GLM's rotate a head's first rotary_dim dims, GLM's
                # interleaved pairs) and key repetition, from the module that defines its attention.
                family_code = importlib.import_module(type(attention).__module__)
                apply_rotary_pos_emb, repeat_kv = family_code.apply_rotary_pos_emb, family_code.repeat_kv
                for op in ("q", "k", "v"):
                    captured[stage(op)] = _heads(captured[stage(op)], c.d_head)
                if c.qk_norm:  # [1, T, heads, d_head] as the module normalises it (OLMo 2: [1, T, heads x d_head])
                    for op in ("q_norm", "k_norm"):
                        normed = captured[stage(op)]
                        captured[stage(op)] = _heads(normed, c.d_head) if c.qk_norm_whole else normed.transpose(1, 2)
                rotated = ("q_norm", "k_norm") if c.qk_norm else ("q", "k")
                q, k = captured[stage(rotated[0])], captured[stage(rotated[1])]
                if getattr(attention, "use_rope", True):  # SmolLM3's module says whether its layer rotates
                    q, k = apply_rotary_pos_emb(q, k, *captured["rotary"])
                captured[stage("q_rope")], captured[stage("k_rope")] = q, k
                k = repeat_kv(k, c.n_heads // c.n_kv_heads)
            scores = self._torch.matmul(q, k.transpose(2, 3)) * attention.scaling
            cap = getattr(attention, "attn_logit_softcapping", None)
            captured[stage("scores")] = scores if cap is None else self._torch.tanh(scores / cap) * cap


def _array(x: Any) -> np.ndarray:
    """A captured tensor as NumPy: values in float32 (whatever the model's dtype), indices as they are."""
    return x.float().numpy() if x.is_floating_point() else x.numpy()


def _heads(x: Any, d_head: int) -> Any:
    """[1, T, heads * d_head] -> [1, heads, T, d_head], as transformers' attention reshapes."""
    return x.view(*x.shape[:-1], -1, d_head).transpose(1, 2)


def _keep(captured: dict[str, Any], key: str, what: str | int) -> Any:
    """A forward hook that stores the module's first input, output, or output[what] under `key`."""

    def hook(module: Any, args: tuple[Any, ...], output: Any) -> None:
        if what == "in":
            captured[key] = args[0].detach()
        elif what == "out":
            captured[key] = output.detach() if hasattr(output, "detach") else output
        else:
            captured[key] = output[what].detach()

    return hook


def build(config: ModelConfig, weights: Weights) -> TransformersModel:
    """The family's transformers model (`GPT2LMHeadModel`, `LlamaForCausalLM`, ...) in float32, eager attention."""
    return TransformersModel(config, weights)


def build_bfloat16(config: ModelConfig, weights: Weights) -> TransformersModel:
    """The same in bfloat16 (`model.to(torch.bfloat16)`, on the CPU), precision class bfloat16."""
    import torch

    return TransformersModel(config, weights, dtype=torch.bfloat16)


def build_float16(config: ModelConfig, weights: Weights) -> TransformersModel:
    """The same in float16 (on the CPU), precision class float16; without the attention mask (left
    padding gives NaN at real positions there: see `TransformersModel.__init__`)."""
    import torch

    return TransformersModel(config, weights, dtype=torch.float16)
