"""The canonical weight set: NumPy arrays named and laid out as `transformers` stores them.

Names and shapes are those of the state dict of `GPT2LMHeadModel` / `LlamaForCausalLM` as
`save_pretrained` writes it: a tied classifier has no `lm_head.weight` entry (the model reads
the token embedding instead). GPT-2's projections are `Conv1D` weights, [d_in, d_out];
Llama's are `nn.Linear` weights, [d_out, d_in], with q/k rows in HF's rotate-half order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np
import numpy.typing as npt

from verifier.model.config import FAMILIES, ModelConfig

Weights = dict[str, np.ndarray]
# Any read-only view of a canonical weight set: a `Weights` dict, or `LazyWeights` read on access.
WeightMap = Mapping[str, np.ndarray]

EMBEDDING = {f: "transformer.wte.weight" if f == "gpt2" else "model.embed_tokens.weight" for f in FAMILIES}
CLASSIFIER = "lm_head.weight"


def _gpt2_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    d = c.d_model
    shapes: dict[str, tuple[int, ...]] = {
        "transformer.wte.weight": (c.vocab_size, d),
        "transformer.wpe.weight": (c.n_ctx, d),
    }
    for i in range(c.n_layers):
        p = f"transformer.h.{i}."
        shapes |= {
            p + "ln_1.weight": (d,),
            p + "ln_1.bias": (d,),
            p + "attn.c_attn.weight": (d, 3 * d),
            p + "attn.c_attn.bias": (3 * d,),
            p + "attn.c_proj.weight": (d, d),
            p + "attn.c_proj.bias": (d,),
            p + "ln_2.weight": (d,),
            p + "ln_2.bias": (d,),
            p + "mlp.c_fc.weight": (d, c.d_ff),
            p + "mlp.c_fc.bias": (c.d_ff,),
            p + "mlp.c_proj.weight": (c.d_ff, d),
            p + "mlp.c_proj.bias": (d,),
        }
    shapes |= {"transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,)}
    return shapes


def _llama_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The Llama layout, with the weights each switch adds under its published checkpoints' names: q/k/v
    and o biases, Qwen3's per-head q_norm/k_norm [d_head] (OLMo 2's over the whole projection, [n_heads d_head]
    and [n_kv_heads d_head]), Gemma 2's four norms a layer (its `post_attention_layernorm` follows
    attention; `pre_feedforward_layernorm` precedes the MLP; OLMo 2 has the two after them only),
    Phi-3's fused `qkv_proj` and `gate_up_proj`, and a MoE family's router and experts (`_mlp_shapes`)."""
    d, q, kv = c.d_model, c.n_heads * c.d_head, c.n_kv_heads * c.d_head
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, d)}
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        layer: dict[str, tuple[int, ...]] = {p + "input_layernorm.weight": (d,)} if c.pre_norm else {}
        if c.fused_qkv:
            layer[a + "qkv_proj.weight"] = (q + 2 * kv, d)
        else:
            for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                layer[a + name + ".weight"] = (rows, d)
                if c.qkv_bias:
                    layer[a + name + ".bias"] = (rows,)
        layer[a + "o_proj.weight"] = (d, q)
        if c.o_bias:
            layer[a + "o_proj.bias"] = (d,)
        if c.qk_norm:  # over each head, or (OLMo 2) over the whole projection
            layer |= {a + "q_norm.weight": (q,), a + "k_norm.weight": (kv,)} if c.qk_norm_whole else \
                     {a + "q_norm.weight": (c.d_head,), a + "k_norm.weight": (c.d_head,)}  # fmt: skip
        layer[p + "post_attention_layernorm.weight"] = (d,)
        if c.sandwich_norm and c.pre_norm:
            layer[p + "pre_feedforward_layernorm.weight"] = (d,)
        layer |= _mlp_shapes(c, i)
        if c.sandwich_norm:
            layer[p + "post_feedforward_layernorm.weight"] = (d,)
        shapes |= layer
    shapes["model.norm.weight"] = (d,)
    return shapes


