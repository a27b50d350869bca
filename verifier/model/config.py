"""One frozen config for every family the suite runs: GPT-2, and the Llama layout with its switches.

The field names are the suite's one vocabulary (`d_model`, `n_heads`, `n_kv_heads`, `d_head`,
`d_ff`, `vocab_size`, `n_ctx`); `to_transformers` / `from_transformers` translate to and from
the `transformers` config classes, and `from_hf_dict` reads the contents of a `config.json`.
This module does no I/O and imports `transformers` only inside the functions that need it.

A family is GPT-2, or the Llama layout (RMSNorm, RoPE, gated MLP, grouped-query attention) with a
set of switches, each one piece of math a family adds:

| family  | switches it sets (fixed) or allows (free)                                               |
|---------|------------------------------------------------------------------------------------------|
| llama   | free: rope_scaling, attention bias (q/k/v and o together), head_dim                      |
| mistral | free: sliding_window (every layer), rope_scaling, head_dim                               |
| qwen2   | fixed: qkv_bias; free: sliding_window with layer_types, rope_scaling                     |
| qwen3   | fixed: qk_norm; free: head_dim, attention bias, sliding_window with layer_types          |
| gemma   | fixed: gelu_tanh gate, norm_plus_one, embed_scale; free: head_dim, attention bias        |
| gemma2  | gemma's, and sandwich_norm; free: softcaps, query_scale, sliding_window with layer_types  |
| mixtral | fixed: norm_topk; routed experts (n_experts, top_k); free: sliding_window, rope_scaling  |
| qwen2_moe | fixed: qkv_bias; routed experts; free: d_expert, norm_topk, d_shared_expert, dense_layers, windows |
| phi3    | fixed: fused_qkv, fused_gate_up; free: rotary_dim (partial rotary), sliding_window        |
| glm     | fixed: fused_gate_up, interleaved rope_pairs; free: rotary_dim, head_dim, q/k/v bias       |
| qwen3_moe | qwen3's attention; routed experts; free: d_expert, norm_topk, dense_layers, window, scaling |
| smollm3 | llama's; free: nope_layers (layers without RoPE), sliding_window with layer_types            |
| olmo2   | fixed: qk_norm over the whole projection, norms after attention and the MLP only; free: bias, scaling |

A mixture-of-experts family (`MOE_FAMILIES`) replaces each layer's MLP (but `dense_layers`) by a
router [n_experts, d_model] and n_experts gated MLPs of size `d_expert` (d_ff when None): each token's
router probabilities softmax(h W_r^T), its top_k experts by probability, their outputs weighted by
their probabilities (renormalised to sum 1 where `norm_topk`), plus, with `d_shared_expert`, a shared
gated MLP weighted by sigmoid(h w_s). Fused layouts (`fused_qkv`, `fused_gate_up`) change where
weights are stored, not what is computed. Partial rotary (`rotary_dim`) rotates each head's first
rotary_dim dimensions and passes the rest; `rope_pairs` says which of them RoPE pairs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from dataclasses import dataclass
from typing import Any, Literal, cast

from verifier.messages import BoundedMessage
from verifier.model.families import RECORDS, FamilyRecord

# The families' names, for the type checker: the records' names (`verifier.model.families.RECORDS`), as a
# test checks.
Family = Literal[
    "gpt2",
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "mixtral",
    "qwen2_moe",
    "phi3",
    "glm",
    "qwen3_moe",
    "smollm3",
    "olmo2",
]
FAMILIES: tuple[Family, ...] = cast(tuple[Family, ...], tuple(RECORDS))
# The families of the Llama layout (RMSNorm, RoPE, gated MLP): every family but GPT-2.
ROPE_FAMILIES: tuple[Family, ...] = FAMILIES[1:]
# The families whose MLPs are routed experts.
MOE_FAMILIES: tuple[Family, ...] = tuple(f for f in FAMILIES if RECORDS[f].moe)
# The families whose published checkpoints tie the classifier to the embedding (their config's default).
TIED_FAMILIES: tuple[Family, ...] = tuple(
    f for f in FAMILIES if f == "gpt2" or RECORDS[f].defaults.get("tie_word_embeddings")
)
Activation = Literal["silu", "gelu_tanh"]
LayerType = Literal["full_attention", "sliding_attention"]
LAYER_TYPES: tuple[LayerType, ...] = ("full_attention", "sliding_attention")
# Which dimensions of a head's rotated part RoPE pairs: (i, i + r/2) as `transformers`' Llama stores
# q and k ("rotate_half"), or (2i, 2i + 1) as GLM computes it ("interleaved"); r = rotary_dim or d_head.
RopePairs = Literal["rotate_half", "interleaved"]
ROPE_PAIRS: tuple[RopePairs, ...] = ("rotate_half", "interleaved")


class ConfigError(BoundedMessage, ValueError):
    """A config whose fields cannot describe a model; the message names the field and why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class RopeScaling:
    """How a RoPE family stretches its frequencies past the context it was trained at.

    "linear": every inverse frequency divided by `factor` (positions compressed). "llama3" (Llama
    3.1/3.2), by each frequency's wavelength w = 2 pi / inv_freq: w < original_n_ctx / high_freq_factor
    kept; w > original_n_ctx / low_freq_factor divided by `factor`; in between (1 - s) inv_freq / factor
    + s inv_freq with s = (original_n_ctx / w - low_freq_factor) / (high_freq_factor - low_freq_factor).
    """

    kind: Literal["linear", "llama3"]
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_n_ctx: int = 8192


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and choices of one transformer; validated on construction.

    GPT-2: learned positions, LayerNorm with bias, tanh-GELU MLP, fused qkv with bias.
    Llama: RMSNorm, RoPE (rotate-half layout, as `transformers` stores q/k), SwiGLU MLP,
    no biases, grouped-query attention when `n_kv_heads < n_heads`. The other families are the
    Llama layout with the switches below, whose defaults are Llama's (see the module's table).
    """

    family: Family
    vocab_size: int  # V: the tokens, the embedding's and the classifier's rows
    n_ctx: int  # the longest sequence (GPT-2's learned positions; RoPE's positions are computed)
    d_model: int  # the width of the residual stream
    n_layers: int  # the blocks
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (fewer: grouped-query attention, each shared by n_heads / n_kv_heads)
    d_ff: int  # the MLP's hidden width (a MoE family's expert width where d_expert is unset)
    norm_eps: float  # the epsilon inside every norm's square root
    tie_embeddings: bool  # the classifier is the token embedding (no lm_head of its own)
    rope_theta: float = 10000.0  # RoPE's base: frequency i is rope_theta ** (-2i / rotated dims)
    head_dim: int | None = None  # d_head when it is not d_model // n_heads (Qwen3, Gemma)
    rope_scaling: RopeScaling | None = None  # longer contexts: Llama 3's bands or linear position scaling
    qkv_bias: bool = False  # q, k, v projections have biases (Qwen2; `attention_bias` elsewhere)
    o_bias: bool = False  # the output projection has a bias (`attention_bias` of Llama, Qwen3, Gemma)
    qk_norm: bool = False  # Qwen3: an RMSNorm over each head's q and k, before RoPE
    qk_norm_whole: bool = False  # OLMo 2: the q/k RMSNorm over the whole projection (all heads), not each head
    mlp_act: Activation = "silu"  # the gate's activation: SwiGLU, or GeGLU with tanh GELU (Gemma)
    norm_plus_one: bool = False  # Gemma: RMSNorm scales by (1 + w), computed in float32
    embed_scale: bool = False  # Gemma: embeddings times sqrt(d_model), rounded to the model's dtype
    sandwich_norm: bool = False  # Gemma 2: RMSNorms after attention and after the MLP too
    pre_norm: bool = True  # the RMSNorms before attention and before the MLP (OLMo 2: none, only the sandwich's after)
    sliding_window: int | None = None  # W: a sliding layer's query at t sees keys t - W + 1 .. t
    layer_types: tuple[LayerType, ...] = ()  # per layer, "sliding_attention" or "full_attention"; (): as the window
    attn_softcap: float | None = None  # Gemma 2: scores -> cap * tanh(scores / cap), before the mask
    final_softcap: float | None = None  # Gemma 2: the same on the logits
    query_scale: int | None = None  # Gemma 2's query_pre_attn_scalar: scores scaled by its -1/2 power
    rotary_dim: int | None = None  # partial rotary: RoPE on each head's first rotary_dim dims only (Phi-3, GLM)
    rope_pairs: RopePairs = "rotate_half"  # which dims of the rotated part RoPE pairs (GLM: interleaved)
    fused_qkv: bool = False  # Phi-3: q, k, v stored as one [(n_heads + 2 n_kv_heads) d_head, d_model] matrix
    fused_gate_up: bool = False  # Phi-3, GLM: gate and up stored as one [2 d_ff, d_model] matrix, gate first
    n_experts: int = 0  # routed experts a layer (Mixtral, Qwen2-MoE); 0: one dense MLP
    top_k: int = 0  # the experts each token uses (num_experts_per_tok)
    d_expert: int | None = None  # an expert's hidden size where it is not d_ff (Qwen2-MoE's moe_intermediate_size)
    norm_topk: bool = False  # the top_k probabilities renormalised to sum 1 (Mixtral; Qwen2-MoE's norm_topk_prob)
    d_shared_expert: int | None = None  # Qwen2-MoE: a shared expert of this size, gated by sigmoid(h w_s)
    dense_layers: tuple[int, ...] = ()  # MoE layers whose MLP is dense, of size d_ff (Qwen2-MoE's mlp_only_layers)
    nope_layers: tuple[int, ...] = ()  # SmolLM3: the layers whose attention has no RoPE (q and k unrotated)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def d_head(self) -> int:
        """Size of one attention head: `head_dim` if set, else `d_model // n_heads`."""
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    @property
    def rotated_dims(self) -> int:
        """r, the dimensions of each head RoPE rotates: `rotary_dim` if set, else d_head."""
        return self.rotary_dim if self.rotary_dim is not None else self.d_head

    @property
    def expert_d_ff(self) -> int:
        """The hidden size of one routed expert: `d_expert` if set, else d_ff."""
        return self.d_expert if self.d_expert is not None else self.d_ff

    def matrix_inputs(self) -> dict[str, int]:
        """The input widths of the weight matrices, by what sets them: d_model (q, k, v, the MLP's
        gate and up, routers, the classifier), the heads' n_heads x d_head (the output projection),
        and the hidden sizes the down projections read (d_ff where a layer is dense, d_expert, d_shared_expert)."""
        widths = {"d_model": self.d_model, "n_heads x d_head": self.n_heads * self.d_head}
        if any(not self.is_moe_layer(i) for i in range(self.n_layers)):
            widths["d_ff"] = self.d_ff
        if self.n_experts:
            widths["d_expert" if self.d_expert is not None else "d_ff"] = self.expert_d_ff
        if self.d_shared_expert is not None:
            widths["d_shared_expert"] = self.d_shared_expert
        return widths

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer `layer`'s MLP is routed experts (a MoE family, and not one of `dense_layers`)."""
        return self.n_experts > 0 and layer not in self.dense_layers

    @property
    def uses_rope(self) -> bool:
        """Every family of the Llama layout (all but GPT-2)."""
        return self.family != "gpt2"

    def rotates(self, layer: int) -> bool:
        """Whether layer `layer`'s attention applies RoPE to q and k (a RoPE family, and not a NoPE layer)."""
        return self.uses_rope and layer not in self.nope_layers

    def window(self, layer: int) -> int | None:
        """The sliding window W of layer `layer`, or None where it attends to every earlier position."""
        if self.sliding_window is None:
            return None
        if self.layer_types and self.layer_types[layer] != "sliding_attention":
            return None
        return self.sliding_window

    @property
    def attention_scale(self) -> float:
        """What q k^T is multiplied by: 1/sqrt(d_head), or Gemma 2's 1/sqrt(query_pre_attn_scalar)."""
        return 1.0 / math.sqrt(self.query_scale if self.query_scale is not None else self.d_head)

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_transformers(self) -> Any:
        """The equivalent `transformers` config (`GPT2Config`, `LlamaConfig`, `Gemma2Config`, ...);
        ExtraMissing without transformers."""
        from verifier import extra

        extra.require("ModelConfig.to_transformers()", ("transformers",))
        import transformers

        fields = self.to_hf_dict()
        del fields["architectures"], fields["model_type"]
        return getattr(transformers, HF_CLASSES[self.family][0])(**fields)

    def _gpt2_hf_fields(self) -> dict[str, Any]:
        return {
            "model_type": "gpt2",
            "vocab_size": self.vocab_size,
            "n_positions": self.n_ctx,
            "n_embd": self.d_model,
            "n_layer": self.n_layers,
            "n_head": self.n_heads,
            "n_inner": self.d_ff,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": self.norm_eps,
            "tie_word_embeddings": self.tie_embeddings,
            "bos_token_id": self.vocab_size - 1,
            "eos_token_id": self.vocab_size - 1,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
        }

    def _rope_parameters(self) -> dict[str, Any]:
        scaling = self.rope_scaling
        if self.family in PARTIAL_ROTARY_FAMILIES:  # neither has RoPE scaling (FAMILY_SWITCHES)
            factor = partial_rotary_factor(self.rotated_dims, self.d_head)
            return {"rope_type": "default", "rope_theta": self.rope_theta, "partial_rotary_factor": factor}
        if scaling is None:
            return {"rope_type": "default", "rope_theta": self.rope_theta}
        if scaling.kind == "linear":
            return {"rope_type": "linear", "rope_theta": self.rope_theta, "factor": scaling.factor}
        return {
            "rope_type": "llama3",
            "rope_theta": self.rope_theta,
            "factor": scaling.factor,
            "low_freq_factor": scaling.low_freq_factor,
            "high_freq_factor": scaling.high_freq_factor,
            "original_max_position_embeddings": scaling.original_n_ctx,
        }

    def _rope_family_hf_fields(self) -> dict[str, Any]:
        """The config.json fields of a Llama-layout family, under the keys its `transformers` class reads."""
        family = self.family
        fields: dict[str, Any] = {
            "model_type": family,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.n_ctx,
            "hidden_size": self.d_model,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "intermediate_size": self.d_ff,
            "rms_norm_eps": self.norm_eps,
            "tie_word_embeddings": self.tie_embeddings,
            "rope_parameters": self._rope_parameters(),
            "bos_token_id": 1 if self.vocab_size > 1 else 0,
            "eos_token_id": 2 if self.vocab_size > 2 else 0,
        }
        record = RECORDS[family]
        if record.head_dim_key:  # else it is hidden_size / num_attention_heads
            fields["head_dim"] = self.d_head
        if record.attention_bias == "both":
            fields["attention_bias"] = self.o_bias
        elif record.attention_bias == "qkv":
            fields["attention_bias"] = self.qkv_bias
        fields |= record.written
        fields[record.activation_key] = "silu" if self.mlp_act == "silu" else "gelu_pytorch_tanh"
        if record.windows == "every layer":
            fields["sliding_window"] = self.sliding_window
        if record.windows == "use_sliding_window":
            fields |= {"use_sliding_window": self.sliding_window is not None, "sliding_window": self.sliding_window}
        if record.moe:
            fields |= self._expert_hf_fields()
        if "nope_layers" in record.free:
            fields["no_rope_layers"] = [int(self.rotates(i)) for i in range(self.n_layers)]
        if record.windows == "smollm3":
            fields |= {
                "use_sliding_window": self.sliding_window is not None,
                "sliding_window": self.sliding_window,
                "layer_types": [self.layer_type(i) for i in range(self.n_layers)],
            }
        if record.windows in ("qwen", "qwen2_moe"):
            fields |= {
                "use_sliding_window": self.sliding_window is not None,
                "sliding_window": self.sliding_window,
                "max_window_layers": self.n_layers,
                "layer_types": [self.layer_type(i) for i in range(self.n_layers)],
            }
        if record.windows == "gemma2":
            fields |= {
                # Gemma2Model builds its sliding mask whether a layer uses it or not, and refuses a null
                # window: without one, every layer is "full_attention" and n_ctx stands in, unused.
                "sliding_window": self.sliding_window if self.sliding_window is not None else self.n_ctx,
                "layer_types": [self.layer_type(i) for i in range(self.n_layers)],
                "attn_logit_softcapping": self.attn_softcap,
                "final_logit_softcapping": self.final_softcap,
                "query_pre_attn_scalar": self.query_scale if self.query_scale is not None else self.d_head,
            }
        return fields

    def _expert_hf_fields(self) -> dict[str, Any]:
        """A MoE family's router and expert keys (Mixtral: the experts are intermediate_size wide)."""
        record = RECORDS[self.family]
        fields: dict[str, Any] = {record.expert_keys[0]: self.n_experts, "num_experts_per_tok": self.top_k}
        if "d_expert" in record.free:
            fields |= {"moe_intermediate_size": self.expert_d_ff, "norm_topk_prob": self.norm_topk}
        if "d_shared_expert" in record.free:
            # Qwen2MoeSparseMoeBlock always builds a shared expert: one of size 0 adds 0 times its gate
            fields["shared_expert_intermediate_size"] = self.d_shared_expert or 0
        if "dense_layers" in record.free:
            fields |= {"decoder_sparse_step": 1, "mlp_only_layers": list(self.dense_layers)}
        return fields

    def layer_type(self, layer: int) -> LayerType:
        """`transformers`' name of layer `layer`'s attention: "sliding_attention" or "full_attention"."""
        return "full_attention" if self.window(layer) is None else "sliding_attention"

    def to_hf_dict(self) -> dict[str, Any]:
        """The fields of a `config.json` for this model (what `save_pretrained` would write)."""
        fields = self._gpt2_hf_fields() if self.family == "gpt2" else self._rope_family_hf_fields()
        return {"architectures": [HF_CLASSES[self.family][1]], **fields}


