"""litgpt as a model under test: `litgpt.model.GPT` built from a `litgpt.Config`, holding the canonical
weights converted by litgpt's own Hugging Face converter (`litgpt/scripts/convert_hf_checkpoint.py`),
in float32 on the CPU, as its users build a model (`Config.from_name(...)`, then the converted checkpoint).

The config is the `litgpt.Config.from_name` of one published model of the family (`TEMPLATES`: its
fixed choices, and the name litgpt reads some of them from: Gemma's RMSNorm adds 1 to its weight where
"Gemma" is in the name, and `convert_hf_checkpoint` picks its converter by the name) with the suite's
sizes and switches in place of the published ones, and an unpadded vocabulary (`padded_vocab_size`
= vocab_size, so the logits are [.., V]). The weights go through the converter function
`convert_hf_checkpoint` picks for that name (`copy_weights_hf_llama`, `copy_weights_gemma_2`,
`copy_weights_phi`, `copy_weights_qwen_2_5`, `copy_weights_qwen_3`, `copy_weights_olmo2`), called on the
tensors in memory instead of the files of a checkpoint directory.

- `logits`: `model(idx)` ([B, T] -> [B, T, V]), without a KV cache.
- `decode`: litgpt's own KV cache, as its `generate` uses it: `model.set_kv_cache(batch_size=B)`, then
  `model(idx, input_pos=positions)`. litgpt keeps the cache inside the model's attention modules and
  overwrites it in place, so the cache handed back (`Cache`) is a copy of every layer's key and value
  buffers, written back into the model before the next chunk: it stays reusable however often it is
  continued. A sliding layer's cache is litgpt's ring buffer of W positions, which refuses a chunk longer
  than W (raised here as `Unsupported`, with litgpt's reason).

What litgpt 0.5.13 has no model or converter for is refused (`Unsupported`, with the reason): see
`unsupported`. Where litgpt or what it imports (torch, lightning, ...) is missing, the factory raises
`Unsupported` with the way to install it.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np

from verifier.model.config import Family, ModelConfig
from verifier.model.weights import Weights
from verifier.plugin.interface import Constraints, Unsupported

# litgpt's own requirements exclude the huggingface-hub that transformers 5 needs (litgpt 0.5.13 asks
# for huggingface-hub < 1.4, transformers 5.24 for >= 1.31), so the extra installs what `import
# litgpt.model` needs and litgpt comes without its requirements.
INSTALL = "pip install 'lm-verifier[litgpt]' && pip install --no-deps litgpt==0.5.13"
# What `import litgpt.model` imports besides the standard library (litgpt/__init__.py imports its
# `LLM` API, and with it lightning and jsonargparse).
MODULES = ("torch", "litgpt", "lightning", "jsonargparse", "psutil", "yaml")

# Per family, the published litgpt config whose fixed choices and name it takes (Gemma: "Gemma-7b", not
# "Gemma-2b": `convert_hf_checkpoint` sends every name starting "gemma-2" to Gemma 2's converter).
TEMPLATES: dict[Family, str] = {
    "llama": "Llama-3.2-1B",
    "mistral": "Mistral-7B-v0.1",
    "qwen2": "Qwen2.5-0.5B",
    "qwen3": "Qwen3-0.6B",
    "gemma": "Gemma-7b",
    "gemma2": "Gemma-2-2b",
    "mixtral": "Mixtral-8x7B-v0.1",
    "phi3": "Phi-3-mini-4k-instruct",
    "qwen3_moe": "Qwen3-30B-A3B",
    "olmo2": "OLMo-2-1124-7B",
}
# Phi-3's converter ties lm_head to the embedding for Phi-4 names only: a tied Phi-3 is Phi-4-mini's
# config (Phi3ForCausalLM too).
TIED_PHI3 = "Phi-4-mini-instruct"

# Why litgpt cannot run a family at all.
NO_FAMILY: dict[Family, str] = {
    "gpt2": "litgpt has no GPT-2: its GPT has no learned position embeddings (every litgpt model is rotary), "
    "and litgpt.config has no GPT-2 config",
    "glm": "litgpt 0.5.13 has no GLM: no config in litgpt.config and no converter in convert_hf_checkpoint",
    "smollm3": "litgpt 0.5.13 has no SmolLM3: litgpt.config has SmolLM2 only, and its GPT rotates q and k on every "
    "layer (its rope_indices choose Gemma 3's local or global base, never none)",
    "qwen2_moe": "litgpt 0.5.13 has no Qwen2-MoE: its Qwen MoE converter (copy_weights_qwen_3) maps no q/k/v "
    "biases, and its LLaMAMoE has no sigmoid-gated shared expert",
}


def missing() -> str | None:
    """Why the built-in litgpt model cannot run here (a package not installed), or None when it can."""
    absent = [name for name in MODULES if importlib.util.find_spec(name) is None]
    if absent:
        return f"litgpt and what it imports are needed ({', '.join(absent)} not installed here): {INSTALL}"
    return None


def _litgpt() -> Any:
    """litgpt's converter module (importing litgpt.model and litgpt.config with it)."""
    reason = missing()
    if reason is not None:
        raise Unsupported(reason)
    try:
        importlib.import_module("litgpt.model")
        return importlib.import_module("litgpt.scripts.convert_hf_checkpoint")
    except ImportError as e:  # found but broken: the reason is the import's own
        raise Unsupported(f"litgpt cannot be imported here ({e}): {INSTALL}") from None


