"""The checks of the GPT-2 articles' claims: "Life of a Tensor" (en, and its Chinese version zh) and
"Visualize Generation in LLM" (vg, as text and as Markdown), about GPT-2 small. The claims are rows of
`verifier/data/audit/claims.toml`, which name these checks by the names `checkers.CHECKERS` gives them.

Sizes are checked against GPT-2's published config.json and the canonical weight shapes it gives,
flows and shapes against the NumPy reference with seeded weights, tokens against GPT-2's real
tokenizer, generation against `transformers`, and trained values against GPT-2's trained weights
when the Hugging Face cache has them.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from verifier.analysis.audit.checks import (
    Shape,
    describe_run,
    stage_shape,
    with_reason,
)
from verifier.analysis.audit.claim import Check
from verifier.analysis.audit.inputs import CAPITAL_TEXT, GPT2_TOKENS, Inputs, Run
from verifier.analysis.audit.verdict import (
    Evidence,
    Figure,
    Match,
    Reading,
    because,
    compare_arrays,
    compare_dims,
    compare_equal,
    compare_figure,
    off,
    shape_text,
    worst,
)
from verifier.model import stages
from verifier.model.config import ModelConfig
from verifier.model.params import parameter_table
from verifier.model.weights import weight_shapes
from verifier.reference import NumpyModel
from verifier.reference import layers as L

GPT2_FORMULA = "50000 * 768 + (768 * 768 * 3 + 768 * 768 + 768 * 3072 * 2) * 12"
LAYER_FORMULA = "768 * 768 * 3 + 768 * 768 + 768 * 3072 * 2"
HOW_TOKENIZER = "GPT-2's tokenizer"


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


def gpt2_run(inputs: Inputs) -> Run:
    return inputs.gpt2


def _published(inputs: Inputs) -> tuple[ModelConfig, str]:
    """GPT-2's config as its trained checkpoint has it when present, else as published; and where from."""
    pub = inputs.gpt2_published
    how = f"GPT-2's published config.json ({pub.source})"
    real = inputs.real_gpt2
    if isinstance(real, str):
        return pub.config, how
    return real.config, f"{how}; the trained checkpoint at {real.path}"


# ---- tokens ----------------------------------------------------------------------------------


def pieces(inputs: Inputs, stated: Sequence[str]) -> Evidence:
    tokenizer = inputs.gpt2_tokenizer
    if isinstance(tokenizer, str):
        return Evidence("", Match.NEEDS_INPUT, tokenizer, HOW_TOKENIZER)
    pieces = [tokenizer.piece(t) for t in tokenizer.encode(CAPITAL_TEXT)]
    match = compare_equal(list(stated), [p.strip() for p in pieces])
    why = f"{len(pieces)} tokens, one per word; each piece after the first carries the space before its word"
    return Evidence(repr(pieces), match, why, f"{HOW_TOKENIZER} at {tokenizer.source}")


def token_ids(inputs: Inputs, stated: Sequence[int]) -> Evidence:
    tokenizer = inputs.gpt2_tokenizer
    if isinstance(tokenizer, str):
        return Evidence("", Match.NEEDS_INPUT, tokenizer, HOW_TOKENIZER)
    exact = tokenizer.encode(CAPITAL_TEXT)
    stated = list(stated)
    differ = sum(a != b for a, b in zip(exact, stated, strict=False)) + abs(len(exact) - len(stated))
    spelled = "".join(tokenizer.piece(t) for t in stated)
    why = "" if exact == stated else f"{differ} of {len(stated)} ids differ; the stated ids spell {spelled!r}"
    return Evidence(str(exact), compare_equal(stated, exact), why, f"{HOW_TOKENIZER} at {tokenizer.source}")


def input_shape(inputs: Inputs, stated: Shape) -> Evidence:
    tokenizer = inputs.gpt2_tokenizer
    if isinstance(tokenizer, str):
        return Evidence("", Match.NEEDS_INPUT, tokenizer, HOW_TOKENIZER)
    exact = (1, len(tokenizer.encode(CAPITAL_TEXT)))
    why = "one sequence (a batch of 1) of 5 positions, as transformers takes input_ids"
    return Evidence(shape_text(exact), compare_dims(stated, exact), why, f"{HOW_TOKENIZER} at {tokenizer.source}")


# ---- sizes from the published config ------------------------------------------------------------


