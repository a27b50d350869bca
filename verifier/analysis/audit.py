"""The source articles' concrete claims, each checked with the suite's own code.

Each claim is a row: what is claimed, the value as the article states it, the exact value the suite
computes, and a verdict: "correct" (equal), "rounded" (a round figure within 1% of the exact
value), "wrong", or "skipped: <why>" when what the check needs is absent. The checks use the real
tokenizer (`verifier.formats.tokenizer`), the parameter formula (`verifier.model.params`) and canonical weight
shapes, and the NumPy reference's layers on real-shaped models with seeded weights.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verifier.analysis import tolerance
from verifier.analysis.trace import padding_effect
from verifier.formats.tokenizer import TokenizerNotFound, find_tokenizer
from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.params import parameter_table
from verifier.model.presets import preset
from verifier.model.weights import Weights, init_weights, weight_shapes
from verifier.reference import NumpyModel

CORRECT, ROUNDED, WRONG = "correct", "rounded", "wrong"
NO_TOKENIZER = "skipped: no tokenizer (set VERIFIER_DATA_DIR or --tokenizer)"
ROUNDING = 0.01  # a round figure this close to the exact value is "rounded", not "wrong"

CAPITAL_TEXT = "The capital of France is"
CAPITAL_STATED = [464, 3361, 295, 2238, 318]
# The model inputs of the numerical checks. GPT-2's ids of CAPITAL_TEXT, and llama2.c's of
# "Once upon a time" (BOS first), as the real tokenizers give them (see tests/test_tokenizer.py).
GPT2_TOKENS = [464, 3139, 286, 4881, 318]
STORY_TOKENS = [1, 9038, 2501, 263, 931]

# (component, GPT-2 parameters) as two versions of the articles' breakdown state them.
BREAKDOWNS = {
    "version 1": [("embedding", 38.4e6), ("q, k, v", 63.5e6), ("output projection", 12.8e6), ("MLP", 9.6e6)],
    "version 2": [("embedding", 38.4e6), ("q, k, v", 21.2e6), ("output projection", 7.1e6), ("MLP", 56.6e6)],
}
# The formula's component names in `verifier.model.params`' breakdown.
_BREAKDOWN_ROWS = {
    "embedding": "token embedding",
    "q, k, v": "attention q, k, v",
    "output projection": "attention output",
    "MLP": "MLP",
}
GPT2_FORMULA = "50000 * 768 + (768 * 768 * 3 + 768 * 768 + 768 * 3072 * 2) * 12"
GPT2_FORMULA_STATED = 124e6  # "= 124M"

# The stories15M table: llama2.c's checkpoint fields, the canonical weights (by name suffix) or
# RoPE table each one holds, and the count stated for it.
STORIES15M_TABLE = [
    ("token_embedding_table", "embed_tokens.weight", 9_216_000),
    ("rms_att_weight", "input_layernorm.weight", 1_728),
    ("wq", "q_proj.weight", 497_664),
    ("wk", "k_proj.weight", 497_664),
    ("wv", "v_proj.weight", 497_664),
    ("wo", "o_proj.weight", 497_664),
    ("rms_ffn_weight", "post_attention_layernorm.weight", 1_728),
    ("w1", "gate_proj.weight", 1_327_104),
    ("w2", "down_proj.weight", 1_327_104),
    ("w3", "up_proj.weight", 1_327_104),
    ("rms_final_weight", "model.norm.weight", 288),
    ("freq_cis_real", "RoPE cos table", 6_144),
    ("freq_cis_imag", "RoPE sin table", 6_144),
]
STORIES15M_TOTAL = 15_204_000


@dataclass(frozen=True)
class Claim:
    """One claim: what is claimed, as stated, the exact value, the verdict, and how it was found."""

    claim: str
    stated: str
    exact: str
    verdict: str
    detail: str = ""


def _millions(n: float) -> str:
    return f"{n / 1e6:.1f}M"


def number_verdict(stated: float, exact: int) -> tuple[str, str]:
    """(verdict, how far off) of a stated count against the exact one."""
    if stated == exact:
        return CORRECT, ""
    off = (stated - exact) / exact
    if abs(off) < ROUNDING:
        return ROUNDED, f"{off:+.2%} from {exact:,}"
    return WRONG, f"{stated / exact:.2f} x the exact {exact:,}"


def _number_claim(claim: str, stated: float, stated_text: str, exact: int, detail: str = "") -> Claim:
    verdict, off = number_verdict(stated, exact)
    return Claim(claim, stated_text, f"{exact:,}", verdict, "; ".join(x for x in (off, detail) if x))


def evaluate(expression: str) -> int:
    """The value of an expression of integers, +, * and parentheses (an article's arithmetic)."""

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(f"only integers, + and * are evaluated, found {ast.dump(node)}")

    return value(ast.parse(expression, mode="eval").body)


def tokenizer_claims(tokenizer_path: str | Path | None = None) -> list[Claim]:
    """The token ids of "The capital of France is", by GPT-2's real tokenizer."""
    claim = f"{CAPITAL_TEXT!r} is token ids"
    try:
        tokenizer = find_tokenizer("gpt2", preset("gpt2").vocab_size, tokenizer_path)
    except TokenizerNotFound:  # a --tokenizer that cannot be read is the user's error, not a skip
        return [Claim(claim, str(CAPITAL_STATED), "", NO_TOKENIZER)]
    exact = tokenizer.encode(CAPITAL_TEXT)
    if exact == CAPITAL_STATED:
        return [Claim(claim, str(CAPITAL_STATED), str(exact), CORRECT, f"GPT-2 tokenizer at {tokenizer.source}")]
    differ = sum(a != b for a, b in zip(exact, CAPITAL_STATED, strict=False)) + abs(len(exact) - len(CAPITAL_STATED))
    spelled = "".join(tokenizer.piece(t) for t in CAPITAL_STATED)
    detail = (
        f"{differ} of {len(CAPITAL_STATED)} ids differ; the stated ids spell {spelled!r} "
        f"(GPT-2 tokenizer at {tokenizer.source})"
    )
    return [Claim(claim, str(CAPITAL_STATED), str(exact), WRONG, detail)]


def gpt2_size_claims() -> list[Claim]:
    """GPT-2's vocabulary, and its embedding, with and without the position table."""
    config = preset("gpt2")
    rows = {r.component: r.count for r in parameter_table(config).rows}
    return [
        _number_claim("GPT-2's vocabulary (tokens)", 50_000, "50,000", config.vocab_size),
        _number_claim(
            "GPT-2's token embedding (parameters)",
            38.4e6,
            "38.4M",
            rows["token embedding"],
            f"{config.vocab_size:,} x {config.d_model}, plus a position embedding of {rows['position embedding']:,} "
            f"({config.n_ctx} x {config.d_model}) the statement leaves out",
        ),
    ]


def gpt2_breakdown_claims() -> list[Claim]:
    """Both versions of the articles' GPT-2 breakdown, component by component, and their formula."""
    config = preset("gpt2")
    table = parameter_table(config)
    rows = {r.component: r.count for r in table.rows}
    claims = [
        _number_claim(f"GPT-2 breakdown, {version}: {name}", stated, _millions(stated), rows[_BREAKDOWN_ROWS[name]])
        for version, parts in BREAKDOWNS.items()
        for name, stated in parts
    ]
    formula = evaluate(GPT2_FORMULA)
    # What the formula leaves out, each counted by the suite's formula or weight set.
    biases = sum(int(np.prod(s)) for n, s in weight_shapes(config).items() if n.endswith(".bias") and ".ln_" not in n)
    left_out = {
        "biases": biases,
        "LayerNorms": rows["norms (LayerNorm gain, bias)"],
        "position embedding": rows["position embedding"],
        f"the last {config.vocab_size - 50_000} vocabulary rows": (config.vocab_size - 50_000) * config.d_model,
    }
    claims.append(
        Claim(
            "GPT-2 formula: its value",
            f"{GPT2_FORMULA} = {GPT2_FORMULA_STATED / 1e6:.0f}M",
            f"{formula:,}",
            CORRECT if round(formula / 1e6) == GPT2_FORMULA_STATED / 1e6 else WRONG,
            f"the expression is {_millions(formula)}, which rounds to {round(formula / 1e6)}M",
        )
    )
    claims.append(
        Claim(
            "GPT-2 formula: the parameter count",
            f"{formula:,} (the formula)",
            f"{table.total:,}",
            CORRECT if formula == table.total else WRONG,
            "leaves out " + ", ".join(f"{name} {count:,}" for name, count in left_out.items()),
        )
    )
    return claims


def stories15m_claims() -> list[Claim]:
    """llama2.c's stories15M table: each field of its checkpoint and the total it stores."""
    config = preset("llama2c-stories15M")
    shapes = weight_shapes(config)
    table = parameter_table(config)
    claims = []
    for field, holds, stated in STORIES15M_TABLE:
        if holds.startswith("RoPE"):
            exact, source = table.stored_rope // 2, f"{holds} [{config.n_ctx}, {config.d_head // 2}]"
        else:
            names = [n for n in shapes if n.endswith(holds)]
            exact, source = sum(int(np.prod(shapes[n])) for n in names), f"{len(names)} x {holds}"
        claims.append(_number_claim(f"stories15M table: {field}", stated, f"{stated:,}", exact, source))
    claims.append(
        _number_claim(
            "stories15M table: total",
            STORIES15M_TOTAL,
            f"{STORIES15M_TOTAL:,}",
            table.total_with_stored_rope,
            f"values stored; {table.stored_rope:,} of them are RoPE tables, not learned: "
            f"{table.total:,} learned parameters",
        )
    )
    return claims


def _formula_claim(
    claim: str, stated: str, exact: str, article: np.ndarray, reference: np.ndarray, where: str, note: str = ""
) -> Claim:
    """A stated formula run on the reference layer's inputs: correct if within float32 rounding of its output."""
    diff = float(np.abs(article - reference).max())
    verdict = CORRECT if diff <= tolerance.bound(reference) else WRONG
    detail = f"{where}: max |diff| {diff:.3g} where the reference's largest |value| is {np.abs(reference).max():.3g}"
    return Claim(claim, stated, exact, verdict, f"{detail}; {note}" if note else detail)


# The articles' formulas as stated, to be run on the inputs the reference's layers get.
def rms_norm_as_stated(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """[T, d_model] -> [T, d_model]: x / sqrt(sum_i x_i^2) * gain (no mean over d_model, no eps)."""
    return x / np.sqrt(np.square(x).sum(axis=-1, keepdims=True)) * gain


def attention_as_stated(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q, k, v [n_heads, T, d_head] -> [T, d_model]: (Q K^T) V per head, causal, without softmax or scaling."""
    T = q.shape[1]
    out = ((q @ k.swapaxes(-1, -2)) * np.tril(np.ones((T, T)))) @ v  # the causal mask kept, as zeros
    return out.transpose(1, 0, 2).reshape(T, -1)


def ffn_as_stated(h: np.ndarray, w1: np.ndarray, w2: np.ndarray, w3: np.ndarray) -> np.ndarray:
    """[T, d_model] -> [T, d_model]: x1 = W1 h, x3 = W3 h, x2 = x1 + x3, out = W2 x2 (nn.Linear layouts)."""
    return (h @ w1.T + h @ w3.T) @ w2.T


@dataclass(frozen=True)
class LayerInputs:
    """Layer 0 of a stories15M-shaped model with seeded weights, traced in float64 on STORY_TOKENS."""

    config: ModelConfig
    weights: Weights
    trace: dict[str, np.ndarray]

    def weight(self, name: str) -> np.ndarray:
        """A weight of layer 0, by its name inside the layer (`mlp.gate_proj.weight`)."""
        return self.weights["model.layers.0." + name]

    def stage(self, op: str) -> np.ndarray:
        return self.trace[stages.layer_stage(0, op)]


def layer_inputs(seed: int = 0) -> LayerInputs:
    config = preset("llama2c-stories15M")
    weights = init_weights(config, seed=seed, dtype=np.float64)
    return LayerInputs(config, weights, NumpyModel(config, weights, np.float64).trace(np.array(STORY_TOKENS)))


def layer_claims(seed: int = 0) -> list[Claim]:
    """The articles' RMSNorm, attention and FFN against the reference's layers, each formula given
    the inputs the reference's layer got (see `layer_inputs`)."""
    li = layer_inputs(seed)
    where = f"layer 0 of stories15M, seeded weights, {len(STORY_TOKENS)} tokens"
    rms_ref = li.stage("attn_norm")
    rms_article = rms_norm_as_stated(li.trace[stages.EMBED], li.weight("input_layernorm.weight"))
    attn_article = attention_as_stated(li.stage("q_rope"), li.stage("k_rope"), li.stage("v"))
    w1, w2, w3 = (li.weight(f"mlp.{name}_proj.weight") for name in ("gate", "down", "up"))  # llama2.c's names
    ffn_article = ffn_as_stated(li.stage("mlp_norm"), w1, w2, w3)
    scale = float(np.median(rms_ref / rms_article))
    scale_note = f"the stated form is {scale:.3g} x smaller (sqrt(d_model) = {np.sqrt(li.config.d_model):.4g})"
    return [
        _formula_claim(
            "RMSNorm's RMS",
            "RMS(e) = sqrt(sum_i e_i^2)",
            "sqrt(mean_i e_i^2 + eps)",
            rms_article,
            rms_ref,
            where,
            scale_note,
        ),
        _formula_claim(
            "attention output",
            "Q K^T V",
            "softmax(Q K^T / sqrt(d_head), causal) V",
            attn_article,
            li.stage("attn"),
            f"{where}, causal mask kept",
        ),
        _formula_claim(
            "feed-forward (FFN)",
            "x1 = W1 x, x3 = W3 x, x2 = x1 + x3, then W2 x2",
            "W2 (silu(W1 x) * W3 x), SwiGLU",
            ffn_article,
            li.stage("mlp_out"),
            where,
        ),
    ]


def padding_claims(pad_to: int = 1024, seed: int = 0, model_name: str = "gpt2") -> list[Claim]:
    """Padding to the maximum length: a preset (GPT-2) with seeded weights, float32, real positions compared."""
    config = preset(model_name)
    model = NumpyModel(config, init_weights(config, seed=seed))
    tokens = np.array(GPT2_TOKENS if config.family == "gpt2" else STORY_TOKENS)
    effect = padding_effect(model, tokens, pad_to)
    return [
        Claim(
            f"padding to the max length, {pad_to}, changes nothing",
            f"generation pads to the max length, {pad_to}",
            f"the {len(tokens)} real positions' logits move by {effect.max_diff:.2g}",
            CORRECT if effect.harmless else WRONG,
            f"{model_name}, seeded weights, float32, padded with token {effect.pad_token}: "
            + (
                f"within float32 rounding (tolerance {effect.bound:.2g}) and the same next token: "
                "the causal mask hides later positions"
                if effect.harmless
                else f"beyond the float32 tolerance {effect.bound:.2g} or a different next token"
            ),
        )
    ]


def audit(*, tokenizer_path: str | Path | None = None, pad_to: int = 1024, seed: int = 0) -> list[Claim]:
    """Every claim, checked."""
    return [
        *tokenizer_claims(tokenizer_path),
        *gpt2_size_claims(),
        *gpt2_breakdown_claims(),
        *stories15m_claims(),
        *layer_claims(seed),
        *padding_claims(pad_to, seed),
    ]


_WIDTHS = (30, 28, 30, 44)


def render(claims: list[Claim]) -> str:
    """claim / as stated / exact / verdict, wrapped to columns."""
    header = ("claim", "as stated", "exact", "verdict")
    lines = []
    for i, row in enumerate([header, *((c.claim, c.stated, c.exact, _verdict_text(c)) for c in claims)]):
        cells = [textwrap.wrap(text, width) or [""] for text, width in zip(row, _WIDTHS, strict=True)]
        for j in range(max(map(len, cells))):
            parts = [(cell[j] if j < len(cell) else "").ljust(w) for cell, w in zip(cells, _WIDTHS, strict=True)]
            lines.append("  ".join(parts).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in _WIDTHS))
    counts = {v: sum(c.verdict.split(":")[0] == v for c in claims) for v in (CORRECT, ROUNDED, WRONG, "skipped")}
    lines += ["", ", ".join(f"{n} {v}" for v, n in counts.items())]
    return "\n".join(lines)


def _verdict_text(c: Claim) -> str:
    return f"{c.verdict}: {c.detail}" if c.detail else c.verdict


def to_json(claims: list[Claim]) -> dict[str, Any]:
    return {"claims": [asdict(c) for c in claims]}
