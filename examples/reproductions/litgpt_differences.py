"""litgpt's difference from its own full pass, on a tiny random Mistral (a sliding window of 4):
`python examples/reproductions/litgpt_differences.py`. Needs litgpt and torch only. Prints what it
finds; exits 1 if the difference is gone."""

import sys

import torch
from litgpt import Config
from litgpt.model import GPT


# --8<-- [start:ring-buffer-wrap]
def ring_buffer_wrap() -> bool:
    """Decoding 3 tokens, then a chunk of 4 that crosses the window's ring buffer (W = 4 slots)."""
    config = Config.from_name("Mistral-7B-v0.1", n_layer=1, n_embd=32, n_head=4, n_query_groups=2,
                              intermediate_size=64, vocab_size=64, padded_vocab_size=64, block_size=16,
                              sliding_window_size=4)  # fmt: skip
    torch.manual_seed(0)
    model = GPT(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
        ids = torch.arange(1, 8).reshape(1, 7)
        full = model(ids)[0]  # one pass, no cache
        model.set_kv_cache(batch_size=1, max_seq_length=16)
        model(ids[:, :3], input_pos=torch.arange(0, 3))
        chunk = model(ids[:, 3:], input_pos=torch.arange(3, 7))[0]
        model.set_kv_cache(batch_size=1, max_seq_length=16)
        one_by_one = torch.cat([model(ids[:, i : i + 1], input_pos=torch.arange(i, i + 1))[0] for i in range(7)])
    chunk_error = (chunk - full[3:]).abs().amax(dim=-1)
    single_error = (one_by_one - full).abs().max()
    print(
        f"litgpt Mistral, window 4: a chunk of positions 3-6 after 3 cached tokens is off the full pass by "
        f"{[round(float(e), 4) for e in chunk_error]} per position; one token at a time, {float(single_error):.2g}"
    )
    return float(chunk_error.max()) > 1e-3 > float(single_error)


# --8<-- [end:ring-buffer-wrap]


if __name__ == "__main__":
    sys.exit(0 if ring_buffer_wrap() else 1)
