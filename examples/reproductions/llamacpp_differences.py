"""llama.cpp's differences from transformers, each on a tiny random transformers model written to GGUF
and run by llama-cpp-python as its users run a file: `python
examples/reproductions/llamacpp_differences.py [gelu-table|sliding-window|gemma2-query-scale|qwen2moe-topk]`.
The GGUF is written by lm-verifier's reader and writer, standing in for llama.cpp's
convert_hf_to_gguf.py (which is not on PyPI). Needs llama-cpp-python, torch, transformers and
lm-verifier. Each prints llama.cpp's distance from transformers on the model, and on the same weights
under the config llama.cpp computes instead; exits 1 if a difference is gone."""

import copy
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers as tf
from llama_cpp import Llama

from verifier.formats import load_checkpoint
from verifier.formats.gguf import write_gguf

T = 12
IDS = list(range(1, T + 1))
SIZES = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
         "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip
tf.logging.set_verbosity_error()
tf.utils.logging.disable_progress_bar()


def random_model(config: tf.PretrainedConfig) -> Any:
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():  # weights larger than the initializer's, so that each difference shows
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model


def transformers_logits(model: Any, config: tf.PretrainedConfig | None = None) -> np.ndarray:
    """`model`'s logits of IDS; with `config`, those of the same weights under that config."""
    if config is not None:
        other = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
        other.load_state_dict(model.state_dict())
        model = other
    with torch.no_grad():
        return model(torch.tensor([IDS])).logits[0].double().numpy()


def llamacpp_logits(model: Any) -> np.ndarray:
    directory = Path(tempfile.mkdtemp())
    model.save_pretrained(directory)
    checkpoint = load_checkpoint(directory)
    write_gguf(directory / "model.gguf", checkpoint.config, checkpoint.weights)  # F32 tensors
    # F32 KV cache (llama.cpp's default is F16), every position's logits.
    llm = Llama(str(directory / "model.gguf"), n_ctx=32, logits_all=True, type_k=0, type_v=0, verbose=False)
    llm.eval(IDS)
    return np.array(llm.scores[:T], dtype=np.float64)


def compare(name: str, model: Any, instead: np.ndarray) -> bool:
    """Print llama.cpp's distance from `model` and from `instead`; True if it computes `instead`."""
    got = llamacpp_logits(model)
    own, other = np.abs(got - transformers_logits(model)).max(), np.abs(got - instead).max()
    print(f"{name}: llama.cpp is {own:.3g} from transformers, {other:.2g} from what it computes instead")
    return other < own / 20


# --8<-- [start:gelu-table]
class Float16TableGelu(torch.nn.Module):
    """ggml's GELU: a table of float16 values, looked up at the float16 rounding of the input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x.half().float(), approximate="tanh").half().float()


def gelu_table() -> bool:
    """GPT-2's GELU (transformers' gelu_new, tanh's approximation, in float32)."""
    model = random_model(tf.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=4))
    tabulated = copy.deepcopy(model)
    tabulated.transformer.h[0].mlp.act = Float16TableGelu()
    return compare("GPT-2, GELU", model, transformers_logits(tabulated))


# --8<-- [end:gelu-table]


# --8<-- [start:sliding-window]
def sliding_window() -> bool:
    """Mistral with a window of 4 over 12 tokens: llama.cpp attends to every key."""
    model = random_model(tf.MistralConfig(**SIZES, sliding_window=4))
    instead = transformers_logits(model, tf.MistralConfig(**SIZES, sliding_window=None))
    return compare("Mistral, window 4", model, instead)


# --8<-- [end:sliding-window]


# --8<-- [start:gemma2-query-scale]
def gemma2_query_scale() -> bool:
    """Gemma 2 with query_pre_attn_scalar 32 and head_dim 8: llama.cpp scales queries by 1/sqrt(8)."""
    sizes = SIZES | {"head_dim": 8, "sliding_window": 64}
    model = random_model(tf.Gemma2Config(**sizes, query_pre_attn_scalar=32))
    instead = transformers_logits(model, tf.Gemma2Config(**sizes, query_pre_attn_scalar=8))
    return compare("Gemma 2, query_pre_attn_scalar 32", model, instead)


# --8<-- [end:gemma2-query-scale]


# --8<-- [start:qwen2moe-topk]
def qwen2moe_topk() -> bool:
    """Qwen2-MoE with norm_topk_prob: llama.cpp weights the 2 chosen experts without renormalising."""
    moe = SIZES | {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                   "shared_expert_intermediate_size": 32, "decoder_sparse_step": 1, "mlp_only_layers": []}  # fmt: skip
    model = random_model(tf.Qwen2MoeConfig(**moe, norm_topk_prob=True))
    instead = transformers_logits(model, tf.Qwen2MoeConfig(**moe, norm_topk_prob=False))
    return compare("Qwen2-MoE, norm_topk_prob true", model, instead)


# --8<-- [end:qwen2moe-topk]


CASES = {"gelu-table": gelu_table, "sliding-window": sliding_window, "gemma2-query-scale": gemma2_query_scale,
         "qwen2moe-topk": qwen2moe_topk}  # fmt: skip

if __name__ == "__main__":
    found = [CASES[name]() for name in sys.argv[1:] or CASES]
    sys.exit(0 if all(found) else 1)
