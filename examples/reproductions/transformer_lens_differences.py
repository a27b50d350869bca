"""TransformerLens's difference from its own full pass, on a tiny random GPT-2 booted into a
`TransformerBridge` as its users boot a model they hold: `python
examples/reproductions/transformer_lens_differences.py`. Needs transformer-lens, torch and
transformers only. Prints what it finds; exits 1 if the difference is gone."""

import sys
from importlib.metadata import version

import torch
import transformers as tf
from tokenizers import Tokenizer, models
from transformer_lens.model_bridge import TransformerBridge


# --8<-- [start:empty-cache]
def empty_cache() -> bool:
    """Logits of 4 tokens after a KV cache of 3: the cache holds nothing, and the 4 are those of the chunk
    alone (from position 0), not those of one pass over all 7."""
    torch.manual_seed(0)
    hf_model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=4)).eval()
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(64)}, unk_token="t0"))  # no Hub download
    tokenizer = tf.PreTrainedTokenizerFast(tokenizer_object=words, eos_token="t2", pad_token="t0", unk_token="t0")
    bridge = TransformerBridge.boot_transformers("gpt2", hf_model=hf_model, tokenizer=tokenizer, device="cpu")
    ids = torch.arange(1, 8).reshape(1, 7)
    with torch.no_grad():
        full = bridge(ids, return_type="logits")[0]
        _, cache = bridge(ids[:, :3], return_type="logits_and_cache", use_cache=True)
        cached = cache.get_seq_length()
        after, _ = bridge(ids[:, 3:], return_type="logits_and_cache", use_cache=True, past_key_values=cache)
        alone = hf_model(ids[:, 3:]).logits[0]  # transformers on the chunk alone, as if nothing came before
    print(f"TransformerLens {version('transformer-lens')}, transformers {tf.__version__}: the cache "
          f"after 3 tokens holds {cached} positions; the next 4 are {float((after[0] - full[3:]).abs().max()):.3g} off "
          f"the full pass and {float((after[0] - alone).abs().max()):.2g} off the chunk run alone")  # fmt: skip
    return cached == 0 and float((after[0] - alone).abs().max()) < 1e-5 < float((after[0] - full[3:]).abs().max())


# --8<-- [end:empty-cache]


if __name__ == "__main__":
    sys.exit(0 if empty_cache() else 1)
