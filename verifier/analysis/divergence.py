"""Divergence localization: the first stage where a model's trace departs from the oracle's.

Given a model's trace and the oracle's ({stage: array}, stages as in `verifier.model.stages`), every
stage both hold is compared in compute order under the tolerance policy, and the first one
beyond its bound is named with the error there and at the stages before it:

    layer 0 scores: max |diff| 3.1e-01 at [1, 3, 2] (tolerance 2.0e-05, 1.6e+04x);
    before it, within tolerance: embed 1.2e-08; layer 0: attn_norm 3.0e-08, q 1.1e-08, ...

A MoE layer's `experts` (indices: `stages.INDEX_OPS`) is compared as each token's set of experts: it
diverges at the first token whose set is not the oracle's, unless the oracle met near-ties there and the
model's set differs from its only among their experts (`near_ties`); a divergent MoE layer's description
says whether the model chose the oracle's experts there, and if not, at which token.

Stages a model does not trace are skipped; a stage of the wrong shape diverges there, and so does a
Llama q or k stage that matches the oracle's only in the other RoPE layout (`_layout_problem`: the
model's trace holds q/k in an order it does not declare, and the message says what to declare). The oracle's
trace (and its neighbours') may come as a stream of groups in compute order, one layer's stages at a
time (`NumpyModel.trace_layers`): each group is compared and dropped, so a full-size model's
localization never holds all stages of all layers of the oracle at once.

Logits decoded in chunks after a KV cache that depart are described by `DecodeDivergence`: the first
divergent chunk and position, and whether the full pass agrees (then the bug is in the cached path,
which a trace, itself a full pass, cannot show; else the trace's localization as above).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from verifier.analysis import tolerance
from verifier.analysis.precision import FLOAT32, Precision
from verifier.model import stages
from verifier.model.config import FAMILY_SWITCHES, ROPE_FAMILIES

# The families whose MLP applies the tanh GELU: GPT-2's, and Gemma's gate (GeGLU).
GELU_FAMILIES = frozenset(
    {"gpt2", *(family for family, (fixed, _) in FAMILY_SWITCHES.items() if fixed.get("mlp_act") == "gelu_tanh")}
)

# Stages before the divergent one listed in full; earlier ones are summarised.
_LISTED_BEFORE = 12

Trace = Mapping[str, np.ndarray]
# Near-ties of the oracle's routers: {(MoE layer, position): the experts whose router probabilities nearly
# tie there, chosen or left out}; a token may use any top_k of them with the rest of its choice.
NearTies = Mapping[tuple[int, int], frozenset[int]]
# A whole trace, or its groups of stages in compute order (e.g. `NumpyModel.trace_layers`).
Stages = Trace | Iterable[Trace]


@dataclass(frozen=True)
class StageError:
    """One stage compared: the largest |diff| and where, the bound, or why it could not be compared."""

    stage: str
    max_error: float
    bound: float
    index: tuple[int, ...] = ()
    problem: str = ""

    @property
    def ratio(self) -> float:
        if self.problem:
            return float("inf")
        return tolerance.Comparison(self.max_error, self.bound, self.index).ratio

    @property
    def ok(self) -> bool:
        return self.ratio <= 1.0


def stage_label(stage: str) -> str:
    """`layers.0.scores` -> `layer 0 scores`; other stages keep their name."""
    layer, op = stages.split_stage(stage)
    return op if layer is None else f"layer {layer} {op}"


@dataclass(frozen=True)
class Divergence:
    """Every compared stage in compute order, and the first beyond tolerance (None: all agree)."""

    stages: tuple[StageError, ...]
    untraced: tuple[str, ...] = ()
    precision: str = "float32"  # the class whose bounds the stages were compared under

    @property
    def first(self) -> StageError | None:
        return next((s for s in self.stages if not s.ok), None)

    def describe(self) -> str:
        """One paragraph: the first divergent stage, its error and the errors before it."""
        first = self.first
        if first is None:
            return (
                f"all {len(self.stages)} traced stages agree with the oracle, so the divergence lies outside "
                "the traced computation (e.g. logits() and trace() do not compute the same thing)"
            )
        head = f"{stage_label(first.stage)}: "
        if first.problem:
            head += first.problem
        else:
            where = f" at {list(first.index)}" if first.index else ""
            head += (
                f"max |diff| {first.max_error:.2e}{where} ({self.precision} tolerance {first.bound:.2e}, "
                f"{first.ratio:.2g}x the bound)"
            )
        before = self.stages[: self.stages.index(first)]
        return head + _describe_choice(first, self.stages) + "; " + _describe_agreeing(before)

    def as_rows(self) -> list[tuple[str, float, float]]:
        """(stage, max error, bound) per compared stage, in compute order (inf error: wrong shape)."""
        return [(s.stage, float("inf") if s.problem else s.max_error, s.bound) for s in self.stages]


def chunk_list(chunks: Sequence[int]) -> str:
    """Chunk lengths as a list, runs of 3 or more written once: (8, 1, 1, 1, 1, 5) -> `[8, 1 x 4, 5]`."""
    runs: list[list[int]] = []
    for n in chunks:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    items = [f"{n} x {count}" if count >= 3 else ", ".join([str(n)] * count) for n, count in runs]
    return "[" + ", ".join(items) + "]"


@dataclass(frozen=True)
class DivergentChunk:
    """The first chunk of a decode whose logits depart from the oracle's beyond `bound`.

    The decode ran chunks of lengths `chunks` one after another; this is chunk `index` (from 0),
    decoded at positions `start`.. after a cache of `start` tokens (0: a prefill). Of its `compared`
    positions (each one, or only its last for a model that gives the last position's logits),
    `positions` are beyond the bound; at the first, in batch row `row` (None: one sequence), the
    error is `max_error`, largest at vocabulary index `token`.
    """

    chunks: tuple[int, ...]
    index: int
    start: int
    compared: int
    positions: tuple[int, ...]
    max_error: float
    bound: float
    token: int
    row: int | None = None

    def short(self) -> str:
        """`chunk 2 of [5, 7], at position 5`: where, without the sizes."""
        in_row = "" if self.row is None else f" of batch row {self.row}"
        return f"chunk {self.index + 1} of {chunk_list(self.chunks)}, at position {self.positions[0]}{in_row}"

    def describe(self, precision: str) -> str:
        n = self.chunks[self.index]
        span = f"position {self.start}" if n == 1 else f"positions {self.start} to {self.start + n - 1}"
        after = f"after a cache of {self.start} tokens" if self.start else "with no cache (a prefill)"
        in_row = "" if self.row is None else f" of batch row {self.row}"
        shown = ", ".join(map(str, self.positions[:8])) + (", ..." if len(self.positions) > 8 else "")
        ratio = tolerance.Comparison(self.max_error, self.bound, ()).ratio
        text = (
            f"first divergent chunk: chunk {self.index + 1} of {chunk_list(self.chunks)} ({span}, decoded {after}); "
            f"first divergent position {self.positions[0]}{in_row}: max |diff| {self.max_error:.3g} at vocabulary "
            f"index {self.token} ({precision} tolerance {self.bound:.3g}, {ratio:.3g}x the bound)"
        )
        if self.compared > 1:
            text += f"; {len(self.positions)} of the {self.compared} positions compared in the chunk diverge: {shown}"
        return text


@dataclass(frozen=True)
class DecodeDivergence(Divergence):
    """Logits decoded in chunks that depart from the oracle's: the first divergent chunk and position
    (`chunk`), and the full pass `logits(tokens)` at the same positions, its error / bound in
    `full_pass`. When the full pass agrees, the divergence is in decode's own path and the trace (a
    full pass too) is not consulted: `stages` is empty. When it departs too, `stages` hold the trace's
    localization (`traced`), as for any failure of the full pass."""

    chunk: DivergentChunk | None = None
    full_pass: float | None = None
    traced: bool = False

    def describe(self) -> str:
        """The trace's localization first, if consulted; then the divergent chunk and what the full pass says."""
        lines = [super().describe()] if self.traced else []
        departs = self.full_pass is not None and self.full_pass > 1.0
        # Where the trace has localized a bug the full pass has too, the chunk is a detail: a clause, not a line.
        if self.chunk is not None and not (departs and self.traced):
            lines.append(self.chunk.describe(self.precision))
        if self.full_pass is not None and self.full_pass <= 1.0:
            where = (
                "decode's prefill (cache=None), not in what it shares with the full pass"
                if self.chunk is not None and self.chunk.start == 0
                else "decode's cached path (a chunk decoded after a cache); a trace of the full pass cannot show it"
            )
            lines.append(
                f"the full pass logits(tokens) agrees with the oracle at these positions ({self.full_pass:.2g}x the "
                f"bound), so the bug is in {where}"
            )
        elif departs:
            first = (
                f" (decoded in chunks, it first departs in {self.chunk.short()})" if self.chunk and self.traced else ""
            )
            lines.append(
                f"the full pass logits(tokens) departs from the oracle too ({self.full_pass:.3g}x the bound): the bug "
                f"is not the cache's alone{first}"
            )
        return "\n".join(lines)