# Per family: the `transformers` config class and the model class a config.json names.
HF_CLASSES: dict[Family, tuple[str, str]] = {f: (RECORDS[f].hf_config, RECORDS[f].hf_model) for f in FAMILIES}


def describe(config: ModelConfig) -> str:
    """One line of the sizes that matter: `llama family, 6 layers, d_model 288, 6 heads, ...`."""
    heads = f"{config.n_heads} heads"
    if config.n_kv_heads != config.n_heads:
        heads += f" ({config.n_kv_heads} kv heads)"
    return (
        f"{config.family} family, {config.n_layers} layers, d_model {config.d_model}, {heads}, "
        f"d_ff {config.d_ff}, vocab {config.vocab_size:,}, n_ctx {config.n_ctx:,}"
    )


def from_transformers(hf_config: Any) -> ModelConfig:
    """The suite's config for a `transformers` config of one of the families (`GPT2Config`, `LlamaConfig`, ...)."""
    return from_hf_dict(hf_config.to_dict())


def from_hf_dict(fields: dict[str, Any]) -> ModelConfig:
    """The suite's config from the contents of a Hugging Face `config.json`.

    Each family is read as `transformers` reads it: the keys its config class defines, with that
    class's defaults where a key is absent. Raises ConfigError naming the config.json key for a
    model type the suite does not implement, for a setting that changes the math in a way the
    reference does not (biased MLP, yarn RoPE, another activation, ...), and for a key the reader
    does not know, so that nothing in the file is silently ignored.
    """
    model_type = fields.get("model_type")
    if not isinstance(model_type, str) or model_type not in HF_KEYS:  # a list or object is no key either
        raise ConfigError("model_type", f"expected one of {FAMILIES}, found {quote(model_type)}")
    try:
        if model_type == "gpt2":
            return _from_gpt2_fields(fields)
        return _from_rope_family_fields(cast(Family, model_type), fields)
    except ConfigError as e:  # a rule across fields (d_model % n_heads, ...): named by the file's key
        if e.field in fields and e.field not in METADATA_KEYS:  # a key the reader named (top_k is generation's)
            raise
        if e.field.startswith("rope_scaling.") and not fields.get("rope_scaling"):  # read from rope_parameters
            raise ConfigError("rope_parameters" + e.field.removeprefix("rope_scaling"), e.reason) from None
        keys = HF_KEYS[model_type].get(e.field)
        if keys is None:
            raise
        raise ConfigError(next((k for k in keys if fields.get(k) is not None), keys[0]), e.reason) from None


