/* A Llama forward pass in plain C, written for lm-verifier as a program in another language.
 *
 * Reads a llama2.c version-1 file (float32, RoPE theta 10000, RMSNorm eps 1e-5) and a text file of
 * token ids, and prints the logits of every position: one line of vocab_size numbers per token.
 *
 *   gcc -O2 -o llama llama.c -lm
 *   ./llama model.bin tokens.txt
 *   verifier check --command "./llama {model} {tokens}" --format llama2c-v1 --gives logits-text
 *
 * Built with -DBUG_ATTEND_AHEAD it lets each position see the next one: a causality bug the suite
 * must catch. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
} Config;

static void die(const char *what) {
    fprintf(stderr, "llama: %s\n", what);
    exit(1);
}

static float *take(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += n;
    return p;
}

/* out[d_out] = w[d_out, d_in] @ x[d_in] */
static void matmul(float *out, const float *w, const float *x, int d_out, int d_in) {
    for (int i = 0; i < d_out; i++) {
        double sum = 0.0;
        for (int j = 0; j < d_in; j++) sum += (double)w[(size_t)i * d_in + j] * x[j];
        out[i] = (float)sum;
    }
}

static void rmsnorm(float *out, const float *x, const float *g, int n) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + 1e-5));
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * g[i];
}

