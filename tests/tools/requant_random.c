/* requant_random: a copy of a GGUF model whose matrices are random valid
 * blocks of a quant type, for speed measurements of quantized decode
 * (memra-bench) where only the bytes' layout and size matter. Vectors
 * (norms, biases) are copied. MIX q4_k_m follows llama.cpp's Q4_K_M
 * choice of types: Q6_K for the output head and for attn_v / ffn_down in
 * the first and last eighth of the layers and every third layer between,
 * Q4_K elsewhere.
 *
 *   requant_random SRC.gguf DST.gguf q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m [SEED]
 *
 * Scales are small (about 1e-3), so activations stay finite through a
 * deep model. Not a quantizer: the values have nothing to do with SRC's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "format/gguf.h"
#include "numerics/half.h"

static uint64_t rng_s;

static uint64_t next(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}

static void put16(uint8_t *p, float v)
{
    uint16_t h = f32_to_fp16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Random bytes, then valid f16 scales where the type keeps them. */
static void fill(dtype t, uint8_t *p, uint64_t nbytes)
{
    for (uint64_t i = 0; i + 8 <= nbytes; i += 8) {
        uint64_t v = next();
        memcpy(p + i, &v, 8);
    }
    for (uint64_t i = nbytes & ~(uint64_t)7; i < nbytes; i++)
        p[i] = (uint8_t)next();
    const dtype_info *ti = dtype_get(t);
    for (uint64_t b = 0; b < nbytes / (uint64_t)ti->type_size; b++) {
        uint8_t *blk = p + b * ti->type_size;
        float s = 5e-4f + 1e-3f * (float)(next() % 1000) / 1000.0f;
        switch (t) {
        case DT_Q8_0: case DT_Q4_0: put16(blk, s); break;
        case DT_Q4_K: case DT_Q5_K: put16(blk, s); put16(blk + 2, s * 0.5f); break;
        case DT_Q6_K: put16(blk + 208, s); break;
        default: break;
        }
    }
}

static int layer_of(const char *name)
{
    return strncmp(name, "blk.", 4) == 0 ? atoi(name + 4) : -1;
}

/* llama.cpp's "more bits" layers of Q4_K_M. */
static int more_bits(int l, int n)
{
    return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: requant_random SRC.gguf DST.gguf "
                        "q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m [SEED]\n");
        return 2;
    }
    static const struct {
        const char *name;
        dtype t;
    } types[] = {{"q8_0", DT_Q8_0}, {"q4_0", DT_Q4_0}, {"q4_k", DT_Q4_K},
                 {"q5_k", DT_Q5_K}, {"q6_k", DT_Q6_K}, {"q4_k_m", DT_Q4_K}};
    int ti = -1;
    for (int i = 0; i < (int)(sizeof types / sizeof types[0]); i++)
        if (strcmp(argv[3], types[i].name) == 0)
            ti = i;
    if (ti < 0) {
        fprintf(stderr, "requant_random: unknown type '%s'\n", argv[3]);
        return 2;
    }
    int mix = strcmp(argv[3], "q4_k_m") == 0;
    rng_s = 0x9E3779B97F4A7C15ull ^ (argc == 5 ? strtoull(argv[4], NULL, 10) : 1);
    memra_err err = {{0}};
    gguf_file g;
    if (gguf_open(argv[1], &g, &err) != 0) {
        fprintf(stderr, "requant_random: %s\n", err.msg);
        return 1;
    }
    int n_layers = 0;
    for (uint64_t i = 0; i < g.n_tensors; i++)
        if (layer_of(g.tensors[i].name) + 1 > n_layers)
            n_layers = layer_of(g.tensors[i].name) + 1;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kv(w, &g);
    gguf_writer_set_u32(w, "general.file_type", mix ? 15 : 0); /* 15: llama.cpp's Q4_K_M */
    uint8_t **bufs = calloc(g.n_tensors, sizeof *bufs);
    int rc = 0;
    for (uint64_t i = 0; i < g.n_tensors && rc == 0; i++) {
        const gguf_tensor *t = &g.tensors[i];
        dtype to = types[ti].t;
        if (mix) {
            int l = layer_of(t->name);
            if (strcmp(t->name, "output.weight") == 0 ||
                ((strstr(t->name, "attn_v") || strstr(t->name, "ffn_down")) && l >= 0 &&
                 more_bits(l, n_layers)))
                to = DT_Q6_K;
        }
        int64_t rb = t->n_dims == 2 ? dtype_row_bytes(to, t->ne[0]) : -1;
        if (rb < 0) { /* vectors, and widths that are no whole blocks */
            rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                        t->nbytes, &err);
            continue;
        }
        uint64_t nb = (uint64_t)rb * (uint64_t)t->ne[1];
        bufs[i] = malloc(nb);
        if (!bufs[i]) {
            fprintf(stderr, "requant_random: out of memory for %s\n", t->name);
            return 1;
        }
        fill(to, bufs[i], nb);
        rc = gguf_writer_add_tensor(w, t->name, to, 2, t->ne, bufs[i], nb, &err);
    }
    if (rc == 0)
        rc = gguf_writer_write(w, argv[2], &err);
    if (rc != 0)
        fprintf(stderr, "requant_random: %s\n", err.msg);
    gguf_writer_free(w);
    for (uint64_t i = 0; i < g.n_tensors; i++)
        free(bufs[i]);
    free(bufs);
    gguf_close(&g);
    return rc != 0;
}