_ROPE_FAMILY_KEYS: dict[str, tuple[str, ...]] = {
    "vocab_size": ("vocab_size",),
    "n_ctx": ("max_position_embeddings",),
    "d_model": ("hidden_size",),
    "n_layers": ("num_hidden_layers",),
    "n_heads": ("num_attention_heads",),
    "n_kv_heads": ("num_key_value_heads",),
    "d_ff": ("intermediate_size",),
    "norm_eps": ("rms_norm_eps",),
    "tie_embeddings": ("tie_word_embeddings",),
    "rope_scaling": ("rope_scaling", "rope_parameters"),
    "head_dim": ("head_dim",),
    "qkv_bias": ("attention_bias",),
    "o_bias": ("attention_bias",),
    "sliding_window": ("sliding_window",),
    "layer_types": ("layer_types",),
    "attn_softcap": ("attn_logit_softcapping",),
    "final_softcap": ("final_logit_softcapping",),
    "query_scale": ("query_pre_attn_scalar",),
}
_EXPERT_KEYS: dict[str, tuple[str, ...]] = {
    "top_k": ("num_experts_per_tok",),
    "d_expert": ("moe_intermediate_size",),
    "d_shared_expert": ("shared_expert_intermediate_size",),
    "norm_topk": ("norm_topk_prob",),
    "dense_layers": ("mlp_only_layers", "decoder_sparse_step"),
}
# The config.json keys each field is read from, per model type (the first one present is read).
HF_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "gpt2": {
        "vocab_size": ("vocab_size",),
        "n_ctx": ("n_positions", "max_position_embeddings"),
        "d_model": ("n_embd", "hidden_size"),
        "n_layers": ("n_layer", "num_hidden_layers"),
        "n_heads": ("n_head", "num_attention_heads"),
        "d_ff": ("n_inner",),
        "norm_eps": ("layer_norm_epsilon",),
    },
    **{family: _ROPE_FAMILY_KEYS for family in ROPE_FAMILIES},
    # the expert count under the names its config class reads (`FamilyRecord.expert_keys`)
    **{f: _ROPE_FAMILY_KEYS | _EXPERT_KEYS | {"n_experts": RECORDS[f].expert_keys} for f in MOE_FAMILIES},
}
_GPT2 = HF_KEYS["gpt2"]