/* Rotate the interleaved pairs (2i, 2i+1) of each head by pos * theta^(-2i/head_size). */
static void rope(float *v, int n_heads, int head_size, int pos) {
    for (int h = 0; h < n_heads; h++) {
        for (int i = 0; i < head_size; i += 2) {
            double angle = pos * pow(10000.0, -(double)i / head_size);
            float c = (float)cos(angle), s = (float)sin(angle);
            float *p = v + h * head_size + i;
            float a = p[0], b = p[1];
            p[0] = a * c - b * s;
            p[1] = a * s + b * c;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 3) die("usage: llama MODEL.bin TOKENS.txt");
    FILE *f = fopen(argv[1], "rb");
    if (!f) die("cannot open the model file");
    uint32_t magic;
    int32_t version, dims[7];
    uint8_t shared;
    if (fread(&magic, 4, 1, f) != 1 || fread(&version, 4, 1, f) != 1 || fread(dims, 4, 7, f) != 7 ||
        fread(&shared, 1, 1, f) != 1)
        die("the header is truncated");
    if (magic != 0x616b3432 || version != 1) die("not a llama2.c version-1 file");
    Config c = {dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6]};
    int head_size = c.dim / c.n_heads, kv_dim = c.n_kv_heads * head_size, L = c.n_layers;
    size_t floats = (size_t)L * (2 * c.dim + 2 * c.dim * c.dim + 2 * kv_dim * c.dim + 3 * c.dim * c.hidden_dim) +
                    c.dim + (size_t)c.vocab_size * c.dim * (shared ? 1 : 2);
    float *data = malloc(floats * sizeof(float));
    if (!data || fseek(f, 256, SEEK_SET) != 0 || fread(data, sizeof(float), floats, f) != floats)
        die("the weights are truncated");
    fclose(f);
    float *cur = data;
    float *rms_att = take(&cur, (size_t)L * c.dim), *rms_ffn = take(&cur, (size_t)L * c.dim);
    float *rms_final = take(&cur, c.dim), *emb = take(&cur, (size_t)c.vocab_size * c.dim);
    float *wq = take(&cur, (size_t)L * c.dim * c.dim), *wk = take(&cur, (size_t)L * kv_dim * c.dim);
    float *wv = take(&cur, (size_t)L * kv_dim * c.dim), *wo = take(&cur, (size_t)L * c.dim * c.dim);
    float *w1 = take(&cur, (size_t)L * c.hidden_dim * c.dim), *w2 = take(&cur, (size_t)L * c.dim * c.hidden_dim);
    float *w3 = take(&cur, (size_t)L * c.hidden_dim * c.dim);
    float *wcls = shared ? emb : take(&cur, (size_t)c.vocab_size * c.dim);

    FILE *tf = fopen(argv[2], "r");
    if (!tf) die("cannot open the tokens file");
    int T = 0, *tokens = malloc(sizeof(int) * (c.seq_len + 1));
    while (T <= c.seq_len && fscanf(tf, "%d", &tokens[T]) == 1) T++;
    fclose(tf);
    if (T < 1 || T > c.seq_len) die("expected 1 to seq_len token ids");
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= c.vocab_size) die("a token id is out of range");

    /* The whole sequence at once: x [T, dim], keys and values [T, kv_dim] per layer. */
    float *x = calloc((size_t)T * c.dim, sizeof(float)), *xb = malloc(sizeof(float) * c.dim);
    float *q = malloc(sizeof(float) * (size_t)T * c.dim), *k = malloc(sizeof(float) * (size_t)T * kv_dim);
    float *v = malloc(sizeof(float) * (size_t)T * kv_dim), *att = malloc(sizeof(float) * (size_t)T * c.dim);
    float *h1 = malloc(sizeof(float) * c.hidden_dim), *h3 = malloc(sizeof(float) * c.hidden_dim);
    float *tmp = malloc(sizeof(float) * c.dim), *scores = malloc(sizeof(float) * T);
    float *logits = malloc(sizeof(float) * c.vocab_size);
    for (int t = 0; t < T; t++) memcpy(x + (size_t)t * c.dim, emb + (size_t)tokens[t] * c.dim, sizeof(float) * c.dim);

    for (int l = 0; l < L; l++) {
        for (int t = 0; t < T; t++) {
            rmsnorm(xb, x + (size_t)t * c.dim, rms_att + (size_t)l * c.dim, c.dim);
            matmul(q + (size_t)t * c.dim, wq + (size_t)l * c.dim * c.dim, xb, c.dim, c.dim);
            matmul(k + (size_t)t * kv_dim, wk + (size_t)l * kv_dim * c.dim, xb, kv_dim, c.dim);
            matmul(v + (size_t)t * kv_dim, wv + (size_t)l * kv_dim * c.dim, xb, kv_dim, c.dim);
            rope(q + (size_t)t * c.dim, c.n_heads, head_size, t);
            rope(k + (size_t)t * kv_dim, c.n_kv_heads, head_size, t);
        }
        for (int t = 0; t < T; t++) {
            int last = t;
#ifdef BUG_ATTEND_AHEAD
            if (t + 1 < T) last = t + 1;
#endif
            for (int h = 0; h < c.n_heads; h++) {
                int kvh = h / (c.n_heads / c.n_kv_heads);
                const float *qh = q + (size_t)t * c.dim + h * head_size;
                float max = -INFINITY;
                for (int s = 0; s <= last; s++) {
                    const float *ks = k + (size_t)s * kv_dim + kvh * head_size;
                    double dot = 0.0;
                    for (int i = 0; i < head_size; i++) dot += (double)qh[i] * ks[i];
                    scores[s] = (float)(dot / sqrt((double)head_size));
                    if (scores[s] > max) max = scores[s];
                }
                double total = 0.0;
                for (int s = 0; s <= last; s++) total += scores[s] = expf(scores[s] - max);
                float *out = att + (size_t)t * c.dim + h * head_size;
                for (int i = 0; i < head_size; i++) {
                    double sum = 0.0;
                    for (int s = 0; s <= last; s++) sum += scores[s] / total * v[(size_t)s * kv_dim + kvh * head_size + i];
                    out[i] = (float)sum;
                }
            }
        }
        for (int t = 0; t < T; t++) {
            float *xt = x + (size_t)t * c.dim;
            matmul(tmp, wo + (size_t)l * c.dim * c.dim, att + (size_t)t * c.dim, c.dim, c.dim);
            for (int i = 0; i < c.dim; i++) xt[i] += tmp[i];
            rmsnorm(xb, xt, rms_ffn + (size_t)l * c.dim, c.dim);
            matmul(h1, w1 + (size_t)l * c.hidden_dim * c.dim, xb, c.hidden_dim, c.dim);
            matmul(h3, w3 + (size_t)l * c.hidden_dim * c.dim, xb, c.hidden_dim, c.dim);
            for (int i = 0; i < c.hidden_dim; i++) h1[i] = h1[i] / (1.0f + expf(-h1[i])) * h3[i];
            matmul(tmp, w2 + (size_t)l * c.dim * c.hidden_dim, h1, c.dim, c.hidden_dim);
            for (int i = 0; i < c.dim; i++) xt[i] += tmp[i];
        }
    }
    for (int t = 0; t < T; t++) {
        rmsnorm(xb, x + (size_t)t * c.dim, rms_final, c.dim);
        matmul(logits, wcls, xb, c.vocab_size, c.dim);
        for (int i = 0; i < c.vocab_size; i++) printf(i ? " %.9g" : "%.9g", logits[i]);
        printf("\n");
    }
    return 0;
}
