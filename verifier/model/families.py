"""Each family the suite runs, as one record: what its configs set and leave free, how its `config.json`
is read and written (the `transformers` classes, the keys, their defaults and the rules by which they turn
into the suite's fields), its llama.cpp architecture and the tiny configs a model under test is probed on.
`verifier.model.config`, the GGUF layout and the probes read their per-family tables from here.

A family inherits from another (`FamilyRecord.inherit`) where `transformers`' modular files do (Mistral
from Llama, Qwen3 from Qwen2, Gemma 2 from Gemma, ...): what it changes is what it adds."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# How a family's config.json sets attention biases: `attention_bias` on q, k, v and o together ("both"),
# on q, k and v only ("qkv"; the o projection never biased), q, k and v always biased whatever the file
# says ("qkv always"), or no bias at all ("none": a true `attention_bias` is refused, as transformers
# ignores it).
AttentionBias = Literal["both", "qkv", "qkv always", "none"]
# How its config.json says which layers slide, as its `transformers` config class derives it: no window
# ("none"), one window on every layer ("every layer"), Qwen2's `use_sliding_window` and
# `max_window_layers` (the layers from it on slide), Qwen2-MoE's (the even layers below it slide),
# Gemma 2's `layer_types` (default: the even layers slide), every layer if `use_sliding_window` (Qwen3-MoE:
# its config class has no `max_window_layers` and transformers 5 reads none, whatever the file holds), or
# SmolLM3's `layer_types` where `use_sliding_window` (default: its NoPE layers slide).
Windows = Literal["none", "every layer", "qwen", "qwen2_moe", "gemma2", "use_sliding_window", "smollm3"]


@dataclass(frozen=True)
class ProbeKind:
    """A tiny config a model under test is built on at start-up (`verifier.plugin.probes`): the family's
    heads (d_head 4 unless `d_head`), and the switches its published checkpoints use, each where ignoring
    it changes the output ("window": a window smaller than the probe's positions)."""

    name: str
    n_heads: int
    n_kv_heads: int
    switches: Mapping[str, Any] = field(default_factory=dict)
    d_head: int = 4


@dataclass(frozen=True)
class FamilyRecord:
    """One family: its switches (`ModelConfig`'s fields beyond the sizes), its `config.json` both ways,
    its GGUF architecture and its probe kinds."""

    name: str
    hf_config: str  # the transformers config class
    hf_model: str  # ... and the model class a config.json's `architectures` names
    fixed: Mapping[str, Any]  # the switches it sets to another value than the default (`SWITCH_DEFAULTS`)
    free: tuple[str, ...]  # the switches a config of it may set (drawn by the strategies, probed one by one)
    keys: frozenset[str]  # the config.json keys its reader understands beyond the common ones
    defaults: Mapping[str, Any]  # transformers' default for a key absent from config.json
    gguf: str  # llama.cpp's architecture (general.architecture)
    probes: tuple[ProbeKind, ...]
    attention_bias: AttentionBias = "none"
    windows: Windows = "none"
    activation_key: str = "hidden_act"  # the key its transformers MLP reads its activation from
    head_dim_key: bool = True  # its config class has a head_dim key (else d_head is hidden_size / heads)
    written: Mapping[str, Any] = field(default_factory=dict)  # keys written with a fixed value (`to_hf_dict`)
    expert_keys: tuple[str, ...] = ("num_experts",)  # a MoE family's keys of its expert count (the first written)
    parent: str | None = None  # the family it inherits from, as transformers' modular file does
    ignored: frozenset[str] = frozenset()  # keys its transformers code never reads: any value is accepted

    def inherit(self, name: str, **changes: Any) -> FamilyRecord:
        """A family that is this one with `changes`: `keys` and `defaults` are added to this one's unless
        given whole as `keys=` / `defaults=`; `extra_keys=` / `extra_defaults=` add to them."""
        extra_keys = changes.pop("extra_keys", frozenset())
        extra_defaults = changes.pop("extra_defaults", {})
        keys = changes.pop("keys", self.keys) | frozenset(extra_keys)
        defaults = {**changes.pop("defaults", self.defaults), **extra_defaults}
        return dataclasses.replace(self, name=name, parent=self.name, keys=keys, defaults=defaults, **changes)

    @property
    def moe(self) -> bool:
        """Whether its MLPs are routed experts."""
        return "n_experts" in self.free

    @property
    def partial_rotary(self) -> bool:
        """Whether its config reads `partial_rotary_factor` (top level or in the RoPE parameters)."""
        return "rotary_dim" in self.free


_GEMMA_FIXED = {"mlp_act": "gelu_tanh", "norm_plus_one": True, "embed_scale": True}
_BIAS = ("qkv_bias", "o_bias")
_WINDOW = ("sliding_window", "layer_types")
_EXPERTS = ("n_experts", "top_k")
_QWEN_WINDOW_KEYS = frozenset({"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"})
_ROUTER_TRAINING_KEYS = frozenset({"output_router_logits", "router_aux_loss_coef"})  # the training loss only
# GPT-2's keys: its own names (n_embd, ...) and the common ones it also accepts.
_GPT2_KEYS = frozenset({
    "vocab_size", "n_positions", "max_position_embeddings", "n_embd", "hidden_size", "n_layer",
    "num_hidden_layers", "n_head", "num_attention_heads", "n_inner", "layer_norm_epsilon", "activation_function",
    "tie_word_embeddings", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
    "add_cross_attention", "n_special", "is_encoder_decoder",
    # GPT-2's training dropouts, its sequence-classification head, and keys transformers 5 no longer reads
    "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_activation", "summary_first_dropout",
    "summary_proj_to_labels", "summary_type", "summary_use_proj", "task_specific_params", "n_ctx",
    "predict_special_tokens", "output_past",
})  # fmt: skip

GPT2 = FamilyRecord(
    "gpt2",
    "GPT2Config",
    "GPT2LMHeadModel",
    fixed={},
    free=(),
    keys=_GPT2_KEYS,
    defaults={},
    gguf="gpt2",
    probes=(ProbeKind("gpt2", 2, 2),),
)
LLAMA = FamilyRecord(
    "llama",
    "LlamaConfig",
    "LlamaForCausalLM",
    fixed={},
    free=("head_dim", "rope_scaling", *_BIAS),
    keys=frozenset({"head_dim", "attention_bias", "mlp_bias", "pretraining_tp"}),
    defaults={"num_key_value_heads": None, "head_dim": None, "tie_word_embeddings": False},
    gguf="llama",
    # Llama plain, with grouped-query attention, and with Llama 3's RoPE scaling
    probes=(
        ProbeKind("llama", 2, 2),
        ProbeKind("llama-gqa", 4, 2),
        ProbeKind("llama3", 4, 2, {"rope_scaling": "llama3"}),
    ),
    attention_bias="both",
    written={"mlp_bias": False},
)
MISTRAL = LLAMA.inherit(
    "mistral",
    hf_config="MistralConfig",
    hf_model="MistralForCausalLM",
    free=("head_dim", "rope_scaling", "sliding_window"),
    keys=frozenset({"head_dim", "sliding_window", "attention_bias", "mlp_bias"}),  # both false: no biases
    extra_defaults={"num_key_value_heads": 8, "sliding_window": 4096},
    probes=(ProbeKind("mistral", 4, 2, {"sliding_window": "window"}),),
    attention_bias="none",
    windows="every layer",
    written={},
)
QWEN2 = LLAMA.inherit(
    "qwen2",
    hf_config="Qwen2Config",
    hf_model="Qwen2ForCausalLM",
    fixed={"qkv_bias": True},
    free=("rope_scaling", *_WINDOW),
    keys=frozenset({"head_dim", "use_mrope"}) | _QWEN_WINDOW_KEYS,
    extra_defaults={"num_key_value_heads": 32, "sliding_window": 4096},
    gguf="qwen2",
    probes=(ProbeKind("qwen2", 4, 2),),
    attention_bias="qkv always",
    windows="qwen",
    head_dim_key=False,
    written={},
)
# --8<-- [start:qwen3]
QWEN3 = QWEN2.inherit(
    "qwen3",
    hf_config="Qwen3Config",
    hf_model="Qwen3ForCausalLM",
    fixed={"qk_norm": True},
    free=("head_dim", "rope_scaling", *_BIAS, *_WINDOW),
    keys=frozenset({"head_dim", "attention_bias"}) | _QWEN_WINDOW_KEYS,
    extra_defaults={"head_dim": 128},
    gguf="qwen3",
    probes=(ProbeKind("qwen3", 4, 2, {"head_dim": 6}),),
    attention_bias="both",
    head_dim_key=True,
)
# --8<-- [end:qwen3]
GEMMA = LLAMA.inherit(
    "gemma",
    hf_config="GemmaConfig",
    hf_model="GemmaForCausalLM",
    fixed=_GEMMA_FIXED,
    free=("head_dim", "rope_scaling", *_BIAS),
    keys=frozenset({"head_dim", "attention_bias", "hidden_activation", "use_bidirectional_attention"}),
    defaults={"num_key_value_heads": 16, "head_dim": 256, "tie_word_embeddings": True},
    gguf="gemma",
    probes=(ProbeKind("gemma", 4, 1, {"head_dim": 6}),),
    written={},
)
GEMMA2 = GEMMA.inherit(
    "gemma2",
    hf_config="Gemma2Config",
    hf_model="Gemma2ForCausalLM",
    fixed={**_GEMMA_FIXED, "sandwich_norm": True},
    free=("head_dim", "rope_scaling", *_BIAS, *_WINDOW, "attn_softcap", "final_softcap", "query_scale"),
    extra_keys={
        "sliding_window",
        "sliding_window_size",
        "layer_types",
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "query_pre_attn_scalar",
    },
    defaults={
        "num_key_value_heads": 4,
        "head_dim": 256,
        "tie_word_embeddings": True,
        "sliding_window": 4096,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "query_pre_attn_scalar": 256,
    },
    probes=(
        ProbeKind(
            "gemma2",
            4,
            2,
            {
                "head_dim": 6,
                "sliding_window": "window",
                "layer_types": ("sliding_attention", "full_attention"),
                "attn_softcap": 2.0,
                "final_softcap": 3.0,
                "query_scale": 8,
            },
        ),
    ),
    gguf="gemma2",
    windows="gemma2",
    activation_key="hidden_activation",
)
MIXTRAL = MISTRAL.inherit(
    "mixtral",
    expert_keys=("num_local_experts", "num_experts"),  # MixtralConfig's attribute_map: num_experts is the other
    hf_config="MixtralConfig",
    hf_model="MixtralForCausalLM",
    fixed={"norm_topk": True},
    free=("head_dim", "rope_scaling", "sliding_window", *_EXPERTS),
    # router_jitter_noise: MixtralSparseMoeBlock jitters its input in training only
    keys=_ROUTER_TRAINING_KEYS
    | {"head_dim", "sliding_window", "num_local_experts", "num_experts", "num_experts_per_tok", "router_jitter_noise"},
    defaults={
        "num_key_value_heads": 8,
        "head_dim": None,
        "tie_word_embeddings": False,
        "sliding_window": None,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1e6,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    },
    probes=(ProbeKind("mixtral", 4, 2, {"n_experts": 4, "top_k": 2}),),
)
# As Qwen1.5-MoE: experts narrower than the dense d_ff, a shared expert, no renormalisation.
QWEN2_MOE = QWEN2.inherit(
    "qwen2_moe",
    hf_config="Qwen2MoeConfig",
    hf_model="Qwen2MoeForCausalLM",
    free=("rope_scaling", *_WINDOW, *_EXPERTS, "d_expert", "norm_topk", "d_shared_expert", "dense_layers"),
    keys=_ROUTER_TRAINING_KEYS
    | _QWEN_WINDOW_KEYS
    | {
        "head_dim",
        "qkv_bias",
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "norm_topk_prob",
        "shared_expert_intermediate_size",
        "decoder_sparse_step",
        "mlp_only_layers",
    },
    defaults={
        "num_key_value_heads": 16,
        "head_dim": None,
        "tie_word_embeddings": False,
        "sliding_window": 4096,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "norm_topk_prob": False,
        "decoder_sparse_step": 1,
    },
    gguf="qwen2moe",
    probes=(ProbeKind("qwen2_moe", 4, 2, {"n_experts": 4, "top_k": 2, "d_expert": 12, "d_shared_expert": 8}),),
    windows="qwen2_moe",
    written={"qkv_bias": True},
)
# Qwen3's attention with Qwen2-MoE's router and experts, without the shared expert.
QWEN3_MOE = QWEN3.inherit(
    "qwen3_moe",
    hf_config="Qwen3MoeConfig",
    hf_model="Qwen3MoeForCausalLM",
    free=("head_dim", "rope_scaling", *_BIAS, "sliding_window", *_EXPERTS, "d_expert", "norm_topk", "dense_layers"),
    # max_window_layers: its published config.json files hold it; Qwen3MoeConfig has no such field and
    # transformers 5 reads it nowhere (a window, where use_sliding_window, is on every layer)
    keys=_ROUTER_TRAINING_KEYS
    | {
        "head_dim",
        "attention_bias",
        "use_sliding_window",
        "sliding_window",
        "max_window_layers",
        "num_experts",
        "num_local_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "norm_topk_prob",
        "decoder_sparse_step",
        "mlp_only_layers",
    },
    # Qwen3MoeConfig has no head_dim field: its attention reads hidden_size / num_attention_heads without one
    defaults={
        "num_key_value_heads": 4,
        "head_dim": None,
        "tie_word_embeddings": False,
        "sliding_window": 4096,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "norm_topk_prob": False,
        "decoder_sparse_step": 1,
    },
    gguf="qwen3moe",
    probes=(
        ProbeKind("qwen3_moe", 4, 2, {"head_dim": 6, "n_experts": 4, "top_k": 2, "d_expert": 12, "norm_topk": True}),
    ),
    windows="use_sliding_window",
    # Qwen3MoeConfig's attribute_map reads num_experts as num_local_experts (which to_dict writes); the
    # published config.json files write num_experts
    expert_keys=("num_experts", "num_local_experts"),
)
PHI3 = MISTRAL.inherit(
    "phi3",
    hf_config="Phi3Config",
    hf_model="Phi3ForCausalLM",
    fixed={"fused_qkv": True, "fused_gate_up": True},
    free=("rotary_dim", "sliding_window"),
    # original_max_position_embeddings is read by longrope only; the dropouts are off at inference; auto_map
    # names the repository's own code, which transformers 5 runs only with trust_remote_code (its built-in
    # Phi3 otherwise), and every published Phi-3 config.json has it
    keys=frozenset(
        {
            "auto_map",
            "head_dim",
            "sliding_window",
            "attention_bias",
            "original_max_position_embeddings",
            "resid_pdrop",
            "embd_pdrop",
        }
    ),
    defaults={
        "num_key_value_heads": None,
        "head_dim": None,
        "tie_word_embeddings": False,
        "sliding_window": None,
        "rms_norm_eps": 1e-5,
        "partial_rotary_factor": 1.0,
    },
    gguf="phi3",
    probes=(ProbeKind("phi3", 4, 2, {"rotary_dim": 2}),),
    head_dim_key=False,
    written={"pad_token_id": None},  # its padding id lies past small vocabularies
)
# GLM's heads are 8 wide so that its interleaved pairs differ from rotate-half ones (a rotated part of 2
# dims has one pair, the same in both); n_heads x d_head = d_model, as in its published checkpoints
# (GLM-4-9B: 32 x 128 = 4096), which is all llama.cpp's chatglm holds.
GLM = LLAMA.inherit(
    "glm",
    hf_config="GlmConfig",
    hf_model="GlmForCausalLM",
    fixed={"fused_gate_up": True, "rope_pairs": "interleaved"},
    free=("head_dim", "qkv_bias", "rotary_dim"),
    keys=frozenset({"head_dim", "attention_bias"}),
    defaults={
        "num_key_value_heads": 2,
        "head_dim": 128,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1.5625e-7,
        "partial_rotary_factor": 0.5,
        "attention_bias": True,
    },
    gguf="chatglm",
    probes=(ProbeKind("glm", 4, 2, {"rotary_dim": 4, "qkv_bias": True}, d_head=8),),
    attention_bias="qkv",
    written={"pad_token_id": None},  # its padding id lies past small vocabularies
)

# Llama with RoPE off on some layers (NoPE; `no_rope_layers[i] == 0`, by default every fourth) and, where
# `use_sliding_window`, windows on the layers `layer_types` names (by default the NoPE ones).
SMOLLM3 = LLAMA.inherit(
    "smollm3",
    hf_config="SmolLM3Config",
    hf_model="SmolLM3ForCausalLM",
    free=("head_dim", "rope_scaling", *_BIAS, "nope_layers", *_WINDOW),
    # max_window_layers and pretraining_tp: its published config.json holds them; SmolLM3's transformers
    # code reads neither (`ignored`)
    keys=frozenset(
        {"head_dim", "attention_bias", "mlp_bias", "pretraining_tp", "no_rope_layers", "no_rope_layer_interval"}
        | {"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"}
    ),
    # SmolLM3Config has no head_dim field: its attention reads one if the file has it, else hidden_size / heads
    defaults={
        "num_key_value_heads": 4,
        "head_dim": None,
        "tie_word_embeddings": True,
        "rope_theta": 2e6,
        "sliding_window": None,
        "no_rope_layer_interval": 4,
    },
    ignored=frozenset({"pretraining_tp", "max_window_layers"}),
    gguf="smollm3",
    # four layers, the last without RoPE: SmolLM3-3B's pattern (every fourth), which llama.cpp's smollm3 holds
    probes=(ProbeKind("smollm3", 4, 2, {"nope_layers": (3,)}),),
    windows="smollm3",
    written={"mlp_bias": False, "pad_token_id": None},  # its padding id lies past small vocabularies
)

# Llama with its norms moved: an RMSNorm on each sublayer's output before the residual sum and none on its
# input (the sandwich's after-norms without its before-norms), and q/k RMSNorms over the whole projection
# (n_heads d_head and n_kv_heads d_head wide), before the heads are split and RoPE turns them.
OLMO2 = LLAMA.inherit(
    "olmo2",
    hf_config="Olmo2Config",
    hf_model="Olmo2ForCausalLM",
    fixed={"qk_norm": True, "qk_norm_whole": True, "sandwich_norm": True, "pre_norm": False},
    free=("head_dim", "rope_scaling", *_BIAS),
    # Olmo2Config has no head_dim field: its attention reads one if the file has it, else hidden_size / heads
    keys=frozenset({"head_dim", "attention_bias"}),
    defaults={"num_key_value_heads": None, "head_dim": None, "tie_word_embeddings": False, "rms_norm_eps": 1e-5},
    gguf="olmo2",
    probes=(ProbeKind("olmo2", 4, 2),),
    written={},
)

RECORDS: dict[str, FamilyRecord] = {
    r.name: r
    for r in (
        GPT2, LLAMA, MISTRAL, QWEN2, QWEN3, GEMMA, GEMMA2, MIXTRAL, QWEN2_MOE, PHI3, GLM, QWEN3_MOE, SMOLLM3, OLMO2,
    )
}  # fmt: skip