def unsupported(config: ModelConfig) -> str | None:
    """Why litgpt cannot run `config` (no model or converter for it), or None when it can."""
    if config.family in NO_FAMILY:
        return NO_FAMILY[config.family]
    if config.n_experts and not config.norm_topk:
        return "litgpt's LLaMAMoE has no routing without renormalisation: it takes a softmax over the top k logits"
    if config.dense_layers:
        return "litgpt's LLaMAMoE has no dense layers but the first first_k_dense_replace (no mlp_only_layers)"
    if config.family != "qwen2" and (config.qkv_bias or config.o_bias):
        return (
            f"litgpt's {config.family} converter maps no attention biases (only Qwen2's q/k/v biases), and its "
            "Config.bias gives the output projection a bias only with the MLP's"
        )
    return None


def litgpt_config(config: ModelConfig) -> Any:
    """The `litgpt.Config` of `config`: its family's template (`TEMPLATES`) with the suite's sizes and switches."""
    reason = unsupported(config)
    if reason is not None:
        raise Unsupported(reason)
    from litgpt.config import Config

    name = TIED_PHI3 if config.family == "phi3" and config.tie_embeddings else TEMPLATES[config.family]
    layers = range(config.n_layers)
    windows = [0 if config.window(i) is None else 1 for i in layers]
    scaling = config.rope_scaling
    adjustments: dict[str, float] | None = None
    if scaling is not None and scaling.kind == "linear":
        adjustments = {"factor": scaling.factor}
    elif scaling is not None:
        adjustments = {
            "factor": scaling.factor,
            "low_freq_factor": scaling.low_freq_factor,
            "high_freq_factor": scaling.high_freq_factor,
            "original_max_seq_len": scaling.original_n_ctx,
        }
    return Config.from_name(
        name,
        block_size=config.n_ctx,
        vocab_size=config.vocab_size,
        padded_vocab_size=config.vocab_size,
        n_layer=config.n_layers,
        n_embd=config.d_model,
        n_head=config.n_heads,
        n_query_groups=config.n_kv_heads,
        head_size=config.d_head,
        intermediate_size=config.d_ff,
        norm_eps=config.norm_eps,
        rope_base=config.rope_theta,
        rotary_percentage=config.rotated_dims / config.d_head,
        rope_adjustments=adjustments,
        attn_bias=config.qkv_bias,
        sliding_window_size=config.sliding_window if any(windows) else None,
        sliding_window_indices=windows if any(windows) else None,
        attention_scores_scalar=config.query_scale,
        attention_logit_softcapping=config.attn_softcap,
        final_logit_softcapping=config.final_softcap,
        n_expert=config.n_experts,
        n_expert_per_token=config.top_k,
        moe_intermediate_size=config.expert_d_ff if config.n_experts else None,
    )


def _copy_function(converter: Any, lit_config: Any) -> Any:
    """The converter function `convert_hf_checkpoint` picks for `lit_config.name`, bound as it binds it:
    called as `copy(state_dict, hf_weights)`."""
    from functools import partial

    name = lit_config.name.lower()
    qkv_weights: dict[int, Any] = {}
    if name.startswith("gemma-2"):
        return partial(converter.copy_weights_gemma_2, qkv_weights)
    if name.startswith("phi"):
        return partial(converter.copy_weights_phi, lit_config, qkv_weights)
    if name.startswith(("qwen2.5", "qwq")):
        return partial(converter.copy_weights_qwen_2_5, lit_config, qkv_weights)
    if name.startswith("olmo-2-"):
        return partial(converter.copy_weights_olmo2, lit_config, qkv_weights)
    if name.startswith("qwen3"):
        return partial(converter.copy_weights_qwen_3, lit_config, qkv_weights)
    return partial(converter.copy_weights_hf_llama, lit_config, qkv_weights)


