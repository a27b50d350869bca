"""Quantized models against the weights they were given, as llama.cpp judges a quantization: the
KL divergence of next-token distributions and whether each position keeps its top token (the
statistics of its perplexity tool's `--kl-divergence`). The other properties judge a quantized
model against the oracle on its dequantized weights; this one bounds what quantizing cost against
the original ones, by the class's limits (`verifier.analysis.precision`). Models of floating
classes skip it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note, reject

from verifier.analysis.agreement import distribution_agreement
from verifier.plugin.contract import CheckedModel
from verifier.plugin.interface import Unsupported
from verifier.plugin.registry import ModelSpec
from verifier.properties import checks, models
from verifier.properties.cases import Prompted, prompted_cases
from verifier.properties.models import requires
from verifier.properties.oracle import Oracle, oracle
from verifier.properties.pinned_cases import ONE_KV_HEAD, RICH_GPT2, RICH_LLAMA, STORIES15M, pinned

PROMPTED = (Prompted(RICH_LLAMA, 8), Prompted(RICH_GPT2, 8), Prompted(ONE_KV_HEAD, 4), Prompted(STORIES15M, 4))


def _next_tokens(model: CheckedModel, prompted: Prompted) -> tuple[np.ndarray, np.ndarray | None]:
    """The tokens the model is judged on (the prompt, then its greedy picks for a black box) and
    its logits of the positions after the prompt's last one, [n_new, V] (None for a black box)."""
    prompt, n_new = prompted.case.token_array(), prompted.n_new
    if model.lacks("logits") is None:  # every position, or the last one's by prefixes
        return prompt, model.logits(prompt)
    try:
        picked = model.greedy(prompt, n_new)
    except Unsupported as e:  # e.g. run.c's prompt encoding, or a stop at BOS: a declared limit
        note(f"the model refused this prompt: {e}")
        checks.record_refusal(f"the model refused a prompt: {e}")
        reject()
    return np.concatenate([prompt, picked]), None


def _top_tokens_kept(model: CheckedModel, o: Oracle, tokens: np.ndarray, picks: np.ndarray, first: int) -> None:
    """Each position's pick is the original weights' top token, up to ties within the class bound
    widened by what correct models of the class compute (`Oracle.quantized_logits`)."""
    original = o.original.logits(tokens)
    quantized = o.quantized_logits(tokens)
    for t, token in zip(range(first, len(tokens)), picks, strict=False):
        bound = o.precision.bound(original[t], [q[t] for q in quantized], n_layers=o.config.n_layers)
        what = f"the top token at position {t} against the original (not quantized) weights"
        checks.top_token(model, original[t], int(token), bound, what=what, source="the original weights")


@requires(quantized=True)
@pinned(*PROMPTED, arg="prompted")
@given(prompted=prompted_cases(max_n_ctx=64))
def test_next_token_distributions_stay_close_to_the_original_weights(model_spec: ModelSpec, prompted: Prompted) -> None:
    """A quantized model's next-token distributions stay close to the original weights' (mean KL divergence; each
    position keeps its top token up to ties)."""
    case = prompted.case
    model = models.build(model_spec, case)
    limits = model.precision.distribution
    if limits is None:  # declared on the model only, not seen by the probes
        pytest.skip(f"model {model.name!r} is {model.precision.label}, not a quantized precision class")
    if model.lacks("logits") is not None and "greedy" not in model.capabilities:
        pytest.skip(f"model {model.name!r} has neither 'greedy' nor 'logits'")
    o = oracle(case)
    tokens, logits = _next_tokens(model, prompted)
    if logits is None:  # a black box: its greedy picks, teacher-forced
        _top_tokens_kept(model, o, tokens, tokens[case.T :], case.T - 1)
        return
    original = o.original.logits(tokens)
    found = distribution_agreement(original, logits)
    correct = max(distribution_agreement(original, q).mean_kl for q in o.quantized_logits(tokens))
    limit = max(limits.kl_factor * correct, limits.kl_floor)
    checks.record_ratio(found.mean_kl / limit)
    if found.mean_kl > limit:
        checks.fail(
            model,
            f"next-token distributions of {case.T} positions against the original (not quantized) weights",
            f"{found.describe()}; the {model.precision.label} limit is {limit:.3g} nats ({limits.kl_factor:g} x "
            f"{correct:.3g}, the largest of the dequantized oracle's, the class emulation's and the nudged oracles'; "
            f"at least {limits.kl_floor:g})",
        )
    _top_tokens_kept(model, o, tokens, np.argmax(logits, axis=-1), 0)