def _gated_mlp(prefix: str, d: int, d_ff: int, fused: bool = False) -> dict[str, tuple[int, ...]]:
    """A gated MLP's gate, up and down projections under `prefix` (gate and up as one matrix if `fused`)."""
    if fused:
        return {prefix + "gate_up_proj.weight": (2 * d_ff, d), prefix + "down_proj.weight": (d, d_ff)}
    return {prefix + "gate_proj.weight": (d_ff, d), prefix + "up_proj.weight": (d_ff, d),
            prefix + "down_proj.weight": (d, d_ff)}  # fmt: skip


def _mlp_shapes(c: ModelConfig, i: int) -> dict[str, tuple[int, ...]]:
    """Layer i's MLP: dense, or a router [n_experts, d_model] and its experts, named as the published
    checkpoints name them (Mixtral's `block_sparse_moe` with w1 gate, w3 up, w2 down; Qwen2-MoE's
    `mlp.experts.{e}` and its shared expert with its [1, d_model] gate)."""
    p, d = f"model.layers.{i}.", c.d_model
    if not c.is_moe_layer(i):
        return _gated_mlp(p + "mlp.", d, c.d_ff, c.fused_gate_up)
    f, n = c.expert_d_ff, c.n_experts
    if c.family == "mixtral":
        m = p + "block_sparse_moe."
        shapes: dict[str, tuple[int, ...]] = {m + "gate.weight": (n, d)}
        for e in range(n):
            x = f"{m}experts.{e}."
            shapes |= {x + "w1.weight": (f, d), x + "w2.weight": (d, f), x + "w3.weight": (f, d)}
        return shapes
    m = p + "mlp."
    shapes = {m + "gate.weight": (n, d)}
    for e in range(n):
        shapes |= _gated_mlp(f"{m}experts.{e}.", d, f)
    if c.d_shared_expert is not None:
        shapes |= _gated_mlp(m + "shared_expert.", d, c.d_shared_expert)
        shapes[m + "shared_expert_gate.weight"] = (1, d)
    return shapes


def moe_prefix(c: ModelConfig, i: int) -> str:
    """Layer i's MoE block: Mixtral's `block_sparse_moe.`, Qwen2-MoE's `mlp.` (published names)."""
    return f"model.layers.{i}." + ("block_sparse_moe." if c.family == "mixtral" else "mlp.")


def expert_names(c: ModelConfig, i: int, e: int) -> tuple[str, str, str]:
    """The gate, up and down weights of expert e of layer i (Mixtral: w1, w3, w2)."""
    x = f"{moe_prefix(c, i)}experts.{e}."
    if c.family == "mixtral":
        return x + "w1.weight", x + "w3.weight", x + "w2.weight"
    return x + "gate_proj.weight", x + "up_proj.weight", x + "down_proj.weight"


def weight_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every canonical weight name and its shape, in state-dict order."""
    shapes = _gpt2_shapes(config) if config.family == "gpt2" else _llama_shapes(config)
    if not config.tie_embeddings:
        shapes[CLASSIFIER] = (config.vocab_size, config.d_model)
    return shapes


def classifier_name(config: ModelConfig) -> str:
    """The name of the [vocab_size, d_model] classifier: `lm_head.weight`, or the embedding's when tied."""
    return EMBEDDING[config.family] if config.tie_embeddings else CLASSIFIER


def classifier(config: ModelConfig, weights: WeightMap) -> np.ndarray:
    """The [vocab_size, d_model] classifier: `lm_head.weight`, or the embedding when tied."""
    return weights[classifier_name(config)]


def input_axis(name: str, ndim: int) -> int | None:
    """The axis along which the weight `name` meets its input in a matrix product: 0 for GPT-2's
    `Conv1D` weights [d_in, d_out]; -1 for `nn.Linear` weights [d_out, d_in] and for embeddings
    [rows, d_model] (a tied classifier reads them as [vocab_size, d_model]); None for vectors."""
    if ndim != 2:
        return None
    return 0 if name.startswith("transformer.h.") else -1


def _is_norm_gain(name: str) -> bool:
    return name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight", "layernorm.weight", "norm.weight"))


def _is_router(name: str) -> bool:
    """A MoE router [n_experts, d_model] or Qwen2-MoE's shared-expert gate [1, d_model]. They read the
    normalised h (rms ~1), so rows of norm ~2 give logits of spread ~2 at any d_model: each token's
    top-k differs from its neighbours', the k-th and (k+1)-th probabilities are rarely close (never
    within float64 rounding), and the shared expert's sigmoid is neither ~0 nor ~1. At `scale` 0.02 the
    logits would spread by ~0.1: every token a near-tie, the routing an accident of rounding."""
    return name.endswith(("block_sparse_moe.gate.weight", "mlp.gate.weight", "shared_expert_gate.weight"))


