"""llama.cpp's olmo2 against `transformers` in float64, as test_families.py measures the other families:
OLMo 2's layout (q/k norms over the whole projection, norms after the sublayers only) agrees, traced stage
by stage; what its architecture cannot hold is refused with the reason, each refusal measured here with
it lifted.

Measured with llama-cpp-python 0.3.36 (printed with -s): its olmo2 requires output.weight (no tied
classifier), has heads of d_model / n_heads (its attn_output is [n_embd, n_embd]) and reads no o bias; it
refuses each such file (`REFUSED`: its own reason for each).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'lm-verifier[gguf]')")
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'lm-verifier[llamacpp]')")

from tests import needs
from tests.formats.families import FAMILY_EXAMPLES as F
from tests.llamacpp.test_families import TOKENS, bound, hf_logits, run
from verifier.formats import gguf as gguf_format
from verifier.model.config import RopeScaling
from verifier.model.weights import init_weights
from verifier.plugin.adapters import llamacpp
from verifier.plugin.interface import Unsupported
from verifier.properties.oracle import Oracle

pytestmark = needs.transformers

OLMO2 = F["olmo2"]


@pytest.mark.parametrize(
    "config", [OLMO2, OLMO2.replace(rope_scaling=RopeScaling("linear", 4.0))], ids=["olmo2", "olmo2 linear"]
)
def test_llama_cpp_s_olmo2_agrees_with_transformers(config) -> None:  # type: ignore[no-untyped-def]
    weights, model = run(config)
    expected = hf_logits(config, weights)
    got = model.logits(TOKENS)
    print(f"llama.cpp olmo2: max |error| {np.abs(got - expected).max():.3g} (bound {bound(expected):.3g})")
    assert np.abs(got - expected).max() <= bound(expected)
    first, cache = model.decode(TOKENS[:60])
    rest, _ = model.decode(TOKENS[60:], cache)
    assert np.abs(np.concatenate([first, rest]) - expected).max() <= bound(expected)
    oracle = Oracle(config, weights)
    assert oracle.logits(TOKENS).compare(got).ok
    trace = model.trace(TOKENS)
    assert {"layers.0.q_norm", "layers.0.attn_post_norm", "layers.1.resid_mlp"} <= set(trace)
    divergence = oracle.localize(trace, TOKENS)
    assert divergence.first is None, divergence.describe()


# Per case: the config, the suite's reason, and llama.cpp's own when the refusal is lifted.
REFUSED = {
    "tied": (OLMO2.replace(tie_embeddings=True), "requires output.weight", "tensor 'output.weight' not found"),
    "head_dim": (OLMO2.replace(head_dim=32), "head_dim = d_model / n_heads", "'blk.0.attn_q.weight' has wrong shape"),
    "biases": (
        OLMO2.replace(qkv_bias=True, o_bias=True),
        "does not load every q/k/v/o bias",
        "wrong number of tensors; expected 33, got 31",
    ),  # its two o_proj biases unread
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_llama_cpp_s_olmo2_cannot_hold_is_unsupported_with_the_reason(name: str) -> None:
    config, reason, _ = REFUSED[name]
    with pytest.raises(Unsupported, match=reason):
        llamacpp.build(config, init_weights(config))


@pytest.mark.parametrize("name", list(REFUSED))
def test_without_the_refusal_llama_cpp_itself_refuses_the_olmo2_file(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gguf_format, "unsupported", lambda config: None)
    config, _, its_own = REFUSED[name]
    with pytest.raises(RuntimeError, match=re.escape(its_own)):
        llamacpp.build(config, init_weights(config)).logits(TOKENS)