@dataclass(frozen=True)
class Cache:
    """litgpt's KV cache after `n_past` positions of a batch of `batch` rows: a copy of each layer's key
    and value buffers ([batch, n_kv_heads, n_ctx or W, d_head] each)."""

    n_past: int
    batch: int
    buffers: tuple[tuple[Any, Any], ...]


class LitGPTModel:
    """`litgpt.model.GPT` in float32 on the CPU behind the suite's model interface."""

    precision = "float32"

    def __init__(self, config: ModelConfig, weights: Weights) -> None:
        converter = _litgpt()
        import torch
        from litgpt.model import GPT

        self._torch = torch
        self.config = config
        self.lit_config = litgpt_config(config)
        state: dict[str, Any] = {}
        hf_weights = {name: torch.from_numpy(np.asarray(weights[name], dtype=np.float32)) for name in weights}
        _copy_function(converter, self.lit_config)(state, hf_weights, dtype=torch.float32)
        self.model = GPT(self.lit_config).eval()
        self.model.load_state_dict(state, strict=True)
        self._cache_batch: int | None = None

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """[T] -> [T, V] or [B, T] -> [B, T, V]."""
        torch = self._torch
        array = np.asarray(tokens, dtype=np.int64)
        with torch.no_grad():
            logits = self.model(torch.from_numpy(array.reshape(-1, array.shape[-1])))
        out = logits.numpy()
        return out if array.ndim == 2 else out[0]

    def decode(self, tokens: np.ndarray, cache: Cache | None = None) -> tuple[np.ndarray, Cache]:
        """Logits of a chunk after `cache` (None, or a Cache of as many rows) and the new cache."""
        torch = self._torch
        array = np.asarray(tokens, dtype=np.int64)
        rows = array.reshape(-1, array.shape[-1])
        batch, n_new = rows.shape
        start = 0 if cache is None else cache.n_past
        if cache is not None and cache.batch != batch:
            raise ValueError(f"a cache of {cache.batch} rows continued with {batch} rows")
        if start + n_new > self.config.n_ctx:
            raise ValueError(f"{start} cached + {n_new} new tokens exceed n_ctx={self.config.n_ctx}")
        windows = [w for w in (self.config.window(i) for i in range(self.config.n_layers)) if w is not None]
        if windows and n_new > min(windows):
            raise Unsupported(
                f"litgpt's sliding-window KV cache takes at most W = {min(windows)} new tokens a call "
                f"(a chunk of {n_new}): 'Prefill length exceeds the sliding window size'"
            )
        self._restore(batch, cache)
        positions = torch.arange(start, start + n_new)
        with torch.no_grad():
            logits = self.model(torch.from_numpy(rows), input_pos=positions)
        buffers = tuple((b.attn.kv_cache.k.clone(), b.attn.kv_cache.v.clone()) for b in self.model.transformer.h)
        out = logits.numpy()
        return (out if array.ndim == 2 else out[0]), Cache(start + n_new, batch, buffers)

    def _restore(self, batch: int, cache: Cache | None) -> None:
        """The model's KV cache as `cache` holds it (empty for None), for `batch` rows."""
        if self._cache_batch != batch:
            self.model.set_kv_cache(batch_size=batch, max_seq_length=self.config.n_ctx)
            self._cache_batch = batch
        for i, block in enumerate(self.model.transformer.h):
            kv = block.attn.kv_cache
            if cache is None:
                kv.reset_parameters()
            else:
                kv.k.copy_(cache.buffers[i][0])
                kv.v.copy_(cache.buffers[i][1])


# What it runs: the families it has a model and converter for; the attention biases its converters do
# not map (every family's but Qwen2's) are refused by `unsupported` (a predicate: they are switches of
# only some families). What it lacks is a capability, not a config: no `trace`, no `attention_mask`.
def has_converter(config: ModelConfig) -> bool:
    """Whether litgpt's converter maps every weight of `config` (`unsupported` finds no reason)."""
    return unsupported(config) is None


SHAPES = Constraints(families=tuple(TEMPLATES), supports=has_converter)


def build(config: ModelConfig, weights: Weights) -> LitGPTModel:
    """The family's `litgpt.model.GPT` in float32, its weights converted by litgpt's own converter."""
    _litgpt()
    return LitGPTModel(config, weights)


build.constraints = SHAPES  # type: ignore[attr-defined]
