"""An inventory of the five articles' checkable claims, made by reading them line by line before
comparing with the audit (issue 15), kept so that a claim dropped from the audit, or a place
dropped from a claim, fails a test (tests/test_audit.py).

Each entry: an id, a few words saying what is claimed (not a quotation), and the lines that make the
claim, by article label (`verifier.analysis.audit.articles`): "en 18,20; zh 19,21". A line can serve
several entries; several entries can be one audit row.

Lines with no checkable claim, left out on purpose: titles and headings; opinions ("GPT-2 is the best
model for breakdowns", "each group represents the different semantic", the figure from "Attention is
all you need" "captures the essence"); the images (the attention equation, GPT-2's sizes, the
appendix's parameter tables: their content is not in the text); research remarks (MLA, NSA);
footnotes and equation numbers.
"""

from __future__ import annotations

INVENTORY: tuple[tuple[str, str, str], ...] = (
    ("G1", "token ids [464,3361,295,2238,318]", "en 18,20; zh 19,21; vg 11,12; vg.md 34,36"),
    ("G2", "sentence is 5 tokens / length 5 / [1,5]", "en 14,22; zh 15,23; vg 13; vg.md 38"),
    ("G3", "vocabulary 50,000", "en 26; zh 27"),
    ("G4", "embedding table [50,000, 768]", "en 28,107,112,116; zh 29,105,110,114; vg 14,36; vg.md 40,83"),
    ("G5", "each token -> 768-dim vector", "en 26; zh 27"),
    (
        "G6",
        "embedding values 0.316...",
        "en 31,32,33,34,35; zh 32,33,34,35,36; vg 15,16,17,18,19; vg.md 41,42,43,44,45",
    ),
    ("G7", "lookup gives [5,768]", "en 37,130; zh 38,127; vg 20; vg.md 47"),
    ("G8", "12 heads", "en 41; zh 42,140"),
    ("G9", "12*64=768, d_head 64", "en 44; zh 44; vg 38; vg.md 87"),
    ("G10", "[5,768]==[5,12,64]==[5,64]*12 (head split)", "en 46; zh 46"),
    ("G11", "Q,K,V each [768,768]", "en 48,52; zh 48,52"),
    ("G12", "per head [768, 64]; [768, 64] * 12", "en 54; zh 54; vg 23; vg.md 55"),
    ("G13", "one head [T,768]x[768,64]=[T,64]", "en 56; zh 56; vg 24; vg.md 57"),
    ("G14", "12 heads concat -> [T,768]", "en 58; zh 58; vg 25,26; vg.md 59,61"),
    ("G15", "K,V = [5,768]", "en 60,62,64,131; zh 60,62,64,128; vg 27; vg.md 63"),
    ("G16", "K^T=[768,T], QK^T=[T,T] (one full-width head)", "en 72,74; zh 72,74; vg 28,29; vg.md 65,67"),
    ("G17", "softmax(QK^T/sqrt d)=[T,T]", "en 76; zh 76; vg 30; vg.md 69"),
    ("G18", "softmax(...)V = [T,768]", "en 78,132; zh 78,129; vg 31; vg.md 71"),
    ("G19", "output projection [768,768], keeps [5,768]", "en 80,82,84; zh 80,82,84"),
    ("G20", "MLP [768 x 3072] then [3072 x 768]; expands 4x", "en 90; zh 90; vg 32; vg.md 73"),
    ("G21", "[T,768]->[T,3072]->[T,768]", "en 92; zh 92; vg 33; vg.md 75"),
    ("G22", "12 layers, shape stays [5,768]", "en 96,98,100,134; zh 96,97,99,131,142; vg 38; vg.md 87"),
    ("G23", "extract the last row [768] -> next token (unpadded)", "en 105,135; zh 103; vg 35; vg.md 81"),
    ("G24", "map back with the (tied) embedding table", "en 107,135; zh 105,132; vg 36; vg.md 83"),
    ("G25", "predicts Paris", "en 107,136; zh 105,132; vg 36; vg.md 83"),
    ("G26", "formula = 124M (formula value 123,334,656)", "en 112,114; zh 110,112"),
    ("G27", "38.4M embedding term; 7.08M per layer", "en 114; zh 112"),
    ("G28", "formula terms: embedding, QKV, projection, MLP x 2, 12 layers", "en 116; zh 114"),
    ("G29", "KQV 63.5M", "en 120"),
    ("G30", "output projection 12.8M", "en 121"),
    ("G31", "MLP 9.6M", "en 122"),
    ("G32", "KQV 21.2M", "zh 118"),
    ("G33", "output projection 7.1M", "zh 119"),
    ("G34", "MLP 56.6M", "zh 120"),
    ("G35", "total ~124M", "en 137; zh 133"),
    ("G36", "generation pads (zeros) to 1024 -> [1024,768]", "en 139; zh 136; vg 21; vg.md 49"),
    ("G37", "last row of a padded input = the next token", "en 105,139; zh 103,136; vg 21,35; vg.md 49,81"),
    ("G38", "padding leaves the real positions unchanged (implied)", "en 139; zh 136; vg 21; vg.md 49"),
    ("G39", "[1024,...] attention shapes", "vg 24,25,26,27,28,29,30,31; vg.md 57,59,61,63,65,67,69,71"),
    ("G40", "d_model 768", "zh 138; vg 38; vg.md 87"),
    ("G41", "n_layers 12", "zh 142; vg 38; vg.md 87"),
    ("G42", "softmax over vocabulary to choose", "zh 132"),
    ("S1", "15M parameters", "ps 3"),
    ("S2", "6 layers", "ps 3,148,169"),
    ("S3", "vocab 32,000", "ps 14,165"),
    ("S4", "dim 288, table 32,000*288", "ps 14,167"),
    ("S5", "embedding = row i of table; first position 0", "ps 18"),
    ("S6", "RMSNorm weight 288", "ps 23,27"),
    ("S7", "RMS(e)=sqrt(sum e^2) (no mean, no eps)", "ps 29"),
    ("S8", "Wq,Wk,Wv 288*288", "ps 37,38,39,41,43"),
    ("S9", "q = W_q ê, k = W_k ê, v = W_v ê; q in R^288; same for multi-head", "ps 45,47,49,54"),
    ("S10", "6 heads = contiguous groups q0..q47 ... q240..q287", "ps 54,56"),
    ("S11", "RoPE applied to q and k (not v)", "ps 64"),
    ("S12", "fcr,fci tables 256*(288/6/2)", "ps 67,68,72"),
    ("S13", "RoPE tables are learned parameters", "ps 70,190,191"),
    ("S14", "heads share the same RoPE values; per-position", "ps 72"),
    ("S15", "24 values per head (fcr_0..fcr_23)", "ps 74"),
    ("S16", "RoPE pair rotation formula", "ps 80,87,92,97"),
    ("S17", "same rotation for k", "ps 101"),
    ("S18", "KV cache stores rotated k and plain v, at pos", "ps 105"),
    ("S19", "o = (q^T k) v; q.k is the attention value", "ps 121,127"),
    ("S20", "concat 6 heads -> 288", "ps 129"),
    ("S21", "o uses all previous 256 positions", "ps 130"),
    ("S22", "Wo 288*288, x=Wo o", "ps 134,136"),
    ("S23", "residual x + e (un-normalised input)", "ps 138"),
    ("S24", "RMSNorm then W1, W3", "ps 139,140,141"),
    ("S25", "x2 = x1 + x3", "ps 142"),
    ("S26", "W2 then residual", "ps 143,144"),
    ("S27", "final RMSNorm then classifier", "ps 148,150"),
    ("S28", "classifier shares embedding (stories15M)", "ps 153,192"),
    ("S29", "sharing saves params (9,216,000)", "ps 153"),
    ("S30", "logits W x in R^32000, softmax -> next token probs", "ps 155,156,158"),
    ("S31", "seq_len 256", "ps 166"),
    ("S32", "hidden_dim 768", "ps 168"),
    ("S33", "n_heads 6", "ps 170"),
    ("S34", "embedding 9,216,000", "ps 179"),
    ("S35", "rms att/ffn 1,728", "ps 180,185"),
    ("S36", "Wq/Wk/Wv/Wo 497,664", "ps 181,182,183,184"),
    ("S37", "W1/W2/W3 1,327,104", "ps 186,187,188"),
    ("S38", "rms_final 288", "ps 189"),
    ("S39", "freq_cis 6,144 each", "ps 190,191"),
    ("S40", "total 15,204,000", "ps 193"),
    ("S41", "embedding almost 60%", "ps 197"),
    ("S42", "30K-60K x 256-1024 -> 7.6M to 61M", "ps 199"),
)


def places(entry: tuple[str, str, str]) -> list[tuple[str, int]]:
    """(article label, line) of every place an entry names."""
    found = []
    for part in entry[2].split(";"):
        article, lines = part.split()
        found += [(article, int(n)) for n in lines.split(",")]
    return found
