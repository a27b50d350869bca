"""Checks both models' claims share: each takes the run it reads (GPT-2's or stories15M's), so the
same code gives GPT-2's articles and the stories15M article the verdicts their models support."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from verifier.analysis.audit.claim import Check
from verifier.analysis.audit.inputs import Inputs, Run
from verifier.analysis.audit.verdict import (
    Evidence,
    Figure,
    Match,
    Reading,
    compare_arrays,
    compare_dims,
    shape_text,
    worst,
)
from verifier.model import stages
from verifier.model.weights import EMBEDDING, classifier

RunOf = Callable[[Inputs], Run]
Shape = tuple[int, ...]
StatedShape = Sequence[int | Figure]


def describe_run(run: Run) -> str:
    """How a check on a seeded run was made, as a row says it."""
    return f"the NumPy reference: {run.name}, seeded weights, {run.model.dtype.name}, on {run.text!r} ({run.T} tokens)"


def stage_shape(run: Run, op: str, T: int) -> Shape:
    """A layer-0 stage's (or `embed`'s, `logits`') shape with T positions: the run's own for its T,
    else the stage formula's (`verifier.model.stages`, which the shape properties check)."""
    stage = op if op in (stages.EMBED, stages.FINAL_NORM, stages.LOGITS) else stages.layer_stage(0, op)
    return tuple(run.trace[stage].shape) if T == run.T else stages.stage_shapes(run.config, T)[stage]


def merged_heads(shape: Shape) -> Shape:
    """[n_heads, T, d_head] as one matrix, the heads side by side: [T, n_heads * d_head]."""
    return (shape[1], shape[0] * shape[2])


def shapes_check(shapes: Callable[[Run, int], Sequence[Shape]], run_of: RunOf, note: str = "") -> Check:
    """Stated shapes {T: (shape, ...)} against `shapes(run, T)`, for each T an article uses."""

    def check(inputs: Inputs, stated: Mapping[int, Sequence[StatedShape]]) -> Evidence:
        run = run_of(inputs)
        matches, shown = [], []
        for T, stated_shapes in stated.items():
            exact = shapes(run, T)
            matches += [compare_dims(s, e) for s, e in zip(stated_shapes, exact, strict=True)]
            shown.append(", ".join(map(shape_text, exact)))
        how = describe_run(run) + (
            f"; T = {', '.join(str(T) for T in stated if T != run.T)} by the stage shape formula"
            if any(T != run.T for T in stated)
            else ""
        )
        return Evidence(" | ".join(shown), worst(matches), note, how)

    return check


def q_projection(run: Run) -> np.ndarray:
    """The query projection before the split into heads: [T, n_heads * d_head]."""
    h = run.stage("attn_norm")
    if run.config.family == "gpt2":
        d = run.config.d_model
        return h @ run.weight("attn.c_attn.weight")[:, :d] + run.weight("attn.c_attn.bias")[:d]
    return h @ run.weight("self_attn.q_proj.weight").T


def head_split(run_of: RunOf) -> Check:
    """Stated (n_heads, d_head), head h being columns [h d_head, (h+1) d_head) of the projection,
    against the heads the run computes."""

    def check(inputs: Inputs, stated: tuple[int, int]) -> Evidence:
        run = run_of(inputs)
        q, projection = run.stage("q"), q_projection(run)  # [n_heads, T, d_head], [T, n_heads * d_head]
        n, d = stated
        if n * d != projection.shape[1]:
            return Evidence(
                f"{q.shape[0]} x {q.shape[2]}",
                Match.NO,
                f"{n} x {d} is not the projection's width {projection.shape[1]}",
                describe_run(run),
            )
        heads = projection.reshape(run.T, n, d).transpose(1, 0, 2)
        match, diff, _ = compare_arrays(heads, q) if heads.shape == q.shape else (Match.NO, float("inf"), 0.0)
        why = (
            f"head h is columns {d}h to {d}(h+1) of the [{run.T}, {projection.shape[1]}] projection "
            f"(max |diff| {diff:.2g} from the model's heads); joined again, they are [{run.T}, {n * d}]"
            if match is Match.EXACT
            else f"the model's heads are {q.shape[0]} x [{run.T}, {q.shape[2]}]"
        )
        return Evidence(f"{q.shape[0]} heads of {q.shape[2]}", match, why, describe_run(run))

    return check


def embedding_rows(run_of: RunOf) -> Check:
    """The stated tables (`"token"`, `"position"`) summed at the tokens' rows, against what enters layer 0."""

    def check(inputs: Inputs, stated: Sequence[str]) -> Evidence:
        run = run_of(inputs)
        c, ids, T = run.config, run.tokens, run.T
        tables = {"token": run.weights[EMBEDDING[c.family]][ids]}
        if c.family == "gpt2":
            tables["position"] = run.weights["transformer.wpe.weight"][:T]
        embed = run.trace[stages.EMBED]
        if not set(stated) <= set(tables):
            return Evidence(
                "", Match.NO, f"{c.family} has no {', '.join(set(stated) - set(tables))} table", describe_run(run)
            )
        match, diff, _ = compare_arrays(sum(tables[t] for t in stated), embed)
        readings: tuple[Reading, ...] = ()
        if match is Match.NO and "position" in tables and "position" not in stated:
            token_part, _, _ = compare_arrays(tables["token"], embed - tables["position"])
            readings = (
                Reading("the token embedding's part of it, before the position embedding is added", token_part),
            )
        exact = " + ".join(f"{t} table rows" for t in tables)
        why = (
            f"layer 0 gets the token embedding's rows plus the position embedding's rows 0-{T - 1} (wpe "
            f"[{c.n_ctx}, {c.d_model}], which the articles never mention): the rows alone are off by up to {diff:.3g}"
            if c.family == "gpt2" and match is Match.NO
            else f"max |diff| {diff:.2g}" + (": positions enter later, through RoPE" if c.family == "llama" else "")
        )
        return Evidence(exact, match, why, describe_run(run), readings)

    return check


def mapped_back(run_of: RunOf) -> Check:
    """The stated stage's last row times the classifier, against the model's next-token logits."""

    def check(inputs: Inputs, stated: str) -> Evidence:
        run = run_of(inputs)
        W = classifier(run.config, run.weights)  # [vocab_size, d_model]
        logits = run.trace[stages.LOGITS][-1]
        match, diff, _ = compare_arrays(run.trace[stated][-1] @ W.T, logits)
        readings: tuple[Reading, ...] = ()
        if stated != stages.FINAL_NORM:
            after_norm, _, _ = compare_arrays(run.trace[stages.FINAL_NORM][-1] @ W.T, logits)
            readings = (Reading("the last row after the final norm", after_norm),)
        norm = "LayerNorm ln_f" if run.config.family == "gpt2" else "RMSNorm (norm)"
        same = int((run.trace[stated][-1] @ W.T).argmax()) == int(logits.argmax())
        why = (
            f"the model applies the final {norm} to the last row first"
            + f": without it the logits are off by up to {diff:.3g}"
            + ("" if same else " and the predicted token differs")
            if match is Match.NO
            else f"logits = {stated}[-1] x classifier^T (max |diff| {diff:.2g})"
        )
        return Evidence(f"final_norm[-1] x classifier^T ({norm} first)", match, why, describe_run(run), readings)

    return check


def with_reason(reason: str | None, how: str) -> Evidence | None:
    """Evidence for an input that is missing (`reason`), or None when it is there."""
    return None if reason is None else Evidence("", Match.NEEDS_INPUT, reason, how)
