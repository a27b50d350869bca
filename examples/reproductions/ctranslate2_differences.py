"""CTranslate2's differences from transformers, each on a tiny random model converted by CTranslate2's
own converter: `python examples/reproductions/ctranslate2_differences.py [head-dim|sliding-window|gemma-switches]`.
Needs ctranslate2, torch and transformers only. Prints what it finds; exits 1 if a difference is gone."""

import sys
import tempfile
from pathlib import Path

import ctranslate2
import numpy as np
import torch
import transformers as tf
from ctranslate2.converters import TransformersConverter
from tokenizers import Tokenizer, models

V, T = 64, 12
IDS = list(range(1, T + 1))
tf.logging.set_verbosity_error()
tf.utils.logging.disable_progress_bar()
SIZES = {"vocab_size": V, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
         "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip


def both(config: tf.PretrainedConfig) -> tuple[np.ndarray, ctranslate2.Generator]:
    """transformers' logits of IDS and CTranslate2's generator, for one random model."""
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():  # weights larger than the initializer's, so that each switch moves the logits
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    source, target = Path(tempfile.mkdtemp()) / "hf", Path(tempfile.mkdtemp()) / "ct2"
    model.save_pretrained(source)
    names = [f"<t{i}>" for i in range(V - 1)] + ["<|endoftext|>"]  # the converter needs a tokenizer
    tokenizer = Tokenizer(models.WordLevel({n: i for i, n in enumerate(names)}, unk_token=names[0]))
    special = {"unk_token": names[0], "bos_token": names[1], "eos_token": names[-1]}
    tf.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special).save_pretrained(source)
    TransformersConverter(str(source)).convert(str(target), quantization="float32")
    with torch.no_grad():
        expected = model(torch.tensor([IDS])).logits[0].numpy()
    return expected, ctranslate2.Generator(str(target), device="cpu")


def rope(theta: float) -> dict:
    return {"rope_type": "default", "rope_theta": theta}


def logits(generator: ctranslate2.Generator) -> np.ndarray:
    return np.array(generator.forward_batch([IDS]))[0]


# --8<-- [start:head-dim]
def head_dim() -> bool:
    """A Llama whose head_dim (16) is not hidden_size / heads (8): forward_batch raises."""
    _, generator = both(tf.LlamaConfig(**SIZES, head_dim=16))
    try:
        logits(generator)
    except ValueError as e:
        print(f"Llama, head_dim 16: forward_batch raises ValueError: {e}")
        return True
    return False


# --8<-- [end:head-dim]


# --8<-- [start:sliding-window]
def sliding_window() -> bool:
    """A window of 4 over 12 tokens: Mistral's forward_batch raises; Qwen2 attends to every key."""
    _, mistral = both(tf.MistralConfig(**SIZES, sliding_window=4))
    try:
        logits(mistral)
        raised = False
    except ValueError as e:
        print(f"Mistral, window 4, 12 tokens: forward_batch raises ValueError: {e}")
        raised = True
    qwen2 = tf.Qwen2Config(**SIZES, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    expected, generator = both(qwen2)
    error = np.abs(logits(generator) - expected).max(axis=-1)
    full, _ = both(tf.Qwen2Config(**SIZES))  # the same weights (the same seed) without the window
    print(f"Qwen2, window 4: |CTranslate2 - transformers| per position {np.round(error, 4)}; "
          f"from full attention {np.abs(logits(generator) - full).max():.2g}")  # fmt: skip
    return raised and error[:4].max() < 1e-4 < error[4:].min()


# --8<-- [end:sliding-window]


# --8<-- [start:gemma-switches]
def gemma_switches() -> bool:
    """Gemma's RoPE theta and Gemma 2's soft-caps: CTranslate2 computes the model without them."""
    found = []
    for name, config, dropped in [
        ("Gemma, RoPE theta 1e6", tf.GemmaConfig(**SIZES, head_dim=8, rope_parameters=rope(1e6)),
         {"rope_parameters": rope(10000.0)}),
        ("Gemma 2, soft-caps 0.5", tf.Gemma2Config(**SIZES, head_dim=8, query_pre_attn_scalar=8,
         attn_logit_softcapping=0.5, final_logit_softcapping=0.5),
         {"attn_logit_softcapping": None, "final_logit_softcapping": None}),
    ]:  # fmt: skip
        expected, generator = both(config)
        without, _ = both(type(config)(**config.to_dict() | dropped))  # the same weights (the same seed)
        got = logits(generator)
        print(f"{name}: CTranslate2 is {np.abs(got - expected).max():.3g} from transformers, "
              f"{np.abs(got - without).max():.2g} from transformers with {dropped}")  # fmt: skip
        found.append(np.abs(got - without).max() < 1e-4 < np.abs(got - expected).max())
    return all(found)


# --8<-- [end:gemma-switches]


CASES = {"head-dim": head_dim, "sliding-window": sliding_window, "gemma-switches": gemma_switches}

if __name__ == "__main__":
    found = [CASES[name]() for name in sys.argv[1:] or CASES]
    sys.exit(0 if all(found) else 1)