def init_weights(
    config: ModelConfig, *, seed: int = 0, scale: float = 0.02, dtype: npt.DTypeLike = np.float32
) -> Weights:
    """Seeded random weights for `config`.

    Matrices and biases are N(0, scale^2) (GPT-2 initialises matrices at scale 0.02; a larger
    scale reaches large-logit regimes; biases are random rather than zero so that a dropped
    bias shows). Norm gains are 1 + N(0, 0.1^2), so that a norm which ignores its gain shows;
    Gemma's (`norm_plus_one`, which scale by 1 + gain) are N(0, 0.1^2), the same scales, so that a
    norm missing its + 1 shows; Qwen3's per-head q/k norm gains are 1 + N(0, 0.3^2), far from
    uniform along the head, so that the norm taken after RoPE instead of before shows.
    A MoE router's rows and a shared expert's gate are N(0, 4 / d_model) whatever `scale` (`_is_router`).
    The result depends only on (config, seed, scale); `dtype` only sets the storage type.
    """
    return dict(iter_init_weights(config, seed=seed, scale=scale, dtype=dtype))


def iter_init_weights(
    config: ModelConfig, *, seed: int = 0, scale: float = 0.02, dtype: npt.DTypeLike = np.float32
) -> Iterator[tuple[str, np.ndarray]]:
    """`init_weights` one tensor at a time, in state-dict order: for models too large to hold."""
    rng = np.random.default_rng(seed)
    for name, shape in weight_shapes(config).items():
        # Drawn in float32 whatever `dtype` is, so a float64 copy holds the same values.
        noise = rng.standard_normal(shape, dtype=np.float32)
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            noise *= np.float32(0.3)
            noise += np.float32(0.0 if config.norm_plus_one else 1.0)
        elif _is_router(name):
            noise *= np.float32(2.0 / np.sqrt(config.d_model))
        elif _is_norm_gain(name):
            noise *= np.float32(0.1)
            noise += np.float32(0.0 if config.norm_plus_one else 1.0)
        else:
            noise *= np.float32(scale)
        yield name, noise.astype(dtype, copy=False)


class LazyWeights(Mapping[str, np.ndarray]):
    """A canonical weight set whose arrays are made when looked up: `fetch(name)` runs at every
    lookup and nothing is kept, so a forward pass that uses each weight once holds one at a time
    (a mapped checkpoint, weights perturbed on the fly). `shapes` names every weight.

    A reader may also offer `fetch_into(name, out)`: the weight's float32 values read into `out`, a
    float32 array of its shape the caller owns, and True; or False where it cannot (a tensor stored in
    another dtype), and the caller looks the weight up instead. A streamed pass reads into memory it
    already holds that way (`verifier.reference.model`)."""

    def __init__(
        self,
        shapes: Mapping[str, tuple[int, ...]],
        fetch: Callable[[str], np.ndarray],
        fetch_into: Callable[[str, np.ndarray], bool] | None = None,
    ) -> None:
        self.shapes = dict(shapes)
        self._fetch = fetch
        self._fetch_into = fetch_into

    @property
    def reads_into(self) -> bool:
        """Whether the reader offers `fetch_into` (some of its tensors may still be looked up instead)."""
        return self._fetch_into is not None

    def read_into(self, name: str, out: np.ndarray) -> bool:
        """Read weight `name` into `out` (float32, its shape) if the reader can: True if it did."""
        if name not in self.shapes:
            raise KeyError(name)
        return self._fetch_into is not None and self._fetch_into(name, out)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.shapes:
            raise KeyError(name)
        return self._fetch(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)

    def __repr__(self) -> str:
        return f"LazyWeights({len(self.shapes)} tensors, read on access)"

    def map(self, change: Callable[[str, np.ndarray], np.ndarray]) -> LazyWeights:
        """The same weights with `change(name, array)` applied at each lookup."""
        return LazyWeights(self.shapes, lambda name: change(name, self._fetch(name)))