# Keys of every config.json that do not change what the model computes: provenance, token ids,
# training-time settings (initialisation, dropout, which are off at inference), the generation
# defaults `transformers` moves to GenerationConfig, and `PretrainedConfig`'s task fields.
METADATA_KEYS = frozenset({
    "architectures", "model_type", "transformers_version", "_name_or_path", "name_or_path", "_commit_hash",
    "torch_dtype", "dtype", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "use_cache",
    "attention_dropout", "output_attentions", "output_hidden_states", "return_dict", "chunk_size_feed_forward",
    "id2label", "label2id", "num_labels", "problem_type", "attn_implementation", "_attn_implementation_autoset",
    "cache_implementation", "tokenizer_class",
    # GenerationConfig's defaults, popped by PretrainedConfig when found in a config.json
    "assistant_confidence_threshold", "assistant_lookbehind", "bad_words_ids", "begin_suppress_tokens",
    "diversity_penalty", "do_sample", "early_stopping", "encoder_no_repeat_ngram_size",
    "encoder_repetition_penalty", "epsilon_cutoff", "eta_cutoff", "exponential_decay_length_penalty",
    "forced_bos_token_id", "forced_eos_token_id", "length_penalty", "max_length", "min_length",
    "no_repeat_ngram_size", "num_assistant_tokens", "num_assistant_tokens_schedule", "num_beam_groups",
    "num_beams", "num_return_sequences", "output_scores", "remove_invalid_values", "repetition_penalty",
    "return_dict_in_generate", "suppress_tokens", "target_lookbehind", "temperature", "top_k", "top_p",
    "typical_p",
})  # fmt: skip
# Keys that change nothing at one value only (the value every published config holds); another
# value is refused by name. Per key: the values that are allowed.
_INERT_VALUES: dict[str, tuple[Any, ...]] = {
    "is_encoder_decoder": (False,),
    "pretraining_tp": (1, None),  # Llama 2's tensor-parallel slicing of the MLP: 1 is the plain matmul
    "partial_rotary_factor": (1.0, 1, None),  # RoPE over the whole head
    "use_mrope": (False,),  # Qwen2.5's multimodal RoPE switch, off in the text checkpoints
    "use_bidirectional_attention": (False, None),  # Gemma: causal attention
    "mlp_bias": (False,),  # Llama: no MLP biases
    "add_cross_attention": (False,),  # GPT-2 as a decoder only
    "n_special": (0,),  # the original GPT's extra special-token embeddings
}
_COMMON_KEYS = frozenset({
    "vocab_size", "max_position_embeddings", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "intermediate_size", "rms_norm_eps", "tie_word_embeddings", "rope_theta",
    "rope_scaling", "rope_parameters", "partial_rotary_factor", "hidden_act", "is_encoder_decoder",
})  # fmt: skip
# Per family: the keys its reader understands beyond the common ones (each one read below).
FAMILY_KEYS: dict[str, frozenset[str]] = {f: RECORDS[f].keys for f in FAMILIES}
# The families whose config reads partial_rotary_factor (top level, or in rope_parameters) as partial rotary.
PARTIAL_ROTARY_FAMILIES = tuple(f for f in FAMILIES if RECORDS[f].partial_rotary)
# Per family: `transformers`' default for a key absent from config.json (its config class's field
# default; what `save_pretrained` may leave out). `None` for num_key_value_heads: as many as the query heads.
HF_DEFAULTS: dict[str, dict[str, Any]] = {f: dict(RECORDS[f].defaults) for f in ROPE_FAMILIES}
# The `hidden_act` / `hidden_activation` values `transformers` maps to GELU's tanh approximation.
_TANH_GELU = ("gelu_pytorch_tanh",)
_LEGACY_LAYER_TYPES = {"attention": "full_attention"}  # transformers' remap_legacy_layer_types


def _check_keys(family: str, f: dict[str, Any]) -> None:
    """Refuse a key the reader does not understand, and an inert key holding a value that is not inert."""
    known = METADATA_KEYS | FAMILY_KEYS[family] | (_COMMON_KEYS if family != "gpt2" else frozenset())
    for key in f:
        if key not in known:
            raise ConfigError(key, f"not a key the suite reads for {family} configs (it would be silently ignored)")
        if key not in _INERT_VALUES or key in RECORDS[family].ignored:
            continue
        if key == "partial_rotary_factor" and family in PARTIAL_ROTARY_FAMILIES:
            continue
        flags = all(isinstance(v, bool) or v is None for v in _INERT_VALUES[key])
        if flags and not isinstance(f[key], bool) and f[key] is not None:  # as flag_field says it
            raise ConfigError(key, f"must be true or false, found {type(f[key]).__name__} {quote(f[key])}")
        if not any(_same(f[key], v) for v in _INERT_VALUES[key]):
            allowed = " or ".join(json.dumps(v) for v in _INERT_VALUES[key])
            raise ConfigError(key, f"only {allowed} is implemented, found {quote(f[key])}")


def _same(a: Any, b: Any) -> bool:
    """The same JSON value: `true` is not 1, nor 1 true."""
    return type(a) is type(b) and a == b


def _require(fields: dict[str, Any], *names: str) -> Any:
    for name in names:
        if fields.get(name) is not None:
            return fields[name]
    raise ConfigError(names[0], "missing from the config")


def _size(fields: dict[str, Any], maximum: int, *names: str) -> int:
    """The first of `names` present, checked as a size in 1..maximum under the config.json key it came from."""
    value = _require(fields, *names)
    return check_size(next(name for name in names if fields.get(name) is not None), value, maximum)