def config_value(attr: str, field: str) -> Check:
    def check(inputs: Inputs, stated: Figure) -> Evidence:
        config, how = _published(inputs)
        exact = getattr(config, attr)
        how = f"{how}: {field} = {exact}"
        if attr == "vocab_size" and not isinstance(inputs.gpt2_tokenizer, str):
            how += f"; the tokenizer has {inputs.gpt2_tokenizer.vocab_size:,} tokens"
        return Evidence(f"{exact:,}", compare_figure(stated, exact), off(stated, exact), how)

    return check


def heads(inputs: Inputs, stated: tuple[int, int, int]) -> Evidence:
    config, how = _published(inputs)
    exact = (config.n_heads, config.d_head, config.n_heads * config.d_head)
    why = (
        f"n_head {config.n_heads}, d_head = n_embd / n_head = {config.d_head}, and {exact[0]} x {exact[1]} = {exact[2]}"
    )
    return Evidence(f"{exact[0]} * {exact[1]} = {exact[2]}", compare_equal(tuple(stated), exact), why, how)


def layers(inputs: Inputs, stated: tuple[int, tuple[str, str]]) -> Evidence:
    config, how = _published(inputs)
    run = inputs.gpt2
    order = list(run.trace)
    first = {
        "attention": order.index(stages.layer_stage(0, "attn")),
        "MLP": order.index(stages.layer_stage(0, "mlp_up")),
    }
    blocks = (config.n_layers, tuple(sorted(first, key=first.__getitem__)))
    layers = {stages.split_stage(s)[0] for s in run.trace} - {None}
    why = f"n_layer {config.n_layers}; each block runs attention, then the MLP ({len(layers)} blocks traced)"
    return Evidence(
        f"{blocks[0]} x ({blocks[1][0]}, then {blocks[1][1]})",
        compare_equal(tuple(stated), blocks),
        why,
        f"{how}; {describe_run(run)}",
    )