def _describe_choice(first: StageError, compared: Sequence[StageError]) -> str:
    """Whether the MoE layer of a divergent stage (other than its `experts`) chose the oracle's experts: a
    clause naming the first token where it did not; "" outside a MoE layer, or where it traces no choice."""
    layer, op = stages.split_stage(first.stage)
    if layer is None or op in stages.INDEX_OPS:
        return ""
    chosen = next((s for s in compared if s.stage == stages.layer_stage(layer, "experts")), None)
    if chosen is None:
        return ""
    if chosen.ok:
        return f"; layer {layer} chose the oracle's experts at every token"
    return f"; layer {layer} chose other experts than the oracle: {chosen.problem}"


def _describe_agreeing(before: Sequence[StageError]) -> str:
    if not before:
        return "it is the first stage traced"
    cut = max(0, len(before) - _LISTED_BEFORE)
    summarised, listed = before[:cut], before[cut:]
    groups: list[str] = []
    current_layer: int | None = None
    for s in listed:
        layer, op = stages.split_stage(s.stage)
        item = f"{op} the oracle's" if op in stages.INDEX_OPS else f"{op} {s.max_error:.1e}"
        if layer is not None and layer == current_layer:
            groups[-1] += f", {item}"
        else:
            groups.append(f"layer {layer}: {item}" if layer is not None else item)
        current_layer = layer
    text = "before it, within tolerance: " + "; ".join(groups)
    if summarised:
        worst = max(s.ratio for s in summarised)
        text += f" (and {len(summarised)} earlier stages, at most {worst:.2g}x their bounds)"
    return text


