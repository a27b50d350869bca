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
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, Literal

Family = Literal["gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2"]
FAMILIES: tuple[Family, ...] = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")
# The families of the Llama layout (RMSNorm, RoPE, gated MLP): every family but GPT-2.
ROPE_FAMILIES: tuple[Family, ...] = FAMILIES[1:]
Activation = Literal["silu", "gelu_tanh"]
LayerType = Literal["full_attention", "sliding_attention"]
LAYER_TYPES: tuple[LayerType, ...] = ("full_attention", "sliding_attention")


class ConfigError(ValueError):
    """A config whose fields cannot describe a model; the message names the field and why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class RopeScaling:
    """How a RoPE family stretches its frequencies past the context it was trained at.

    "linear": every inverse frequency divided by `factor` (positions compressed). "llama3" (Llama
    3.1/3.2): wavelengths shorter than `original_n_ctx / high_freq_factor` kept, longer than
    `original_n_ctx / low_freq_factor` divided by `factor`, and the band between interpolated.
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
    vocab_size: int
    n_ctx: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    norm_eps: float
    tie_embeddings: bool
    rope_theta: float = 10000.0
    head_dim: int | None = None  # d_head when it is not d_model // n_heads (Qwen3, Gemma)
    rope_scaling: RopeScaling | None = None
    qkv_bias: bool = False  # q, k, v projections have biases (Qwen2; `attention_bias` elsewhere)
    o_bias: bool = False  # the output projection has a bias (`attention_bias` of Llama, Qwen3, Gemma)
    qk_norm: bool = False  # Qwen3: an RMSNorm over each head's q and k, before RoPE
    mlp_act: Activation = "silu"  # the gate's activation: SwiGLU, or GeGLU with tanh GELU (Gemma)
    norm_plus_one: bool = False  # Gemma: RMSNorm scales by (1 + w), computed in float32
    embed_scale: bool = False  # Gemma: embeddings times sqrt(d_model), rounded to the model's dtype
    sandwich_norm: bool = False  # Gemma 2: RMSNorms after attention and after the MLP too
    sliding_window: int | None = None  # W: a sliding layer's query at t sees keys t - W + 1 .. t
    layer_types: tuple[LayerType, ...] = ()  # per layer; empty: every layer sliding if a window is set
    attn_softcap: float | None = None  # Gemma 2: scores -> cap * tanh(scores / cap), before the mask
    final_softcap: float | None = None  # Gemma 2: the same on the logits
    query_scale: int | None = None  # Gemma 2's query_pre_attn_scalar: scores scaled by its -1/2 power

    def __post_init__(self) -> None:
        validate(self)

    @property
    def d_head(self) -> int:
        """Size of one attention head: `head_dim` if set, else `d_model // n_heads`."""
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    @property
    def uses_rope(self) -> bool:
        """Every family of the Llama layout (all but GPT-2)."""
        return self.family != "gpt2"

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
        if family != "qwen2":  # Qwen2 has no head_dim key: its heads are hidden_size / num_attention_heads
            fields["head_dim"] = self.d_head
        if family in ("llama", "qwen3", "gemma", "gemma2"):
            fields["attention_bias"] = self.o_bias
        if family == "llama":
            fields["mlp_bias"] = False
        activation = "silu" if self.mlp_act == "silu" else "gelu_pytorch_tanh"
        fields["hidden_activation" if family == "gemma2" else "hidden_act"] = activation
        if family == "mistral":
            fields["sliding_window"] = self.sliding_window
        if family in ("qwen2", "qwen3"):
            fields |= {
                "use_sliding_window": self.sliding_window is not None,
                "sliding_window": self.sliding_window,
                "max_window_layers": self.n_layers,
                "layer_types": [self.layer_type(i) for i in range(self.n_layers)],
            }
        if family == "gemma2":
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

    def layer_type(self, layer: int) -> LayerType:
        """`transformers`' name of layer `layer`'s attention: "sliding_attention" or "full_attention"."""
        return "full_attention" if self.window(layer) is None else "sliding_attention"

    def to_hf_dict(self) -> dict[str, Any]:
        """The fields of a `config.json` for this model (what `save_pretrained` would write)."""
        fields = self._gpt2_hf_fields() if self.family == "gpt2" else self._rope_family_hf_fields()
        return {"architectures": [HF_CLASSES[self.family][1]], **fields}


# Per family: the `transformers` config class and the model class a config.json names.
HF_CLASSES: dict[Family, tuple[str, str]] = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
}


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
    """The suite's config for a `transformers` `GPT2Config` or `LlamaConfig`."""
    return from_hf_dict(hf_config.to_dict())


def from_hf_dict(fields: dict[str, Any]) -> ModelConfig:
    """The suite's config from the contents of a Hugging Face `config.json`.

    Raises ConfigError for a model type the suite does not implement, or for settings of a
    supported type that change the math (biased Llama projections, another activation, ...).
    """
    model_type = fields.get("model_type")
    if not isinstance(model_type, str) or model_type not in HF_KEYS:  # a list or object is no key either
        raise ConfigError("model_type", f"expected 'gpt2' or 'llama', found {quote(model_type)}")
    try:
        return _from_gpt2_fields(fields) if model_type == "gpt2" else _from_llama_fields(fields)
    except ConfigError as e:  # a rule across fields (d_model % n_heads, ...): named by the file's key
        keys = HF_KEYS[model_type].get(e.field)
        if keys is None:
            raise
        raise ConfigError(next((k for k in keys if fields.get(k) is not None), keys[0]), e.reason) from None


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
    "llama": {
        "vocab_size": ("vocab_size",),
        "n_ctx": ("max_position_embeddings",),
        "d_model": ("hidden_size",),
        "n_layers": ("num_hidden_layers",),
        "n_heads": ("num_attention_heads",),
        "n_kv_heads": ("num_key_value_heads",),
        "d_ff": ("intermediate_size",),
        "norm_eps": ("rms_norm_eps",),
        "rope_theta": ("rope_theta",),
    },
}
_GPT2, _LLAMA = HF_KEYS["gpt2"], HF_KEYS["llama"]


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


