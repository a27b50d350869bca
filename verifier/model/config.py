"""One frozen config for both families, GPT-2 and Llama (as llama2.c runs it).

The field names are the suite's one vocabulary (`d_model`, `n_heads`, `n_kv_heads`, `d_head`,
`d_ff`, `vocab_size`, `n_ctx`); `to_transformers` / `from_transformers` translate to and from
`GPT2Config` and `LlamaConfig`, and `from_hf_dict` reads the contents of a `config.json`.
This module does no I/O and imports `transformers` only inside the functions that need it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, Literal

Family = Literal["gpt2", "llama"]
FAMILIES: tuple[Family, ...] = ("gpt2", "llama")


class ConfigError(ValueError):
    """A config whose fields cannot describe a model; the message names the field and why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and choices of one transformer; validated on construction.

    GPT-2: learned positions, LayerNorm with bias, tanh-GELU MLP, fused qkv with bias.
    Llama: RMSNorm, RoPE (rotate-half layout, as `transformers` stores q/k), SwiGLU MLP,
    no biases, grouped-query attention when `n_kv_heads < n_heads`.
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

    def __post_init__(self) -> None:
        validate(self)

    @property
    def d_head(self) -> int:
        """Size of one attention head: `d_model // n_heads`."""
        return self.d_model // self.n_heads

    @property
    def uses_rope(self) -> bool:
        return self.family == "llama"

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_transformers(self) -> Any:
        """The equivalent `transformers.GPT2Config` or `transformers.LlamaConfig` (ExtraMissing without it)."""
        from verifier import extra

        extra.require("ModelConfig.to_transformers()", ("transformers",))
        if self.family == "gpt2":
            from transformers import GPT2Config

            return GPT2Config(**self._gpt2_hf_fields())
        from transformers import LlamaConfig

        return LlamaConfig(**self._llama_hf_fields())

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

    def _llama_hf_fields(self) -> dict[str, Any]:
        return {
            "model_type": "llama",
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.n_ctx,
            "hidden_size": self.d_model,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.d_head,
            "intermediate_size": self.d_ff,
            "rms_norm_eps": self.norm_eps,
            "tie_word_embeddings": self.tie_embeddings,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": 1 if self.vocab_size > 1 else 0,
            "eos_token_id": 2 if self.vocab_size > 2 else 0,
        }

    def to_hf_dict(self) -> dict[str, Any]:
        """The fields of a `config.json` for this model (what `save_pretrained` would write)."""
        fields = self._gpt2_hf_fields() if self.family == "gpt2" else self._llama_hf_fields()
        arch = "GPT2LMHeadModel" if self.family == "gpt2" else "LlamaForCausalLM"
        return {"architectures": [arch], **fields}


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


def validate(config: ModelConfig) -> None:
    """Raise ConfigError naming the first field that makes `config` inconsistent."""
    if config.family not in FAMILIES:
        raise ConfigError("family", f"expected one of {FAMILIES}, found {config.family!r}")
    for name, maximum in SIZE_MAXIMA.items():
        check_size(name, getattr(config, name), maximum)
    if config.d_model % config.n_heads:
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