def _comparable(stage: str, array: np.ndarray) -> np.ndarray:
    """The defined part of a stage: scores only on and below the diagonal (zero above it)."""
    _, op = stages.split_stage(stage)
    if op in stages.CAUSAL_OPS and array.ndim >= 2:
        return np.tril(np.asarray(array, np.float64))
    return np.asarray(array, np.float64)


def _floor_scale(stage: str, oracle_value: np.ndarray, group: Trace, family: str | None) -> np.ndarray | None:
    """What a stage's floor is relative to, where not its own size: GPT-2's tanh GELU,
    0.5 x (1 + tanh(z)), computed in a format loses its tail where 1 + tanh(z) cancels (transformers
    in bfloat16 and float16 gives exactly 0 below x = -3.5, where the oracle has -2.9e-4), so its
    error grows with 0.5 |x| (the GELU's input, `mlp_up`), not with the result; in Gemma's GeGLU,
    gelu(gate) * up, with 0.5 |gate| |up|."""
    layer, op = stages.split_stage(stage)
    if op != "mlp_act" or layer is None or family not in GELU_FAMILIES:
        return None
    gelu_input = group.get(stages.layer_stage(layer, "mlp_up" if family == "gpt2" else "mlp_gate"))
    if gelu_input is None:
        return None
    if family != "gpt2":
        up = group.get(stages.layer_stage(layer, "mlp_up"))
        if up is None:
            return None
        gelu_input = gelu_input * up
    return np.maximum(np.abs(oracle_value), 0.5 * np.abs(gelu_input))


def _compare_experts(stage: str, got: np.ndarray, want: np.ndarray, near_ties: NearTies) -> StageError:
    """A MoE layer's chosen experts, int [T, k], against the oracle's [T, top_k], as a set per token: the
    error is the number of tokens whose set differs (a near-tie's other expert taken in place of the
    oracle's is no difference), at the first of them."""
    if got.ndim != 2 or got.shape[0] != want.shape[0]:  # a count of experts other than top_k is compared
        problem = f"shape {list(got.shape)} where the oracle has {list(want.shape)}"
        return StageError(stage, float("inf"), 0.0, problem=problem)
    layer = stages.split_stage(stage)[0]
    ties = {t: experts for (at, t), experts in near_ties.items() if at == layer}  # position -> the tied experts
    differ = [t for t in range(len(want)) if not _same_choice(got[t], want[t], ties.get(t))]
    if not differ:
        return StageError(stage, 0.0, 0.0)
    t = differ[0]
    problem = (
        f"at position {t} the model uses experts {sorted(map(int, got[t]))} where the oracle chose "
        f"{sorted(map(int, want[t]))} ({len(differ)} of {len(want)} tokens chose otherwise)"
    )
    return StageError(stage, float(len(differ)), 0.0, (t,), problem)


