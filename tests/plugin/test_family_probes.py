"""The probes of every family: each kind's config turns on what its family adds, a factory that runs
only plain Llama refuses each of them (by its declaration or by `Unsupported`), and what a model
refuses is what its configs are not drawn from."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.adapters import llama2c_model
from tests.plugin import ignoring
from verifier.model.config import FAMILIES, ModelConfig, RopeScaling
from verifier.model.weights import Weights, init_weights
from verifier.plugin import registry
from verifier.plugin.adapters import llama2c
from verifier.plugin.contract import build_checked
from verifier.plugin.interface import LLAMA2C_PUBLISHED, Constraints, Unsupported, switches_on
from verifier.plugin.probes import PROBE_CONFIGS, PROBE_KINDS, probe, probe_config, probe_kind
from verifier.plugin.registry import ModelSpec
from verifier.properties import models, strategies
from verifier.properties.oracle import Oracle
from verifier.reference import NumpyModel


def test_every_family_has_a_probe_kind_of_its_name() -> None:
    assert {family for family, _, _ in PROBE_KINDS.values()} == set(FAMILIES)
    assert all(probe_kind(config) == kind for kind, config in PROBE_CONFIGS.items())


def test_each_probe_turns_on_what_its_family_adds() -> None:
    on = {kind: switches_on(config) for kind, config in PROBE_CONFIGS.items()}
    assert on == {
        "gpt2": (),
        "llama": (),
        "llama-gqa": (),
        "llama3": ("rope_scaling",),
        "mistral": ("sliding_window",),
        "qwen2": (),  # its q/k/v biases are the family's, fixed
        "qwen3": ("head_dim",),
        "gemma": ("head_dim",),
        "gemma2": ("head_dim", "sliding_window", "layer_types", "attn_softcap", "final_softcap", "query_scale"),
        "mixtral": (),  # its routed experts are the family's MLP, sizes not switches; its renormalisation fixed
        "qwen2_moe": ("d_expert", "d_shared_expert"),  # as Qwen1.5-MoE: no renormalisation
        "qwen3_moe": ("head_dim", "d_expert", "norm_topk"),  # as Qwen3-30B-A3B: renormalised, no shared expert
        "phi3": ("rotary_dim",),  # its fused q/k/v and gate/up are the family's, fixed
        "glm": ("qkv_bias", "rotary_dim"),  # its fused gate/up and interleaved pairs fixed; n_heads x d_head = d_model
        "smollm3": ("nope_layers",),  # four layers, the last without RoPE
        "olmo2": (),  # its q/k norms over the projection and its norms after the sublayers are the family's, fixed
    }
    c = PROBE_CONFIGS
    # Each switch where ignoring it changes the output: a window the probe's positions pass, a head_dim
    # that is not d_model / n_heads, RoPE scaling whose original context the positions pass.
    assert c["mistral"].sliding_window < c["mistral"].n_ctx
    assert c["llama3"].rope_scaling is not None and c["llama3"].rope_scaling.original_n_ctx < c["llama3"].n_ctx
    assert c["qwen2"].qkv_bias and c["qwen3"].qk_norm
    assert all(c[k].d_head * c[k].n_heads != c[k].d_model for k in ("qwen3", "gemma", "gemma2"))
    assert c["gemma"].norm_plus_one and c["gemma"].embed_scale and c["gemma"].mlp_act == "gelu_tanh"
    g2 = c["gemma2"]
    assert g2.sandwich_norm and [g2.window(i) for i in range(g2.n_layers)] == [g2.sliding_window, None]
    assert g2.sliding_window < g2.n_ctx and g2.query_scale != g2.d_head
    assert [c["smollm3"].rotates(i) for i in range(c["smollm3"].n_layers)] == [True, True, True, False]
    assert all(c[k].n_kv_heads < c[k].n_heads for k in ("llama-gqa", "llama3", "mistral", "qwen2", "qwen3", "gemma2"))
    # A router that chooses (top-2 of 4 experts); Qwen2-MoE's experts narrower than its dense d_ff.
    for k in ("mixtral", "qwen2_moe"):
        assert (c[k].n_experts, c[k].top_k) == (4, 2) and all(c[k].is_moe_layer(i) for i in range(c[k].n_layers))
    assert c["mixtral"].norm_topk and not c["qwen2_moe"].norm_topk and c["qwen2_moe"].expert_d_ff < c["qwen2_moe"].d_ff
    assert c["phi3"].fused_qkv and c["phi3"].fused_gate_up and c["glm"].fused_gate_up and not c["glm"].fused_qkv
    # Partial rotary, and GLM's interleaved pairs on a rotated part of two pairs (with one, (0, 1) is
    # both rotate-half's pair and the interleaved one: the convention would not show).
    assert c["phi3"].rotated_dims < c["phi3"].d_head and c["glm"].rotated_dims < c["glm"].d_head
    assert c["glm"].rope_pairs == "interleaved" and c["glm"].rotated_dims >= 4


def test_a_switch_is_on_only_where_it_changes_the_math() -> None:
    llama = PROBE_CONFIGS["llama"]
    assert switches_on(llama.replace(head_dim=llama.d_model // llama.n_heads)) == ()
    gemma2 = PROBE_CONFIGS["gemma2"]
    assert "query_scale" not in switches_on(gemma2.replace(query_scale=gemma2.d_head))
    every_layer = gemma2.replace(layer_types=("sliding_attention", "sliding_attention"))
    assert switches_on(every_layer)[:3] == ("head_dim", "sliding_window", "attn_softcap")
    phi3, qwen = PROBE_CONFIGS["phi3"], PROBE_CONFIGS["qwen2_moe"]
    assert switches_on(phi3.replace(rotary_dim=phi3.d_head)) == ()  # rotating the whole head is full rotary
    assert switches_on(qwen.replace(d_expert=qwen.d_ff, d_shared_expert=None)) == ()
    assert switches_on(qwen.replace(n_layers=2, dense_layers=(1,), norm_topk=True)) == (
        "d_expert",
        "norm_topk",
        "d_shared_expert",
        "dense_layers",
    )


def test_a_declaration_of_plain_llama_refuses_each_switch_by_name() -> None:
    config = PROBE_CONFIGS["llama3"]
    plain = Constraints(families=("llama",), switches=())
    assert plain.refusal(config) == f"declared switches [], not rope_scaling={config.rope_scaling!r}"
    assert Constraints(families=("llama",), switches=("rope_scaling",)).refusal(config) is None
    assert Constraints(families=("llama",)).refusal(config) is None  # no `switches`: every one
    biased = PROBE_CONFIGS["llama"].replace(qkv_bias=True, o_bias=True)
    assert plain.refusal(biased) == "declared switches [], not qkv_bias=True, o_bias=True"
    assert plain.describe() == "llama; no switches"
    assert Constraints(families=("gpt2",), switches=()).describe() == "gpt2"  # GPT-2 has no switch to leave out


def test_a_declaration_that_leaves_a_switch_out_is_probed_without_it() -> None:
    windowless = Constraints(families=("mistral",), switches=())
    config = probe_config("mistral", windowless)
    assert config is not None and config.sliding_window is None
    assert probe_config("llama3", LLAMA2C_PUBLISHED) is None  # its RoPE scaling is what makes the kind


PLAIN_LLAMA_REFUSALS = {
    "llama3": "rope_scaling",
    "mistral": "not the mistral family",
    "qwen2": "not the qwen2 family",
    "qwen3": "not the qwen3 family",
    "gemma": "not the gemma family",
    "gemma2": "not the gemma2 family",
    "mixtral": "not the mixtral family",
    "qwen2_moe": "not the qwen2_moe family",
    "phi3": "not the phi3 family",
    "glm": "not the glm family",
}


@pytest.mark.parametrize("kind", PLAIN_LLAMA_REFUSALS)
def test_the_llama2c_programs_refuse_every_switched_probe(kind: str) -> None:
    config = PROBE_CONFIGS[kind]
    for reason in (llama2c.current_unsupported_reason(config), llama2c.pinned_unsupported_reason(config)):
        assert reason is not None and PLAIN_LLAMA_REFUSALS[kind] in reason, reason
    with pytest.raises(Unsupported, match=PLAIN_LLAMA_REFUSALS[kind]):
        llama2c.build_v2_reader(config, {})


def test_the_llama2c_programs_run_the_llama3_probe_without_its_scaling() -> None:
    assert llama2c.current_unsupported_reason(PROBE_CONFIGS["llama3"].replace(rope_scaling=None)) is None


def test_llama2c_model_py_declares_and_refuses_the_switches() -> None:
    config = PROBE_CONFIGS["llama3"].replace(tie_embeddings=True)
    with pytest.raises(Unsupported, match="rope_scaling"):
        llama2c_model.build(config, {})


def plain_llama_only(config: ModelConfig, weights: Weights) -> Any:
    """The reference for Llama with no switch, refusing the rest by `Unsupported`; it declares nothing."""
    if config.family != "llama" or switches_on(config):
        raise Unsupported(f"plain Llama only, not {config.family} with {switches_on(config)}")
    return NumpyModel(config, weights)


def test_a_factory_that_refuses_the_switches_is_drawn_plain_llama_only() -> None:
    spec = ModelSpec("plain_llama_only", plain_llama_only, "test")
    probes = {p.kind: p for p in probe(spec)}
    assert {kind for kind, p in probes.items() if p.unsupported is None} == {"llama", "llama-gqa"}
    assert probes["llama3"].unsupported == "plain Llama only, not llama with ('rope_scaling',)"
    support = models.support(spec)
    (shape,) = support.constraints
    assert shape.families == ("llama",) and shape.grouped_query
    assert shape.switches == ("head_dim", "qkv_bias", "o_bias")  # Llama's free switches but its scaling
    assert shape.describe() == "llama; switches head_dim, qkv_bias, o_bias"
    scaled = PROBE_CONFIGS["llama-gqa"].replace(rope_scaling=RopeScaling("linear", 2.0))
    assert support.refusal(scaled) == "the probes: llama3: plain Llama only, not llama with ('rope_scaling',)"
    assert support.refusal(PROBE_CONFIGS["llama-gqa"]) is None
    why = support.why_not("qwen3", ("logits",))
    assert (
        why == "model 'plain_llama_only' runs no qwen3 config (qwen3: plain Llama only, not qwen3 with ('head_dim',))"
    )


@pytest.mark.parametrize("kind", PROBE_CONFIGS)
def test_a_port_that_ignores_the_switches_fails_the_oracle_on_each_switched_probe(kind: str) -> None:
    """Built as plain Llama, it agrees with the oracle (the float64 reference, as the suite judges) on
    the plain kinds and disagrees on every kind whose family adds something: the probes hide nothing."""
    config = PROBE_CONFIGS[kind]
    weights = init_weights(config, seed=5)
    tokens = np.random.default_rng(5).integers(0, config.vocab_size, (2, config.n_ctx))
    ported = build_checked(ModelSpec("ignoring", ignoring.build, "test"), config, weights).logits(tokens)
    found = Oracle(config, weights).logits(tokens).compare(ported)
    assert found.ok == (kind in ("gpt2", "llama", "llama-gqa")), found


@pytest.mark.parametrize(
    ("spec", "families", "switch", "expected"),
    [
        (
            "examples.fixed_gpt2:build",
            strategies.WINDOW_FAMILIES,
            "sliding_window",
            "runs no mistral/qwen2/qwen3/gemma2/mixtral/qwen2_moe/phi3/qwen3_moe/smollm3 config",
        ),
        ("examples.llama2c_style:build", strategies.SCALING_FAMILIES, "rope_scaling", "config with rope_scaling"),
        ("examples.llama2c_style:build", strategies.QK_NORM_FAMILIES, None, "runs no qwen3/qwen3_moe/olmo2 config"),
        ("numpy", strategies.WINDOW_FAMILIES, "sliding_window", None),
        ("numpy", strategies.SCALING_FAMILIES, "rope_scaling", None),
    ],
)
def test_a_property_about_other_families_or_a_switch_skips_with_the_reason(
    spec: str, families: tuple[str, ...], switch: str | None, expected: str | None
) -> None:
    """A GPT-2-only or plain-Llama model skips the window, RoPE-scaling and q/k-norm properties saying why
    (they ran to Hypothesis' Unsatisfiable before: every drawn config refused); the reference runs them."""
    reason = models.skip_reason(registry.load_spec(spec), ("logits",), families, switch=switch)  # type: ignore[arg-type]
    assert (reason is None) if expected is None else (expected in (reason or "")), reason


def plain_moe(config: ModelConfig, weights: Weights) -> Any:
    """The reference, declaring the MoE families in their plain form (no shared expert, experts of d_ff)."""
    return NumpyModel(config, weights)


plain_moe.constraints = Constraints(families=("mixtral", "qwen2_moe"), switches=())  # type: ignore[attr-defined]


def test_a_declaration_without_switches_still_has_a_moe_familys_experts() -> None:
    """n_experts and top_k are the sizes of a MoE family's MLP: a declaration of its plain form is probed
    with them (a Mixtral without experts is not a config) and a property about them runs."""
    declared = Constraints(families=("mixtral", "qwen2_moe"), switches=())
    mixtral, qwen = probe_config("mixtral", declared), probe_config("qwen2_moe", declared)
    assert mixtral is not None and (mixtral.n_experts, mixtral.top_k) == (4, 2)
    assert qwen is not None and (qwen.n_experts, qwen.top_k, qwen.d_shared_expert, qwen.d_expert) == (4, 2, None, None)
    assert declared.refusal(PROBE_CONFIGS["mixtral"]) is None
    assert declared.refusal(PROBE_CONFIGS["qwen2_moe"]) == ("declared switches [], not d_expert=12, d_shared_expert=8")
    support = models.support(ModelSpec("plain_moe", plain_moe, "test"))
    assert support.why_not("mixtral", ("logits",), switch="top_k") is None
    assert "runs no qwen2_moe config with d_shared_expert" in (
        support.why_not("qwen2_moe", ("logits",), switch="d_shared_expert") or ""
    )