def _from_gpt2_fields(f: dict[str, Any]) -> ModelConfig:
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


def _rope_theta(f: dict[str, Any]) -> float:
    key = "rope_parameters" if f.get("rope_parameters") else "rope_scaling"
    rope = f.get(key) or {}
    if not isinstance(rope, dict):
        raise ConfigError(key, f"must be an object, found {type(rope).__name__} {quote(rope)}")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ConfigError(
            "rope_parameters", f"only the default RoPE is implemented, found rope_type {quote(rope_type)}"
        )
    if "rope_theta" in rope:
        return _number(rope, "rope_theta", 10000.0)
    return _number(f, "rope_theta", 10000.0)


def _from_llama_fields(f: dict[str, Any]) -> ModelConfig:
    if f.get("hidden_act", "silu") != "silu":
        raise ConfigError("hidden_act", f"the suite implements SwiGLU with 'silu', found {quote(f['hidden_act'])}")
    for flag in ("attention_bias", "mlp_bias"):
        if flag_field(f, flag, False):
            raise ConfigError(flag, "Llama with biased projections is not implemented")
    d_model = _size(f, D_MODEL_MAX, *_LLAMA["d_model"])
    n_heads = _size(f, N_HEADS_MAX, *_LLAMA["n_heads"])
    kv_keys = _LLAMA["n_kv_heads"]  # absent or null: as many as the query heads
    head_dim = f.get("head_dim")
    if head_dim is not None:
        check_size("head_dim", head_dim, D_MODEL_MAX)
    if head_dim is not None and head_dim * n_heads != d_model:
        raise ConfigError(
            "head_dim", f"must be hidden_size / num_attention_heads = {d_model}/{n_heads}, found {head_dim}"
        )
    return ModelConfig(
        family="llama",
        vocab_size=_size(f, VOCAB_SIZE_MAX, *_LLAMA["vocab_size"]),
        n_ctx=_size(f, N_CTX_MAX, *_LLAMA["n_ctx"]),
        d_model=d_model,
        n_layers=_size(f, N_LAYERS_MAX, *_LLAMA["n_layers"]),
        n_heads=n_heads,
        n_kv_heads=_size(f, N_HEADS_MAX, *kv_keys) if f.get(kv_keys[0]) is not None else n_heads,
        d_ff=_size(f, D_FF_MAX, *_LLAMA["d_ff"]),
        norm_eps=_number(f, _LLAMA["norm_eps"][0], 1e-6),
        tie_embeddings=flag_field(f, "tie_word_embeddings", False),
        rope_theta=_rope_theta(f),
    )


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
    "mlp_act": "silu",
    "norm_plus_one": False,
    "embed_scale": False,
    "sandwich_norm": False,
    "sliding_window": None,
    "layer_types": (),
    "attn_softcap": None,
    "final_softcap": None,
    "query_scale": None,
}
_GEMMA_FIXED = {"mlp_act": "gelu_tanh", "norm_plus_one": True, "embed_scale": True}
_BIAS = ("qkv_bias", "o_bias")
_WINDOW = ("sliding_window", "layer_types")
# Per family: the switches it sets to another value than the default, and those it leaves free.
FAMILY_SWITCHES: dict[Family, tuple[dict[str, Any], tuple[str, ...]]] = {
    "gpt2": ({}, ()),
    "llama": ({}, ("head_dim", "rope_scaling", *_BIAS)),
    "mistral": ({}, ("head_dim", "rope_scaling", "sliding_window")),
    "qwen2": ({"qkv_bias": True}, ("rope_scaling", *_WINDOW)),
    "qwen3": ({"qk_norm": True}, ("head_dim", "rope_scaling", *_BIAS, *_WINDOW)),
    "gemma": (_GEMMA_FIXED, ("head_dim", "rope_scaling", *_BIAS)),
    "gemma2": (
        {**_GEMMA_FIXED, "sandwich_norm": True},
        ("head_dim", "rope_scaling", *_BIAS, *_WINDOW, "attn_softcap", "final_softcap", "query_scale"),
    ),
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
    if config.family in ("llama", "qwen3", "gemma", "gemma2") and config.qkv_bias != config.o_bias:
        raise ConfigError("o_bias", f"{config.family}'s attention_bias sets q/k/v and o biases together")
    if config.head_dim is not None:
        check_size("head_dim", config.head_dim, D_MODEL_MAX)
    for flag in ("qkv_bias", "o_bias", "qk_norm", "norm_plus_one", "embed_scale", "sandwich_norm"):
        if not isinstance(getattr(config, flag), bool):
            raise ConfigError(flag, f"must be a bool, found {type(getattr(config, flag)).__name__}")
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