def _same_choice(got: np.ndarray, want: np.ndarray, tie: frozenset[int] | None) -> bool:
    """Whether a token's experts got [k] are the oracle's want [top_k] in any order, or differ from them
    only among the experts of the token's near-ties `tie` (those the oracle took and those it left out)."""
    mine, oracle = set(got.tolist()), set(want.tolist())
    if len(mine) != len(got) or len(mine) != len(oracle):  # an expert used twice, or a count not top_k
        return False
    return mine == oracle or (tie is not None and (mine ^ oracle) <= tie)


def _groups(stages: Stages) -> Iterator[Trace]:
    return iter([stages]) if isinstance(stages, Mapping) else iter(stages)


def localize(
    trace: Trace,
    expected: Stages,
    neighbours: Sequence[Stages] = (),
    *,
    rope_positions: int = 0,
    precision: Precision = FLOAT32,
    n_layers: int = 1,
    family: str | None = None,
    rope_layout: str = stages.ROTATE_HALF,
    near_ties: NearTies | None = None,
) -> Divergence:
    """Compare a model's `trace` with the oracle's `expected` trace, stage by stage, under the
    bounds of `precision` (`verifier.analysis.precision`); the `family` ("gpt2", "llama", ...) says
    which stages' floors follow their inputs (`_floor_scale`). A MoE layer's `experts` are compared as
    sets (`_compare_experts`), either expert of a near-tie of the oracle's router (`near_ties`) accepted.

    `neighbours` are the traces the tolerance policy measures conditioning with (see
    `verifier.analysis.tolerance`), given as `expected` is (whole, or as groups read in step with
    it); `rope_positions` is the largest position for RoPE models, else 0. `rope_layout` is the
    order of q/k the model declares (its trace has been reordered from it to rotate-half).
    """
    compared: list[StageError] = []
    untraced: list[str] = []
    for group, *around in zip(_groups(expected), *map(_groups, neighbours), strict=True):
        for stage, want in group.items():
            if stage not in trace:
                untraced.append(stage)
                continue
            got = np.asarray(trace[stage])
            if stages.is_index_stage(stage):
                compared.append(_compare_experts(stage, got, np.asarray(want), near_ties or {}))
                continue
            if got.shape != want.shape:
                problem = f"shape {list(got.shape)} where the oracle has {list(want.shape)}"
                compared.append(StageError(stage, float("inf"), 0.0, problem=problem))
                continue
            others = [_comparable(stage, n[stage]) for n in around if stage in n]
            oracle_value = _comparable(stage, want)
            error, index = tolerance.worst(_comparable(stage, got), oracle_value)
            scale = _floor_scale(stage, oracle_value, group, family)
            limit = precision.bound(oracle_value, others, rope_positions=rope_positions, n_layers=n_layers, scale=scale)
            problem = ""
            if family in ROPE_FAMILIES and stages.split_stage(stage)[1] in stages.ROPE_LAYOUT_OPS:
                found = tolerance.Comparison(error, limit, index)
                problem = _layout_problem(got, oracle_value, found, rope_layout, precision.label)
            compared.append(StageError(stage, error, limit, index, problem))
    return Divergence(tuple(compared), tuple(untraced), precision.label)


def _layout_problem(
    got: np.ndarray, want: np.ndarray, found: tolerance.Comparison, declared: str, precision: str
) -> str:
    """Why a q/k stage [heads, T, d_head] (reordered from the `declared` layout) diverges, if it does
    and the trace read in the other layout matches the oracle's: a trace in an order the model does
    not declare. "" otherwise (it agrees, or it is wrong in both orders: a bug the stage shows)."""
    if found.ok:
        return ""
    other = next(layout for layout in stages.ROPE_LAYOUTS if layout != declared)
    reread = stages.to_rotate_half(stages.from_rotate_half(got, declared), other)
    error, _ = tolerance.worst(reread, want)
    if not tolerance.Comparison(error, found.bound, found.index).ok:
        return ""
    where = f" at {list(found.index)}" if found.index else ""
    named = {layout: layout.replace("_", "-") for layout in stages.ROPE_LAYOUTS}
    return (
        f"read in the {named[other]} order ({stages.PAIRS[other]} of each head) it matches the oracle's (max |diff| "
        f"{error:.2e}, {precision} tolerance {found.bound:.2e}); in the {named[declared]} order it is read in, it "
        f"does not (max |diff| {found.max_error:.2e}{where}): if the model's trace holds q and k in the "
        f"{named[other]} order, declare rope_layout = {other!r} on the model or its factory"
    )
