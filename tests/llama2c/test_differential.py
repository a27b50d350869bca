"""llama2.c's own run.c against the float64 NumPy oracle: the proof that the legacy format and the
RoPE permutation are right.

Each run writes the model with the suite's writer, runs run.c at temperature 0 on a prompt (a
different random prefix each time, forced through), and compares every generated token with the
oracle's argmax after the same tokens (teacher-forced on run.c's choices). Where the oracle's
top-two margin is within the float32 tolerance, either token is accepted and the tie is counted.
Weights are scaled up from GPT-2's 0.02 so that attention, and with it RoPE, decides the argmax
(at 0.02 a model without the q/k permutation gives the same greedy tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from verifier.analysis import tolerance
from verifier.formats.llama2c import to_rotate_half
from verifier.model.config import ModelConfig
from verifier.model.presets import preset
from verifier.model.weights import Weights, init_weights
from verifier.plugin.adapters.llama2c import build_pinned
from verifier.reference import NumpyModel

pytestmark = pytest.mark.needs_cc

STORIES15M = preset("llama2c-stories15M")
STORIES260K_MHA = preset("llama2c-stories260K").replace(n_kv_heads=8)  # run.c at fd68dd2 has no GQA
N_NEW = 3


@dataclass
class Tally:
    """What a batch of runs compared: continuations, tokens, and accepted near-ties."""

    runs: int = 0
    tokens: int = 0
    near_ties: int = 0
    mismatches: list[str] = field(default_factory=list)


def compare(oracle: NumpyModel, prompt: np.ndarray, generated: np.ndarray, tally: Tally) -> None:
    """Check run.c's tokens against the oracle's argmax after the same prefix, one by one."""
    tally.runs += 1
    logits, cache = oracle.decode(prompt)
    for step, token in enumerate(generated.tolist()):
        last = logits[-1]
        top2 = np.argsort(last)[-2:][::-1]
        margin = last[top2[0]] - last[top2[1]]
        tally.tokens += 1
        if token != top2[0]:
            if token == top2[1] and margin <= tolerance.bound(last):
                tally.near_ties += 1
            else:
                tally.mismatches.append(
                    f"prompt {prompt.tolist()}: step {step}: run.c chose {token}, the oracle {int(top2[0])} "
                    f"(margin {margin:.3g}, tolerance {tolerance.bound(last):.3g})"
                )
                return
        logits, cache = oracle.decode(np.array([token]), cache)


def prompts(config: ModelConfig, count: int, seed: int) -> list[np.ndarray]:
    """Random prompts of 1..8 ids; most start with BOS (1) as llama2.c's do, the last few do not."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        prompt = rng.integers(0, config.vocab_size, size=int(rng.integers(1, 9)))
        if i < count - 3:
            prompt[0] = 1
        out.append(prompt)
    return out


def run_and_compare(run_c: Path, config: ModelConfig, weights: Weights, oracle_weights: Weights, count: int) -> Tally:
    program = build_pinned(config, weights)
    oracle = NumpyModel(config, oracle_weights, np.float64)
    tally = Tally()
    for prompt in prompts(config, count, seed=count):
        compare(oracle, prompt, program.greedy(prompt, N_NEW), tally)
    return tally


CASES = {
    "stories15M": (STORIES15M, 0.1),
    "stories260K-mha": (STORIES260K_MHA, 0.2),
}


@pytest.mark.parametrize(
    ("case", "count"),
    [
        ("stories260K-mha", 60),
        ("stories15M", 5),
        pytest.param("stories15M", 60, marks=pytest.mark.slow),
    ],
)
def test_run_c_greedy_tokens_equal_the_oracle(run_c: Path, case: str, count: int) -> None:
    config, scale = CASES[case]
    weights = init_weights(config, seed=7, scale=scale)
    tally = run_and_compare(run_c, config, weights, weights, count)
    print(f"{case}: {tally.runs} continuations, {tally.tokens} tokens, {tally.near_ties} accepted near-ties")
    assert not tally.mismatches, f"{len(tally.mismatches)} of {tally.runs} runs differ:\n" + "\n".join(
        tally.mismatches[:5]
    )
    assert tally.tokens == count * N_NEW


def test_a_checkpoint_without_the_qk_permutation_does_not_match(run_c: Path) -> None:
    """The same test with the writer's q/k permutation undone must fail: the test can fail."""
    config, scale = CASES["stories260K-mha"]
    weights = init_weights(config, seed=7, scale=scale)
    unpermuted = dict(weights)  # the writer's to_interleaved then leaves HF's rotate-half rows in the file
    for i in range(config.n_layers):
        for proj in ("q_proj", "k_proj"):
            name = f"model.layers.{i}.self_attn.{proj}.weight"
            unpermuted[name] = to_rotate_half(weights[name], config.n_heads)
    tally = run_and_compare(run_c, config, unpermuted, weights, 12)
    assert len(tally.mismatches) >= 6, f"only {len(tally.mismatches)} of 12 runs differ without the permutation"