def _number(fields: dict[str, Any], name: str, default: float) -> float:
    """Field `name` as a finite float: a JSON number, not a boolean (`true` is not 1.0), not Infinity or NaN."""
    value = fields.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(name, f"must be a number, found {type(value).__name__} {quote(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        number = math.inf
    if not math.isfinite(number):
        raise ConfigError(name, f"must be finite, found {quote(value)}")
    return number


def _optional_number(fields: dict[str, Any], name: str, default: float | None) -> float | None:
    """Field `name` as `_number` reads it, or None where the file holds null."""
    value = fields.get(name, default)
    return None if value is None else _number({name: value}, name, 0.0)


def _optional_size(fields: dict[str, Any], name: str, default: int | None, maximum: int) -> int | None:
    """Field `name` as a size in 1..maximum, `default` if absent, None where the file holds null."""
    value = fields.get(name, default)
    return None if value is None else check_size(name, value, maximum)


def _from_gpt2_fields(f: dict[str, Any]) -> ModelConfig:
    _check_keys("gpt2", f)
    activation = f.get("activation_function", "gelu_new")
    if activation != "gelu_new":
        raise ConfigError(
            "activation_function", f"only 'gelu_new' (GPT-2's tanh GELU) is implemented, found {quote(activation)}"
        )
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if flag_field(f, flag, False):
            raise ConfigError(flag, "GPT-2 variants with this flag set are not implemented")
    if not flag_field(f, "scale_attn_weights", True):
        raise ConfigError("scale_attn_weights", "attention without 1/sqrt(d_head) scaling is not implemented")
    d_model = _size(f, D_MODEL_MAX, *_GPT2["d_model"])
    n_heads = _size(f, N_HEADS_MAX, *_GPT2["n_heads"])
    return ModelConfig(
        family="gpt2",
        vocab_size=_size(f, VOCAB_SIZE_MAX, *_GPT2["vocab_size"]),
        n_ctx=_size(f, N_CTX_MAX, *_GPT2["n_ctx"]),
        d_model=d_model,
        n_layers=_size(f, N_LAYERS_MAX, *_GPT2["n_layers"]),
        n_heads=n_heads,
        n_kv_heads=n_heads,
        d_ff=_size(f, D_FF_MAX, *_GPT2["d_ff"]) if f.get("n_inner") is not None else 4 * d_model,
        norm_eps=_number(f, _GPT2["norm_eps"][0], 1e-5),
        tie_embeddings=flag_field(f, "tie_word_embeddings", True),
    )


# The keys of each RoPE type's parameters the reader understands (besides rope_type / type / rope_theta).
_ROPE_TYPE_KEYS: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


def _rope_key(f: dict[str, Any]) -> str:
    """The key RoPE's parameters are read from: the legacy `rope_scaling` when set, else `rope_parameters`."""
    return "rope_scaling" if f.get("rope_scaling") else "rope_parameters"


def _rope(f: dict[str, Any], family: str) -> tuple[float, RopeScaling | None]:
    """rope_theta and the scaling, read as `transformers` 5 standardises them: the legacy `rope_scaling`
    wins over `rope_parameters` when set, the type is `rope_type` (or the older `type`), and rope_theta
    is read inside the parameters first, then at the top level, then the class's default (10000;
    Mixtral 1e6)."""
    key = _rope_key(f)
    rope = f.get(key) or {}
    if not isinstance(rope, dict):
        raise ConfigError(key, f"must be an object, found {type(rope).__name__} {quote(rope)}")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if family == "phi3" and rope_type in ("su", "yarn", "longrope"):  # Phi3Config reads su and yarn as longrope
        raise ConfigError(key, f"rope_type {quote(rope_type)} is Phi-3's longrope (long_factor and short_factor "
                               "per frequency), which is not implemented")  # fmt: skip
    if not isinstance(rope_type, str) or rope_type not in _ROPE_TYPE_KEYS:
        implemented = ", ".join(_ROPE_TYPE_KEYS)
        raise ConfigError(key, f"rope_type {quote(rope_type)} is not implemented (only {implemented})")
    for name in rope:
        if name not in ("rope_type", "type", "rope_theta", *_ROPE_TYPE_KEYS[rope_type]):
            if name == "partial_rotary_factor" and (
                family in PARTIAL_ROTARY_FAMILIES or any(_same(rope[name], one) for one in (1, 1.0))
            ):
                continue  # read by _rotary_dim
            raise ConfigError(f"{key}.{name}", f"not a parameter the suite reads for rope_type {quote(rope_type)}")
    default_theta = HF_DEFAULTS.get(family, {}).get("rope_theta", 10000.0)
    theta = _number(rope, "rope_theta", 0.0) if "rope_theta" in rope else _number(f, "rope_theta", default_theta)
    if rope_type == "default":
        return theta, None
    for name in _ROPE_TYPE_KEYS[rope_type]:
        if rope.get(name) is None and name != "original_max_position_embeddings":
            raise ConfigError(f"{key}.{name}", f"missing from the rope_type {quote(rope_type)} parameters")
    factor = _number(rope, "factor", 0.0)
    if rope_type == "linear":
        return theta, RopeScaling("linear", factor)
    original = rope.get("original_max_position_embeddings")
    if original is None:  # transformers' default: the model's own context
        original = f.get("max_position_embeddings")
    return theta, RopeScaling(
        "llama3", factor, _number(rope, "low_freq_factor", 0.0), _number(rope, "high_freq_factor", 0.0),
        check_size(f"{key}.original_max_position_embeddings", original, N_CTX_MAX),
    )  # fmt: skip


def _activation(family: str, f: dict[str, Any]) -> Activation:
    """The MLP gate's activation, from the key the family's `transformers` MLP reads."""
    record = RECORDS[family]
    if record.fixed.get("mlp_act", "silu") == "silu":
        act = f.get("hidden_act", "silu")
        if act != "silu":
            raise ConfigError("hidden_act", f"the suite implements SwiGLU with 'silu', found {quote(act)}")
        return "silu"
    # Gemma's MLP reads hidden_act ("gelu", the first releases' value, meant tanh GELU and GemmaConfig
    # maps it so); Gemma 2's reads hidden_activation. The other key is ignored by transformers 5, so it
    # is accepted only where it agrees.
    used = record.activation_key
    other = "hidden_activation" if used == "hidden_act" else "hidden_act"
    act = f.get(used, "gelu_pytorch_tanh")
    allowed = (*_TANH_GELU, "gelu") if used == "hidden_act" else _TANH_GELU
    if act not in allowed:
        raise ConfigError(used, f"{family}'s GeGLU uses tanh GELU ({' or '.join(allowed)}), found {quote(act)}")
    if f.get(other) is not None and f[other] not in _TANH_GELU:
        raise ConfigError(other, f"{family}'s MLP reads {used}; {other} must be null or {_TANH_GELU[0]!r}, found "
                                 f"{quote(f[other])}")  # fmt: skip
    return "gelu_tanh"


def _layer_types(f: dict[str, Any], n_layers: int) -> tuple[LayerType, ...] | None:
    """The file's layer_types list (legacy names mapped as transformers maps them), or None if absent."""
    kinds = f.get("layer_types")
    if kinds is None:
        return None
    if not isinstance(kinds, list) or len(kinds) != n_layers:
        raise ConfigError("layer_types", f"must be a list of {n_layers} entries (one per layer), found {quote(kinds)}")
    kinds = [_LEGACY_LAYER_TYPES.get(k, k) if isinstance(k, str) else k for k in kinds]
    for kind in kinds:
        if kind not in LAYER_TYPES:
            raise ConfigError("layer_types", f"entries are one of {LAYER_TYPES}, found {quote(kind)}")
    return tuple(kinds)


def _windows(family: str, f: dict[str, Any], n_layers: int) -> tuple[int | None, tuple[LayerType, ...]]:
    """sliding_window and layer_types as the family's `transformers` config derives them, in the reader's
    canonical form (see `canonical`)."""
    rule = RECORDS[family].windows
    if rule == "none":
        return None, ()
    if rule == "qwen2_moe":
        return _qwen2_moe_windows(f, n_layers)
    window = _optional_size(f, "sliding_window", HF_DEFAULTS[family]["sliding_window"], N_CTX_MAX)
    if rule == "every layer":
        return window, ()
    if rule == "use_sliding_window":  # Qwen3MoeConfig.__post_init__: the window only if use_sliding_window
        return (window if flag_field(f, "use_sliding_window", False) else None), ()
    given = _layer_types(f, n_layers)
    kinds: tuple[LayerType, ...]
    if rule == "smollm3":
        return _smollm3_windows(f, window, given, _nope_layers(family, f, n_layers), n_layers)
    if rule == "gemma2":
        legacy = f.get("sliding_window_size")
        if legacy is not None and legacy != window:
            raise ConfigError("sliding_window_size", f"must equal sliding_window={window}, found {quote(legacy)}")
        # Gemma2Config's default: layers 0, 2, 4, ... slide
        kinds = given or tuple(LAYER_TYPES[1] if i % 2 == 0 else LAYER_TYPES[0] for i in range(n_layers))
        if window is None and "sliding_attention" in kinds:
            raise ConfigError("sliding_window", "is null but layer_types names sliding layers")
    else:  # Qwen2Config / Qwen3Config.__post_init__: the window only if use_sliding_window
        if not flag_field(f, "use_sliding_window", False):
            window = None
        first = f.get("max_window_layers", 28)  # the layers below it attend to everything
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise ConfigError("max_window_layers", f"must be an int of at least 0, found {quote(first)}")
        slides = window is not None
        kinds = given or tuple(LAYER_TYPES[1] if slides and i >= first else LAYER_TYPES[0] for i in range(n_layers))
    return canonical_windows(window, kinds)


def _qwen2_moe_windows(f: dict[str, Any], n_layers: int) -> tuple[int | None, tuple[LayerType, ...]]:
    """Qwen2MoeConfig.__post_init__: without use_sliding_window the window is 0 (which save_pretrained
    writes) and no layer slides; with it, layer_types default to sliding on the even layers below
    max_window_layers (not Qwen2's rule)."""
    given = _layer_types(f, n_layers)
    if not flag_field(f, "use_sliding_window", False):
        window = f.get("sliding_window")
        if window is not None and window != 0:
            check_size("sliding_window", window, N_CTX_MAX)  # a value of the right kind, unused
        if given and "sliding_attention" in given:
            raise ConfigError("layer_types", "names sliding layers but use_sliding_window is false (window 0)")
        return None, ()
    window = _optional_size(f, "sliding_window", HF_DEFAULTS["qwen2_moe"]["sliding_window"], N_CTX_MAX)
    first = f.get("max_window_layers", 28)  # the layers from it on attend to everything
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise ConfigError("max_window_layers", f"must be an int of at least 0, found {quote(first)}")
    slides = window is not None
    kinds = given or tuple(
        LAYER_TYPES[1] if slides and i % 2 == 0 and i < first else LAYER_TYPES[0] for i in range(n_layers)
    )
    if window is None and "sliding_attention" in kinds:
        raise ConfigError("sliding_window", "is null but layer_types names sliding layers")
    return canonical_windows(window, kinds)


def _smollm3_windows(
    f: dict[str, Any], window: int | None, given: tuple[LayerType, ...] | None, nope: tuple[int, ...], n_layers: int
) -> tuple[int | None, tuple[LayerType, ...]]:
    """SmolLM3Config.__post_init__ and its attention: a layer slides where use_sliding_window and
    layer_types name it (by default the NoPE layers, if there is a window). Its model masks by layer_types
    alone, so sliding layers without use_sliding_window (or without a window) are refused, not guessed."""
    if not flag_field(f, "use_sliding_window", False):
        if given and "sliding_attention" in given:
            raise ConfigError("layer_types", "names sliding layers but use_sliding_window is false")
        return None, ()
    kinds = given or tuple(LAYER_TYPES[1] if window is not None and i in nope else LAYER_TYPES[0]
                           for i in range(n_layers))  # fmt: skip
    if window is None and "sliding_attention" in kinds:
        raise ConfigError("sliding_window", "is null but layer_types names sliding layers")
    return canonical_windows(window, kinds)


def _nope_layers(family: str, f: dict[str, Any], n_layers: int) -> tuple[int, ...]:
    """SmolLM3's layers without RoPE as SmolLM3Config reads them: `no_rope_layers[i]` is 1 where layer i
    uses RoPE and 0 where it does not (a list at least n_layers long); without the list, every
    `no_rope_layer_interval`-th layer (i + 1 a multiple of it) has none."""
    if "nope_layers" not in FAMILY_SWITCHES[cast(Family, family)][1]:
        return ()
    listed = f.get("no_rope_layers")
    if listed is None:
        interval = check_size("no_rope_layer_interval", f.get("no_rope_layer_interval", 4), N_LAYERS_MAX)
        return tuple(i for i in range(n_layers) if (i + 1) % interval == 0)
    if not isinstance(listed, list) or len(listed) < n_layers or any(not _same(x, 0) and not _same(x, 1)
                                                                     for x in listed):  # fmt: skip
        raise ConfigError("no_rope_layers", f"must be a list of at least {n_layers} entries, each 1 (RoPE) or 0 "
                                            f"(none), found {quote(listed)}")  # fmt: skip
    return tuple(i for i in range(n_layers) if listed[i] == 0)


def _rotary_dim(family: str, f: dict[str, Any], d_head: int) -> int | None:
    """Phi-3's and GLM's partial rotary: int(d_head * partial_rotary_factor) dims rotated, the factor read
    from the RoPE parameters first, then the top level, then the class's default (Phi-3 1, GLM 0.5);
    None where the whole head rotates. Other families refuse a factor but 1 (`_check_keys`, `_rope`)."""
    if family not in PARTIAL_ROTARY_FAMILIES:
        return None
    rope = f.get(_rope_key(f)) or {}
    key = f"{_rope_key(f)}.partial_rotary_factor" if "partial_rotary_factor" in rope else "partial_rotary_factor"
    factor = _number(rope if "partial_rotary_factor" in rope else f, "partial_rotary_factor",
                     HF_DEFAULTS[family]["partial_rotary_factor"])  # fmt: skip
    rotated = int(d_head * factor)
    if not 0 < factor <= 1 or rotated == 0 or rotated % 2:
        raise ConfigError(key, f"rotates int(head_dim * factor) = int({d_head} * {factor}) = {rotated} dims; the "
                               f"suite needs an even number in 2..{d_head}")  # fmt: skip
    return None if rotated == d_head else rotated


def partial_rotary_factor(rotated: int, d_head: int) -> float:
    """The partial_rotary_factor `transformers` turns back into `rotated` dims: int(d_head * factor) ==
    rotated (rotated / d_head itself can land one ulp short of it)."""
    factor = rotated / d_head
    while int(d_head * factor) < rotated:
        factor = math.nextafter(factor, math.inf)
    return factor


def _dense_layers(family: str, f: dict[str, Any], n_layers: int) -> tuple[int, ...]:
    """Qwen2-MoE's dense layers as Qwen2MoeDecoderLayer decides: listed in mlp_only_layers, or (i + 1) not a
    multiple of decoder_sparse_step. An index past the last layer (which transformers ignores) is refused."""
    if "dense_layers" not in FAMILY_SWITCHES[cast(Family, family)][1]:
        return ()
    step = check_size("decoder_sparse_step", f.get("decoder_sparse_step", 1), N_LAYERS_MAX)
    listed = f.get("mlp_only_layers")
    listed = [] if listed is None else listed
    if not isinstance(listed, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers
                                           for i in listed):  # fmt: skip
        raise ConfigError("mlp_only_layers", f"must be a list of layer indices below {n_layers}, found {quote(listed)}")
    return tuple(sorted(set(listed) | {i for i in range(n_layers) if (i + 1) % step}))


def _experts(family: str, f: dict[str, Any], d_ff: int) -> dict[str, Any]:
    """A MoE family's router and expert fields of ModelConfig, read from its config class's keys: the expert
    count under either of its names (`FamilyRecord.expert_keys`: both present, they must agree), and the
    expert size, renormalisation and shared expert where the family leaves them free (else Mixtral's:
    experts d_ff wide, renormalised, none shared)."""
    record = RECORDS[family]
    if not record.moe:
        return {}
    defaults = HF_DEFAULTS[family]
    keys = [k for k in record.expert_keys if f.get(k) is not None]
    if len(keys) == 2 and not _same(f[keys[0]], f[keys[1]]):
        raise ConfigError(keys[1], f"is {record.hf_config}'s other name of {keys[0]}={quote(f[keys[0]])}, "
                                   f"found {quote(f[keys[1]])}")  # fmt: skip
    key = keys[0] if keys else record.expert_keys[0]
    found: dict[str, Any] = {
        "n_experts": check_size(key, f[key] if keys else defaults[key], N_HEADS_MAX),
        "top_k": _size(defaults | f, N_HEADS_MAX, "num_experts_per_tok"),
    }
    if "d_expert" not in record.free:
        return found | {"norm_topk": True}
    d_expert = _size(defaults | f, D_FF_MAX, "moe_intermediate_size")
    found |= {"d_expert": None if d_expert == d_ff else d_expert, "norm_topk": flag_field(f, "norm_topk_prob", False)}
    if "d_shared_expert" in record.free:
        shared = f.get("shared_expert_intermediate_size", defaults["shared_expert_intermediate_size"])
        # 0: Qwen2MoeSparseMoeBlock's shared expert of size 0 adds nothing (what to_hf_dict writes for none)
        found["d_shared_expert"] = (
            None if _same(shared, 0) else check_size("shared_expert_intermediate_size", shared, D_FF_MAX)
        )
    return found


def canonical_windows(window: int | None, kinds: tuple[LayerType, ...]) -> tuple[int | None, tuple[LayerType, ...]]:
    """The one form of a (sliding_window, per-layer kinds) pair the reader returns: no window when no
    layer slides, layer_types empty when every layer slides, else one entry per layer."""
    if window is None or LAYER_TYPES[1] not in kinds:
        return None, ()
    if all(kind == LAYER_TYPES[1] for kind in kinds):
        return window, ()
    return window, kinds


def canonical(config: ModelConfig) -> ModelConfig:
    """`config` in the form `from_hf_dict` reads it back: the same model, written one way (see
    `canonical_windows`; head_dim None when it is d_model // n_heads, query_scale and rotary_dim None when
    they are d_head, d_expert None when it is d_ff)."""
    window, kinds = canonical_windows(config.sliding_window, tuple(map(config.layer_type, range(config.n_layers))))
    query_scale = None if config.query_scale == config.d_head else config.query_scale
    head_dim = None if config.head_dim == config.d_model // config.n_heads else config.head_dim
    if config.d_model % config.n_heads:
        head_dim = config.head_dim
    d_expert = None if config.d_expert == config.d_ff else config.d_expert
    rotary_dim = None if config.rotary_dim == config.d_head else config.rotary_dim
    return config.replace(sliding_window=window, layer_types=kinds, query_scale=query_scale, head_dim=head_dim,
                          d_expert=d_expert, rotary_dim=rotary_dim)  # fmt: skip


def _attention_bias(record: FamilyRecord, f: dict[str, Any]) -> tuple[bool, bool]:
    """(qkv_bias, o_bias) as the family's attention reads `attention_bias` (`FamilyRecord.attention_bias`)."""
    rule, default = record.attention_bias, record.defaults.get("attention_bias", False)
    if rule == "both":
        bias = flag_field(f, "attention_bias", default)
        return bias, bias
    if rule == "qkv":  # GlmAttention: attention_bias on q, k and v; o_proj never biased
        return flag_field(f, "attention_bias", default), False
    if "attention_bias" in record.keys and flag_field(f, "attention_bias", False):  # read, and ignored
        raise ConfigError("attention_bias", f"{record.name}'s attention has no biases (transformers ignores this key)")
    if rule == "qkv always" and "qkv_bias" in record.keys and not flag_field(f, "qkv_bias", True):
        raise ConfigError("qkv_bias", f"{record.name} without q/k/v biases is not implemented")
    return rule == "qkv always", False


def _from_rope_family_fields(family: Family, f: dict[str, Any]) -> ModelConfig:
    _check_keys(family, f)
    keys, defaults = _ROPE_FAMILY_KEYS, HF_DEFAULTS[family]
    fixed, _ = FAMILY_SWITCHES[family]
    d_model = _size(f, D_MODEL_MAX, *keys["d_model"])
    n_heads = _size(f, N_HEADS_MAX, *keys["n_heads"])
    n_layers = _size(f, N_LAYERS_MAX, *keys["n_layers"])
    n_kv_heads = _optional_size(f, "num_key_value_heads", defaults["num_key_value_heads"], N_HEADS_MAX)
    head_dim = _optional_size(f, "head_dim", defaults["head_dim"], D_MODEL_MAX)
    if head_dim == d_model // n_heads and d_model % n_heads == 0:
        head_dim = None  # the derived d_head: the canonical form
    elif head_dim is not None and "head_dim" not in FAMILY_SWITCHES[family][1]:
        derived = f"hidden_size / num_attention_heads = {d_model}/{n_heads}"
        raise ConfigError("head_dim", f"{family}'s heads are {derived}; another head_dim is not implemented")
    qkv_bias, o_bias = _attention_bias(RECORDS[family], f)
    theta, scaling = _rope(f, family)
    if scaling is not None and "rope_scaling" not in FAMILY_SWITCHES[family][1]:
        raise ConfigError(_rope_key(f), f"{family} with rope_type {scaling.kind!r} is not implemented")
    window, kinds = _windows(family, f, n_layers)
    gemma2 = family == "gemma2"
    query_scale = _optional_size(f, "query_pre_attn_scalar", defaults.get("query_pre_attn_scalar"), D_MODEL_MAX)
    d_head = head_dim if head_dim is not None else d_model // n_heads
    d_ff = _size(f, D_FF_MAX, *keys["d_ff"])
    return ModelConfig(
        family=family,
        vocab_size=_size(f, VOCAB_SIZE_MAX, *keys["vocab_size"]),
        n_ctx=_size(f, N_CTX_MAX, *keys["n_ctx"]),
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads if n_kv_heads is not None else n_heads,
        d_ff=d_ff,
        norm_eps=_number(f, "rms_norm_eps", defaults.get("rms_norm_eps", 1e-6)),
        tie_embeddings=flag_field(f, "tie_word_embeddings", defaults["tie_word_embeddings"]),
        rope_theta=theta,
        head_dim=head_dim,
        rope_scaling=scaling,
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        qk_norm=fixed.get("qk_norm", False),
        qk_norm_whole=fixed.get("qk_norm_whole", False),
        mlp_act=_activation(family, f),
        norm_plus_one=fixed.get("norm_plus_one", False),
        embed_scale=fixed.get("embed_scale", False),
        sandwich_norm=fixed.get("sandwich_norm", False),
        pre_norm=fixed.get("pre_norm", True),
        sliding_window=window,
        layer_types=kinds,
        attn_softcap=_optional_number(f, "attn_logit_softcapping", defaults.get("attn_logit_softcapping"))
        if gemma2 else None,
        final_softcap=_optional_number(f, "final_logit_softcapping", defaults.get("final_logit_softcapping"))
        if gemma2 else None,
        query_scale=query_scale if gemma2 and query_scale != d_head else None,
        rotary_dim=_rotary_dim(family, f, d_head),
        rope_pairs=fixed.get("rope_pairs", "rotate_half"),
        fused_qkv=fixed.get("fused_qkv", False),
        fused_gate_up=fixed.get("fused_gate_up", False),
        dense_layers=_dense_layers(family, f, n_layers),
        nope_layers=_nope_layers(family, f, n_layers),
        **_experts(family, f, d_ff),
    )  # fmt: skip


# Sane maxima, each well above the largest published model of the two families (Llama 3.1 405B:
# 126 layers, d_model 16384, 128 heads, d_ff 53248, vocab 128256, n_ctx 131072). They exist so a
# tiny hostile config.json (num_hidden_layers 10**19) is refused before anything is allocated or
# looped over per layer, head or token.
N_LAYERS_MAX = 4096
D_MODEL_MAX = 1 << 17  # 131072
N_HEADS_MAX = 4096
D_FF_MAX = 1 << 20  # 1048576
VOCAB_SIZE_MAX = 1 << 23  # 8388608
N_CTX_MAX = 1 << 24  # 16777216
SIZE_MAXIMA: dict[str, int] = {
    "vocab_size": VOCAB_SIZE_MAX,
    "n_ctx": N_CTX_MAX,
    "d_model": D_MODEL_MAX,
    "n_layers": N_LAYERS_MAX,
    "n_heads": N_HEADS_MAX,
    "n_kv_heads": N_HEADS_MAX,
    "d_ff": D_FF_MAX,
}
_SIZE_FIELDS = tuple(SIZE_MAXIMA)


def quote(value: Any) -> str:
    """`repr(value)`, cut short: a hostile file's value is never echoed whole into a one-line error (a
    string's line breaks escaped by repr)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_size(name: str, value: Any, maximum: int) -> int:
    """`value` if it is an int in 1..maximum (not a bool); else ConfigError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"must be an int, found {type(value).__name__} {quote(value)}")
    if value <= 0:
        raise ConfigError(name, f"must be positive, found {quote(value)}")
    if value > maximum:
        raise ConfigError(name, f"must be at most {maximum:,}, found {quote(value)}")
    return value