def _weight_shape(names: Sequence[str], split: Mapping[str, int] | None = None) -> Check:
    """Stated weight shapes against the canonical shapes (`transformer.<name>`) of GPT-2's config;
    `split` divides a fused weight's last axis ({"attn.c_attn.weight": 3} for W_q, W_k, W_v)."""

    def check(inputs: Inputs, stated: Sequence[Sequence[int | Figure]]) -> Evidence:
        config, how = _published(inputs)
        shapes = weight_shapes(config)
        exact = []
        for name in names:
            full = "transformer." + (name if name.startswith(("wte", "wpe")) else "h.0." + name)
            shape = shapes[full]
            parts = (split or {}).get(name, 1)
            exact.append((shape[0], shape[1] // parts) if parts > 1 else shape)
        match = worst([compare_dims(s, e) for s, e in zip(stated, exact, strict=True)])
        why = ", ".join(
            f"{n} {shape_text(shapes['transformer.' + (n if n.startswith('w') else 'h.0.' + n)])}" for n in names
        )
        if split:
            why += " (W_q, W_k, W_v side by side in c_attn; each is 12 heads of [768, 64])"
        return Evidence(", ".join(map(shape_text, exact)), match, why, f"canonical weight shapes of {how}")

    return check


def qkv_weights(inputs: Inputs, stated: Sequence[Sequence[int]]) -> Evidence:
    config, how = _published(inputs)
    fused = weight_shapes(config)["transformer.h.0.attn.c_attn.weight"]  # [d_model, 3 d_model]
    matrix = (fused[0], fused[1] // 3)
    exact = (matrix, (fused[0], matrix[1] // config.n_heads))
    match = worst([compare_dims(s, e) for s, e in zip(stated, exact, strict=True)])
    why = f"attn.c_attn.weight {shape_text(fused)} holds W_q, W_k, W_v side by side; each is {config.n_heads} heads"
    return Evidence(" = ".join(map(shape_text, exact)) + f" x {config.n_heads}", match, why, f"weight shapes of {how}")


def mlp_weights(inputs: Inputs, stated: tuple[Shape, Shape, int]) -> Evidence:
    config, how = _published(inputs)
    shapes = weight_shapes(config)
    up, down = shapes["transformer.h.0.mlp.c_fc.weight"], shapes["transformer.h.0.mlp.c_proj.weight"]
    exact = (up, down, config.d_ff // config.d_model)
    match = worst([compare_dims(stated[0], up), compare_dims(stated[1], down), compare_equal(stated[2], exact[2])])
    why = f"mlp.c_fc.weight {shape_text(up)}, mlp.c_proj.weight {shape_text(down)}: n_inner = 4 x n_embd"
    return Evidence(f"{shape_text(up)}, {shape_text(down)}, {exact[2]}x", match, why, f"weight shapes of {how}")


def table_shape(inputs: Inputs, stated: Sequence[int | Figure]) -> Evidence:
    config, how = _published(inputs)
    exact = weight_shapes(config)["transformer.wte.weight"]
    why = because(f"wte.weight {shape_text(exact)}", off(stated[0], exact[0]) if isinstance(stated[0], Figure) else "")
    return Evidence(shape_text(exact), compare_dims(stated, exact), why, f"weight shapes of {how}")


def tied(inputs: Inputs, stated: bool) -> Evidence:
    config, how = _published(inputs)
    why = (
        "lm_head is tied to wte (tie_word_embeddings, transformers' default for GPT-2): "
        "the logits are the last row times wte^T"
    )
    exact = "tied" if config.tie_embeddings else "a separate lm_head"
    return Evidence(exact, compare_equal(stated, config.tie_embeddings), why, how)


# ---- shapes and flow of the seeded reference ------------------------------------------------------


def _per_head(shape: Shape) -> Shape:
    return shape[1:]


def one_head(run: Run, T: int) -> list[Shape]:
    c = run.config
    return [stage_shape(run, "attn_norm", T), (c.d_model, c.d_head), _per_head(stage_shape(run, "q", T))]


def _attention_shapes(run: Run, T: int, n_heads: int | None = None) -> tuple[Shape, ...]:
    """K^T, Q K^T and its softmax for one head: the run's, or with `n_heads` heads of the same width."""
    c = run.config if n_heads is None else run.config.replace(n_heads=n_heads, n_kv_heads=n_heads)
    k = stages.stage_shapes(c, T)[stages.layer_stage(0, "k")] if n_heads else stage_shape(run, "k", T)
    scores = stages.stage_shapes(c, T)[stages.layer_stage(0, "scores")] if n_heads else stage_shape(run, "scores", T)
    return (k[2], k[1]), scores[1:], scores[1:]


def _full_width_scores(run: Run) -> tuple[float, float]:
    """Q K^T at full width against the heads: (max |full - sum of heads' q k^T|, the smallest max |softmax
    difference| between it, scaled by 1/sqrt(d_model), and any head's attention probabilities)."""
    q, k = (run.stage(op).astype(np.float64) for op in ("q", "k"))  # [n_heads, T, d_head]
    full = L.merge_heads(q[None])[0] @ L.merge_heads(k[None])[0].T  # [T, T]
    summed = np.abs(full - (q @ k.swapaxes(-1, -2)).sum(axis=0)).max()
    mask = L.causal_mask(run.T, run.T)
    probs = L.softmax(np.where(mask, full / np.sqrt(run.config.d_model), -np.inf))
    heads = run.stage("probs").astype(np.float64)
    return float(summed), float(min(np.abs(probs - h).max() for h in heads))


def attention(inputs: Inputs, stated: Mapping[int, Sequence[Shape]]) -> Evidence:
    run = inputs.gpt2
    c = run.config
    matches, one_head, shown = [], [], []
    for T, shapes in stated.items():
        exact = _attention_shapes(run, T)
        matches += [compare_dims(s, e) for s, e in zip(shapes, exact, strict=True)]
        one_head += [compare_dims(s, e) for s, e in zip(shapes, _attention_shapes(run, T, n_heads=1), strict=True)]
        shown.append(", ".join(f"{c.n_heads} x {shape_text(s)}" for s in exact))
    summed, apart = _full_width_scores(run)
    why = (
        f"GPT-2 computes {c.n_heads} heads of [T, {c.d_head}] x [{c.d_head}, T]; a [{c.d_model}, T] K^T is one head at "
        f"full width, whose Q K^T is the sum of the {c.n_heads} heads' q k^T (max |diff| {summed:.2g}): its "
        f"softmax differs from every head's attention by at least {apart:.3g} (layer 0, {run.T} tokens)"
    )
    readings = (Reading(f"one head of width {c.d_model} (n_heads 1)", worst(one_head)),)
    return Evidence(" | ".join(shown), worst(matches), why, describe_run(run), readings)


def attention_formula_as_stated(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Softmax(Q K^T / sqrt(d)) V as the articles write it, d the width of the vectors and no mask:
    [T, d], [S, d], [S, d] -> [T, d]."""
    return L.softmax(q @ k.T / np.sqrt(q.shape[-1])) @ v


def attention_formula(inputs: Inputs, stated: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]) -> Evidence:
    """The stated formula on layer 0's full-width Q, K, V (as the articles apply it), and per head on
    each position with the positions up to it (the causal mask), against the attention GPT-2 computes."""
    run = inputs.gpt2
    c = run.config
    q, k, v = (run.stage(op).astype(np.float64) for op in ("q", "k", "v"))  # [n_heads, T, d_head]
    reference = run.stage("attn")  # [T, d_model], the heads joined

    def joined(heads: list[np.ndarray]) -> np.ndarray:
        return L.merge_heads(np.stack(heads)[None])[0]

    full, full_diff, _ = compare_arrays(stated(*(L.merge_heads(x[None])[0] for x in (q, k, v))), reference)
    unmasked = joined([stated(q[h], k[h], v[h]) for h in range(c.n_heads)])
    causal = joined(
        [
            np.concatenate([stated(q[h, t : t + 1], k[h, : t + 1], v[h, : t + 1]) for t in range(run.T)])
            for h in range(c.n_heads)
        ]
    )
    per_head, per_head_diff, _ = compare_arrays(causal, reference)
    unmasked_diff, last_diff = (float(np.abs(d).max()) for d in (unmasked - reference, (unmasked - reference)[-1]))
    why = (
        f"as written, one softmax of the full-width [{run.T}, {c.d_model}] Q K^T / sqrt({c.d_model}) over every "
        f"position: off by up to {full_diff:.3g}; per head (d = {c.d_head}) without a mask: off by up to "
        f"{unmasked_diff:.3g}, except the last row ({last_diff:.2g}), which sees every position anyway; per head "
        f"with GPT-2's causal mask: within {per_head_diff:.2g}"
    )
    readings = (
        Reading(
            f"per head ({c.n_heads} of width {c.d_head}, d = {c.d_head}), each position attending to itself and "
            "the positions before it (the causal mask the formula leaves out)",
            per_head,
        ),
    )
    exact = f"per head: softmax(q k^T / sqrt({c.d_head}), causal) v, {c.n_heads} heads joined"
    return Evidence(exact, full, why, describe_run(run), readings)


def every_layer(inputs: Inputs, stated: Shape) -> Evidence:
    run = inputs.gpt2
    shapes = {tuple(run.stage("resid_mlp", i).shape) for i in range(run.config.n_layers)}
    exact = shapes.pop() if len(shapes) == 1 else None
    match = compare_dims(stated, exact) if exact is not None else Match.NO
    why = f"the residual stream after each of the {run.config.n_layers} blocks"
    return Evidence(shape_text(exact) if exact else "shapes differ", match, why, describe_run(run))


def last_row(inputs: Inputs, stated: int) -> Evidence:
    run = inputs.gpt2
    next_logits = run.decoded.next_logits
    row = range(run.T)[stated]
    match, diff, _ = compare_arrays(run.trace[stages.LOGITS][row], next_logits)
    why = (
        f"row {row} of the logits [{run.T}, {run.config.vocab_size}] against the next token's logits as generation "
        f"gets them (the tokens fed one at a time through the KV cache): max |diff| {diff:.2g}"
    )
    return Evidence(f"row {run.T - 1}, the last position", match, why, describe_run(run))


# ---- the padded input and generation -------------------------------------------------------------


def padded_last_row(inputs: Inputs, stated: int) -> Evidence:
    p, run = inputs.padding, inputs.gpt2
    row = range(p.length)[stated]
    if row < run.T:  # a real position: the padding leaves it as it is
        match = Match.EXACT if p.harmless else Match.NO
        why = f"row {row} is a real position, unchanged by the padding (max |diff| {p.max_diff:.2g})"
    elif row == p.length - 1:
        same = p.last_row_token == p.next_token
        match = Match.EXACT if p.last_row_diff <= p.bound and same else Match.NO
        why = (
            f"row {row} of the [{p.length}, {run.config.d_model}] input is a padding position: its logits differ from "
            f"the next token's by up to {p.last_row_diff:.3g} and predict token {p.last_row_token}"
            + (" (the same by chance)" if same else f", not {p.next_token}")
            + f"; the next token's row is {run.T - 1}, the last real one (padded with {p.pad_token}, as transformers "
            "pads GPT-2; the articles' '0s' would fill the same positions). Real GPT-2 generation does not pad"
        )
    else:
        raise ValueError(f"only the last row or a real row of the padded input is checked, found row {row}")
    return Evidence(
        f"row {run.T - 1}, the last real position", match, why, f"{describe_run(run)}, padded to {p.length}"
    )


def generation(inputs: Inputs, stated: Mapping[str, Any]) -> Evidence:
    """One line says generation pads (wrong) to the max length, 1024 (right): it gets one verdict, the
    worst of its parts, and the why says which words hold (en and zh also give the 5 as the sentence
    length, vg the padded embedding as [1024, 768]: right as arithmetic on a padded input)."""
    how = "transformers' GPT2LMHeadModel.generate (greedy, 3 new tokens), input_ids of each forward pass"
    missing = with_reason(inputs.transformers, how)
    if missing:
        return missing
    shapes = inputs.generation_inputs
    config, published = _published(inputs)
    p, run = inputs.padding, inputs.gpt2
    pads = compare_equal(stated["first_input"], shapes[0][1])
    max_length = compare_figure(stated["max_length"], config.n_ctx)
    why = (
        f"generate feeds the {len(GPT2_TOKENS)} tokens (the 5 is the sentence length), then one token per step "
        f"(the KV cache holds the rest); nothing is padded to n_ctx. The max length is n_positions = "
        f"{config.n_ctx:,}{' as stated' if max_length is Match.EXACT else ', not as stated'}; had the input been "
        f"padded (with token {p.pad_token}, to {p.length}), the {run.T} real positions' logits would move by "
        f"{p.max_diff:.2g} (float32 tolerance {p.bound:.2g}): the causal mask hides later positions"
    )
    return Evidence(
        ", ".join(map(shape_text, shapes)),
        worst([pads, max_length]),
        why,
        f"{how} on a GPT-2 of n_ctx 1,024 and narrow widths (the loop does not depend on them); {published}; "
        f"the padding: {describe_run(run)}",
    )


# ---- parameters ------------------------------------------------------------------------------

# The weights each line of the breakdown names: (the embedding's, or one layer's, as GPT-2 names them).
_MATRICES = {
    "embedding": ("wte.weight",),
    "q, k, v": ("attn.c_attn.weight",),
    "output projection": ("attn.c_proj.weight",),
    "MLP": ("mlp.c_fc.weight", "mlp.c_proj.weight"),
}


def _counts(inputs: Inputs) -> tuple[dict[str, int], int, str]:
    config, how = _published(inputs)
    table = parameter_table(config)
    return {r.component: r.count for r in table.rows}, table.total, f"parameter formula of {how}"


def component(name: str) -> Check:
    """A breakdown line against the matrices it names in GPT-2's weights, every layer's; the row says
    what the articles' formula leaves out beside them (biases, the position embedding)."""

    def check(inputs: Inputs, stated: Figure) -> Evidence:
        config, how = _published(inputs)
        shapes = weight_shapes(config)
        if name == "embedding":
            names = ["transformer.wte.weight"]
            beside = f"; the position embedding wpe adds {config.n_ctx * config.d_model:,}"
        else:
            names = [f"transformer.h.{i}.{m}" for i in range(config.n_layers) for m in _MATRICES[name]]
            biases = sum(int(np.prod(shapes[n.removesuffix("weight") + "bias"])) for n in names)
            beside = f" x {config.n_layers} layers; their biases add {biases:,}"
        exact = sum(int(np.prod(shapes[n])) for n in names)
        matrices = ", ".join(f"{m} {shape_text(shapes[n])}" for m, n in zip(_MATRICES[name], names, strict=False))
        why = because(off(stated, exact), matrices + beside)
        return Evidence(f"{exact:,}", compare_figure(stated, exact), why, f"weight shapes of {how}")

    return check


def formula_arithmetic(inputs: Inputs, stated: tuple[Figure, Figure, Figure]) -> Evidence:
    """The article's one equation, 50000 * 768 + (one layer) * 12 = 38.4M + (7.08M) x 12 = 124M: its parts
    and its result, in one row (one line of the article states them all)."""
    exact = (evaluate("50000 * 768"), evaluate(LAYER_FORMULA), evaluate(GPT2_FORMULA))
    match = worst([compare_figure(s, e) for s, e in zip(stated, exact, strict=True)])
    _, total, _ = _counts(inputs)
    why = because(
        *(off(s, e) for s, e in zip(stated, exact, strict=True)),
        f"GPT-2's real total is {total:,}, which the formula does not reach (it leaves parameters out: next row)",
    )
    shown = ", ".join(f"{e:,}" for e in exact)
    return Evidence(shown, match, why, "the article's arithmetic", arithmetic_only=True)


def formula_count(inputs: Inputs, stated: str) -> Evidence:
    config, _ = _published(inputs)
    rows, total, how = _counts(inputs)
    formula = evaluate(stated)
    biases = sum(int(np.prod(s)) for n, s in weight_shapes(config).items() if n.endswith(".bias") and ".ln_" not in n)
    left_out = {
        "biases": biases,
        "LayerNorms": rows["norms (LayerNorm gain, bias)"],
        "position embedding": rows["position embedding"],
        f"the last {config.vocab_size - 50_000} vocabulary rows": (config.vocab_size - 50_000) * config.d_model,
    }
    why = f"the formula gives {formula:,}; it leaves out " + ", ".join(f"{k} {v:,}" for k, v in left_out.items())
    return Evidence(f"{total:,}", compare_equal(formula, total), why, how)


def total(inputs: Inputs, stated: Figure) -> Evidence:
    _, total, how = _counts(inputs)
    real = inputs.real_gpt2
    if not isinstance(real, str):
        stored = sum(int(w.size) for w in real.weights.values())
        how += f"; the trained checkpoint holds {stored:,}"
    return Evidence(f"{total:,}", compare_figure(stated, total), off(stated, total), how)


_PARTS = {
    "embedding": ("token embedding", "position embedding"),
    "attention": ("attention q, k, v", "attention output"),
    "MLP": ("MLP",),
}


def primarily(inputs: Inputs, stated: Sequence[str]) -> Evidence:
    rows, total, how = _counts(inputs)
    shares = {part: sum(rows[c] for c in _PARTS[part]) / total for part in _PARTS}
    held = sum(shares[p] for p in stated)
    why = (
        ", ".join(f"{p} {s:.1%}" for p, s in shares.items())
        + f"; the LayerNorms hold the other {1 - sum(shares.values()):.2%}"
    )
    return Evidence(
        f"{held:.2%} of {total:,}", compare_equal(True, held > 0.5), why, how + " (more than half: 'primarily')"
    )


# ---- trained weights -------------------------------------------------------------------------


def embedding_values(inputs: Inputs, stated: Mapping[str, Sequence[float]]) -> Evidence:
    real = inputs.real_gpt2
    if isinstance(real, str):
        return Evidence("", Match.NEEDS_WEIGHTS, real, "GPT-2's trained token embedding wte, rows of the real ids")
    wte = real.weights["transformer.wte.weight"]
    rows = {word: wte[token, : len(values)] for (word, values), token in zip(stated.items(), GPT2_TOKENS, strict=True)}
    same = all(np.array_equal(np.round(rows[w], 3), np.round(v, 3)) for w, v in stated.items())
    exact = "; ".join(f"{w} = [{', '.join(f'{x:.3f}' for x in r)}]" for w, r in rows.items())
    return Evidence(
        exact,
        compare_equal(True, same),
        "rows of wte at the real ids, to 3 decimals as stated",
        f"GPT-2's trained weights at {real.path}",
    )


def prediction(inputs: Inputs, stated: int) -> Evidence:
    real = inputs.real_gpt2
    if isinstance(real, str):
        return Evidence("", Match.NEEDS_WEIGHTS, real, "GPT-2's trained weights, greedy next token of the real ids")
    logits = NumpyModel(real.config, real.weights).logits(np.array(GPT2_TOKENS))[-1].astype(np.float64)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    token = int(probs.argmax())
    tokenizer = inputs.gpt2_tokenizer
    piece = (lambda t: repr(tokenizer.piece(t))) if not isinstance(tokenizer, str) else (lambda t: f"id {t}")
    rank = int((probs > probs[stated]).sum()) + 1
    why = (
        f"GPT-2 predicts {piece(token)} (p = {probs[token]:.3f}); "
        f"{piece(stated)} ranks {rank} (p = {probs[stated]:.3f})"
    )
    return Evidence(
        f"{token} {piece(token)}",
        compare_equal(stated, token),
        why,
        f"the NumPy reference, float32, with GPT-2's trained weights at {real.path}",
    )