def flag_field(fields: dict[str, Any], name: str, default: bool) -> bool:
    """Flag `name` of a config.json: JSON true or false (as `transformers` requires), `default` if absent.
    1, "false" or null are refused: read as Python truth values they would silently mean the opposite."""
    if name not in fields:
        return default
    value = fields[name]
    if not isinstance(value, bool):
        raise ConfigError(name, f"must be true or false, found {type(value).__name__} {quote(value)}")
    return value


def _check_number(name: str, value: Any) -> float:
    """`value` if it is a real number (an int or float, not a bool); else ConfigError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(name, f"must be a number, found {type(value).__name__} {quote(value)}")
    return float(value)


# The switches of the Llama layout, at their defaults (Llama's and GPT-2's values).
SWITCH_DEFAULTS: dict[str, Any] = {
    "head_dim": None,
    "rope_scaling": None,
    "qkv_bias": False,
    "o_bias": False,
    "qk_norm": False,
    "qk_norm_whole": False,
    "mlp_act": "silu",
    "norm_plus_one": False,
    "embed_scale": False,
    "sandwich_norm": False,
    "pre_norm": True,
    "sliding_window": None,
    "layer_types": (),
    "attn_softcap": None,
    "final_softcap": None,
    "query_scale": None,
    "rotary_dim": None,
    "rope_pairs": "rotate_half",
    "fused_qkv": False,
    "fused_gate_up": False,
    "n_experts": 0,
    "top_k": 0,
    "d_expert": None,
    "norm_topk": False,
    "d_shared_expert": None,
    "dense_layers": (),
    "nope_layers": (),
}
# Per family: the switches it sets to another value than the default, and those it leaves free.
FAMILY_SWITCHES: dict[Family, tuple[dict[str, Any], tuple[str, ...]]] = {
    f: (dict(RECORDS[f].fixed), RECORDS[f].free) for f in FAMILIES
}


def _check_positive(name: str, value: Any) -> float:
    number = _check_number(name, value)
    if not (math.isfinite(number) and number > 0):  # also rejects NaN
        raise ConfigError(name, f"must be a finite positive number, found {value}")
    return number


def _validate_switches(config: ModelConfig) -> None:
    """Each switch holds a value of its kind, and the family's fixed ones hold the family's value."""
    fixed, free = FAMILY_SWITCHES[config.family]
    for name, default in SWITCH_DEFAULTS.items():
        value = getattr(config, name)
        expected = fixed.get(name, default)
        if name not in free and value != expected:
            raise ConfigError(name, f"the {config.family} family has {name}={expected!r}, found {value!r}")
    if RECORDS[config.family].attention_bias == "both" and config.qkv_bias != config.o_bias:
        raise ConfigError("o_bias", f"{config.family}'s attention_bias sets q/k/v and o biases together")
    if config.head_dim is not None:
        check_size("head_dim", config.head_dim, D_MODEL_MAX)
    for flag in ("qkv_bias", "o_bias", "qk_norm", "qk_norm_whole", "norm_plus_one", "embed_scale", "sandwich_norm",
                 "pre_norm", "fused_qkv", "fused_gate_up", "norm_topk"):  # fmt: skip
        if not isinstance(getattr(config, flag), bool):
            raise ConfigError(flag, f"must be a bool, found {type(getattr(config, flag)).__name__}")
    if config.qk_norm_whole and not config.qk_norm:
        raise ConfigError("qk_norm_whole", "spans the q/k norm over the whole projection: it needs qk_norm")
    if not (config.pre_norm or config.sandwich_norm):
        raise ConfigError("pre_norm", "a layer without norms before its sublayers needs the sandwich's after them")
    if config.mlp_act not in ("silu", "gelu_tanh"):
        raise ConfigError("mlp_act", f"expected 'silu' or 'gelu_tanh', found {config.mlp_act!r}")
    if config.sliding_window is not None:
        check_size("sliding_window", config.sliding_window, N_CTX_MAX)
    if config.layer_types:
        if len(config.layer_types) != config.n_layers:
            found = len(config.layer_types)
            raise ConfigError("layer_types", f"needs one entry per layer ({config.n_layers}), found {found}")
        for kind in config.layer_types:
            if kind not in LAYER_TYPES:
                raise ConfigError("layer_types", f"entries are one of {LAYER_TYPES}, found {kind!r}")
        if "sliding_attention" in config.layer_types and config.sliding_window is None:
            raise ConfigError("layer_types", "names sliding layers but sliding_window is not set")
    for name in ("attn_softcap", "final_softcap"):
        if getattr(config, name) is not None:
            _check_positive(name, getattr(config, name))
    if config.query_scale is not None:
        check_size("query_scale", config.query_scale, D_MODEL_MAX)
    _validate_rotary(config)
    _validate_experts(config)
    _check_layer_indices("nope_layers", config.nope_layers, config.n_layers)
    scaling = config.rope_scaling
    if scaling is not None:
        if not isinstance(scaling, RopeScaling) or scaling.kind not in ("linear", "llama3"):
            raise ConfigError("rope_scaling", f"expected a RopeScaling of kind 'linear' or 'llama3', found {scaling!r}")
        if _check_positive("rope_scaling.factor", scaling.factor) < 1:
            raise ConfigError("rope_scaling.factor", f"must be at least 1, found {scaling.factor}")
        if scaling.kind == "llama3":
            low = _check_positive("rope_scaling.low_freq_factor", scaling.low_freq_factor)
            high = _check_positive("rope_scaling.high_freq_factor", scaling.high_freq_factor)
            if low >= high:
                raise ConfigError("rope_scaling.high_freq_factor", f"must exceed low_freq_factor={low}, found {high}")
            check_size("rope_scaling.original_n_ctx", scaling.original_n_ctx, N_CTX_MAX)


def _validate_rotary(config: ModelConfig) -> None:
    if config.rope_pairs not in ROPE_PAIRS:
        raise ConfigError("rope_pairs", f"expected one of {ROPE_PAIRS}, found {config.rope_pairs!r}")
    if config.rotary_dim is not None:
        check_size("rotary_dim", config.rotary_dim, D_MODEL_MAX)
        if config.rotary_dim % 2 or config.rotary_dim > config.d_head:
            raise ConfigError(
                "rotary_dim", f"must be even and at most d_head={config.d_head}, found {config.rotary_dim}"
            )


def _validate_experts(config: ModelConfig) -> None:
    """A MoE family has 1 <= top_k <= n_experts; every other family neither."""
    if config.family not in MOE_FAMILIES:
        return  # its n_experts, top_k, ... hold their defaults (FAMILY_SWITCHES)
    n = check_size("n_experts", config.n_experts, N_HEADS_MAX)
    if not 1 <= check_size("top_k", config.top_k, N_HEADS_MAX) <= n:
        raise ConfigError("top_k", f"must be at most n_experts={n}, found {config.top_k}")
    for name in ("d_expert", "d_shared_expert"):
        if getattr(config, name) is not None:
            check_size(name, getattr(config, name), D_FF_MAX)
    _check_layer_indices("dense_layers", config.dense_layers, config.n_layers)


def _check_layer_indices(name: str, layers: Any, n_layers: int) -> None:
    """`layers` is a sorted tuple of distinct layer indices below n_layers (`dense_layers`, `nope_layers`)."""
    if not isinstance(layers, tuple) or any(
        isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers for i in layers
    ):
        raise ConfigError(name, f"must be a tuple of layer indices below {n_layers}, found {quote(layers)}")
    if list(layers) != sorted(set(layers)):
        raise ConfigError(name, f"must be sorted without repeats, found {quote(layers)}")


def validate(config: ModelConfig) -> None:
    """Raise ConfigError naming the first field that makes `config` inconsistent."""
    if config.family not in FAMILIES:
        raise ConfigError("family", f"expected one of {FAMILIES}, found {config.family!r}")
    for name, maximum in SIZE_MAXIMA.items():
        check_size(name, getattr(config, name), maximum)
    _validate_switches(config)
    if config.head_dim is None and config.d_model % config.n_heads:
        raise ConfigError("n_heads", f"d_model={config.d_model} is not divisible by n_heads={config.n_heads}")
    if config.n_kv_heads > config.n_heads or config.n_heads % config.n_kv_heads:
        raise ConfigError("n_kv_heads", f"n_heads={config.n_heads} is not a multiple of n_kv_heads={config.n_kv_heads}")
    if config.family == "gpt2" and config.n_kv_heads != config.n_heads:
        raise ConfigError("n_kv_heads", f"GPT-2 has no grouped-query attention: must equal n_heads={config.n_heads}")
    if config.uses_rope and config.d_head % 2:
        raise ConfigError("n_heads", f"RoPE rotates pairs, so d_head must be even; d_head={config.d_head}")
    if not isinstance(config.tie_embeddings, bool):
        raise ConfigError("tie_embeddings", f"must be a bool, found {type(config.tie_embeddings).__name__}")
    # An infinite epsilon makes every normalised activation 0 (and every comparison trivially pass).
    if not (math.isfinite(_check_number("norm_eps", config.norm_eps)) and config.norm_eps > 0):  # also rejects NaN
        raise ConfigError("norm_eps", f"must be a finite positive number, found {config.norm_eps}")
    if not (math.isfinite(_check_number("rope_theta", config.rope_theta)) and config.rope_theta > 1):
        raise ConfigError("rope_theta", f"must be a finite number greater than 1, found {config.rope_theta}")
