/* The llama family: Llama 2, Llama 3.x, Mistral (and the llama2.c models).
 * Pre-norm blocks, RMSNorm, GQA attention with RoPE, SwiGLU FFN: the
 * shared decoder (llama_forward, which qwen2 and qwen3 use too) with
 * nothing added.
 *
 * GGUF Q/K rows are permuted relative to HF: llama.cpp's converter turns
 * HF's rotate-half RoPE layout into ggml's interleaved-pairs layout so its
 * "normal" RoPE mode applies (see XFORM_ROPE_PERMUTE).
 *
 * llama3 rope scaling: llama.cpp writes no rope.scaling keys for it (an
 * unknown rope.scaling.type would make llama.cpp refuse the file) and
 * instead stores the computed per-frequency factors as the tensor
 * rope_freqs.weight. We write the memra.rope.scaling.* keys so the config
 * round-trips exactly, and the convert tool also writes rope_freqs.weight
 * (llama_rope_freqs) so llama.cpp scales the same way; the contract lists it
 * as optional and generated. Reading a llama.cpp file that has the tensor
 * but no memra keys, we recover the parameters from the tensor: factor is
 * its largest value, low/high_freq_factor follow from two interpolated
 * entries (smooth is linear in 1/wavelength), original_context_length is
 * 8192 (what llama.cpp's converter always uses), and the factors are then
 * recomputed and must match the tensor. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json.h"
#include "model/family.h"

/* ---- config ---- */

static const family_hf_type llama_hf_types[] = {
    /* LlamaConfig */
    {.model_type = "llama", .architecture = "LlamaForCausalLM", .n_ctx = 2048,
     .rope_theta = 10000.0, .bos = 1, .eos = 2, .attention_bias_key = 1},
    /* MistralConfig: 8 KV heads, 4096*32 positions, a 4096-token window on
     * every layer, no attention_bias key */
    {.model_type = "mistral", .architecture = "MistralForCausalLM", .n_kv_heads = 8,
     .n_ctx = 131072, .rope_theta = 10000.0, .bos = 1, .eos = 2, .sliding_window = 4096},
};

static int is_mistral(const family_hf_type *t)
{
    return strcmp(t->model_type, "mistral") == 0;
}

static int llama_hf_read(const json_t *obj, const family_hf_type *t, const char *what,
                         model_config *c, memra_err *err)
{
    if (!is_mistral(t) && config_hf_refuse_true(obj, "mlp_bias", what, err))
        return -1;
    if (is_mistral(t) && config_hf_sliding_window(obj, t->sliding_window, what, c, err))
        return -1;
    return 0;
}

static void llama_hf_write(const model_config *c, const family_hf_type *t, json_t *o)
{
    if (is_mistral(t))
        json_object_set_new(o, "sliding_window",
                            c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
}

static double round_sig5(double v)
{
    char buf[48];
    snprintf(buf, sizeof buf, "%.5g", v);
    return strtod(buf, NULL);
}

/* Recover llama3 rope scaling from llama.cpp's rope_freqs.weight (see the
 * comment at the top of the file). */
static int llama3_from_rope_freqs(const cfg_gguf *g, const gguf_tensor *t, model_config *c,
                                  memra_err *err)
{
    int64_t half = c->head_dim / 2;
    if (t->type != DT_F32 || t->n_dims != 1 || t->ne[0] != half)
        return memra_fail(err, "%s: tensor rope_freqs.weight must be F32 [%" PRId64 "]", g->what,
                          half);
    const uint8_t *p = t->data;
    double max = 0;
    for (int64_t i = 0; i < half; i++) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        if (!isfinite(v) || v < 1.0f)
            return memra_fail(err, "%s: rope_freqs.weight[%" PRId64 "] = %g is not a llama3 "
                              "rope factor", g->what, i, (double)v);
        if (v > max)
            max = v;
    }
    c->rope_scaling.kind = ROPE_SCALING_LLAMA3;
    c->rope_scaling.factor = config_f32_shortest(max);
    c->rope_scaling.original_ctx = 8192;
    c->rope_scaling.low_freq_factor = 1.0;
    c->rope_scaling.high_freq_factor = 4.0;
    /* For an interpolated entry, 1/f_i = (1-s)/factor + s gives
     * s_i = (1/f_i - 1/factor) / (1 - 1/factor), and s = (x - lo) / (hi - lo)
     * with x = original_ctx / wavelength: two such entries give lo and hi. */
    double xs[2], ss[2];
    int found = 0;
    for (int64_t i = 0; i < half && found < 2 && max > 1.0; i++) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        if (v <= 1.0f + 1e-6f || v >= (float)max * (1.0f - 1e-6f))
            continue;
        double freq = 1.0 / pow(c->rope_theta, (double)(2 * i) / (double)c->head_dim);
        xs[found] = 8192.0 * freq / (2.0 * M_PI);
        ss[found] = (1.0 / v - 1.0 / max) / (1.0 - 1.0 / max);
        found++;
    }
    if (found == 2 && fabs(xs[1] - xs[0]) > 1e-12 && fabs(ss[1] - ss[0]) > 1e-9) {
        double a = (ss[1] - ss[0]) / (xs[1] - xs[0]); /* 1 / (hi - lo) */
        double lo = xs[0] - ss[0] / a;
        /* The fit through f32 factors is good to ~1e-7; configs use short
         * decimals (1, 4, 0.5), so keep 5 significant digits. */
        c->rope_scaling.low_freq_factor = round_sig5(lo);
        c->rope_scaling.high_freq_factor = round_sig5(lo + 1.0 / a);
    }
    if (!(c->rope_scaling.low_freq_factor > 0 &&
          c->rope_scaling.low_freq_factor < c->rope_scaling.high_freq_factor))
        goto mismatch;
    float *want = xmalloc((size_t)half * sizeof *want);
    llama_rope_freqs(c, want);
    int ok = 1;
    for (int64_t i = 0; i < half && ok; i++) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        ok = fabsf(v - want[i]) <= 1e-4f * want[i];
    }
    free(want);
    if (ok)
        return 0;
mismatch:
    return memra_fail(err, "%s: tensor rope_freqs.weight does not hold llama3 rope factors "
                      "(no memra.rope.scaling keys to say otherwise)", g->what);
}

/* A llama.cpp file without rope scaling keys may still carry llama3
 * scaling as rope_freqs.weight. */
static int llama_gguf_read(const cfg_gguf *g, model_config *c, memra_err *err)
{
    const gguf_tensor *rf = gguf_find_tensor(g->f, "rope_freqs.weight");
    if (c->rope_scaling.kind != ROPE_SCALING_NONE || !rf)
        return 0;
    if (c->head_dim <= 0 || c->head_dim > CONFIG_MAX_SIZE)
        return memra_fail(err, "%s: head size %" PRId64 " is out of range", g->what,
                          c->head_dim);
    if (config_finite_pos(g->what, "rope.freq_base", c->rope_theta, err))
        return -1;
    return llama3_from_rope_freqs(g, rf, c, err);
}

/* ---- tensors ---- */

static const family_tensor_name llama_tensor_names[] = {
    {"rope_freqs.weight", NULL, 1, 0},
    {"ffn_norm.weight", "post_attention_layernorm.weight", 0, 0},
    {"ffn_gate.weight", "mlp.gate_proj.weight", 0, 0},
    {"ffn_up.weight", "mlp.up_proj.weight", 0, 0},
    {"ffn_down.weight", "mlp.down_proj.weight", 0, 0},
};

static void llama_contract(const model_config *c, tensor_contract *k)
{
    int64_t q_rows = c->n_heads * c->head_dim, kv_rows = c->n_kv_heads * c->head_dim;
    int hq = (int)c->n_heads, hkv = (int)c->n_kv_heads;
    contract_add_globals(k, c, 0);
    /* llama.cpp stores llama3 rope scaling as computed factors; we can
     * regenerate them from the config, so a file may or may not carry them. */
    if (c->rope_scaling.kind == ROPE_SCALING_LLAMA3)
        contract_add_1d(k, ROLE_ROPE_FREQS, -1, "rope_freqs.weight", c->head_dim / 2,
                        CE_OPTIONAL | CE_GENERATED, 0);
    for (int l = 0; l < c->n_layers; l++) {
        contract_add_1d(k, ROLE_ATTN_NORM, l, "attn_norm.weight", c->dim, 0, 0);
        contract_add_2d(k, ROLE_ATTN_Q, l, "attn_q.weight", q_rows, c->dim, CE_ROPE_PERMUTE, hq);
        contract_add_2d(k, ROLE_ATTN_K, l, "attn_k.weight", kv_rows, c->dim, CE_ROPE_PERMUTE, hkv);
        contract_add_2d(k, ROLE_ATTN_V, l, "attn_v.weight", kv_rows, c->dim, 0, 0);
        contract_add_2d(k, ROLE_ATTN_O, l, "attn_output.weight", c->dim, q_rows, 0, 0);
        if (c->attn_bias) { /* LlamaConfig.attention_bias: q, k, v and o */
            contract_add_1d(k, ROLE_ATTN_Q_BIAS, l, "attn_q.bias", q_rows, CE_ROPE_PERMUTE, hq);
            contract_add_1d(k, ROLE_ATTN_K_BIAS, l, "attn_k.bias", kv_rows, CE_ROPE_PERMUTE, hkv);
            contract_add_1d(k, ROLE_ATTN_V_BIAS, l, "attn_v.bias", kv_rows, 0, 0);
            contract_add_1d(k, ROLE_ATTN_O_BIAS, l, "attn_output.bias", c->dim, 0, 0);
        }
        contract_add_1d(k, ROLE_FFN_NORM, l, "ffn_norm.weight", c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_GATE, l, "ffn_gate.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_UP, l, "ffn_up.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_DOWN, l, "ffn_down.weight", c->dim, c->ffn_dim, 0, 0);
    }
}

/* The factors of llama.cpp's rope_freqs.weight (convert_hf_to_gguf.py,
 * LlamaModel): frequency i = theta^(-2i/head_dim) with wavelength
 * 2*pi/freq; wavelengths shorter than original_ctx/high_freq_factor keep
 * factor 1, longer than original_ctx/low_freq_factor get `factor`, and the
 * band between is interpolated. ggml divides each frequency by its factor,
 * which is what transformers' llama3 inv_freq computes directly. */
void llama_rope_freqs(const model_config *c, float *out)
{
    int64_t half = c->head_dim / 2;
    double factor = c->rope_scaling.factor, lo = c->rope_scaling.low_freq_factor;
    double hi = c->rope_scaling.high_freq_factor, orig = (double)c->rope_scaling.original_ctx;
    double low_wavelen = orig / lo, high_wavelen = orig / hi;
    for (int64_t i = 0; i < half; i++) {
        double freq = 1.0 / pow(c->rope_theta, (double)(2 * i) / (double)c->head_dim);
        double wavelen = 2.0 * M_PI / freq;
        double f;
        if (wavelen < high_wavelen) {
            f = 1.0;
        } else if (wavelen > low_wavelen) {
            f = factor;
        } else {
            double smooth = (orig / wavelen - lo) / (hi - lo);
            f = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        out[i] = (float)f;
    }
}

/* A GGUF carries rope_freqs.weight for llama3 rope scaling only. */
static int llama_gguf_rope_freqs(const model_config *c, float *out)
{
    if (c->rope_scaling.kind != ROPE_SCALING_LLAMA3)
        return 0;
    if (out)
        llama_rope_freqs(c, out);
    return 1;
}

/* ---- forward ---- */

/* The shared decoder layers, as transformers' LlamaDecoderLayer /
 * Qwen2DecoderLayer / Qwen3DecoderLayer (qwen2 and qwen3 differ only inside
 * the attention sublayer: model_attention applies the QKV bias when the
 * checkpoint has one, and the per-head QK-norm when it has q_norm / k_norm):
 *
 *   x = embed(tokens)
 *   per layer:  x += attn(rmsnorm(x))
 *               x += down(silu(gate(h)) * up(h)),  h = rmsnorm(x) */
void llama_forward(model *m, const bk_batch *rows, const int32_t *tokens)
{
    const backend_ops *op = m->bk->ops;
    run_state *s = &m->state;
    int n = rows->n;
    size_t nd = (size_t)n * (size_t)m->config.dim;
    if (m->layer_begin == 0)
        op->embed(m->bk, &m->weights.embed, tokens, n, m->embed_scale, s->x);
    for (int l = m->layer_begin; l < m->layer_end; l++) {
        const layer_weights *w = &m->weights.layers[l];
        model_report_hidden(m, l, rows, s->x);
        op->rmsnorm(m->bk, s->x, n, &w->attn_norm, m->norm_offset, m->norm_eps, s->xb);
        model_attention(m, l, rows, s->xb, s->xb2);
        op->add(m->bk, s->x, s->xb2, nd);
        op->rmsnorm(m->bk, s->x, n, &w->ffn_norm, m->norm_offset, m->norm_eps, s->xb);
        model_ffn(m, l, n, s->xb, s->xb2);
        op->add(m->bk, s->x, s->xb2, nd);
    }
}

const model_family_desc family_llama = {
    .id = FAMILY_LLAMA,
    .name = "llama",
    .gguf_arch = "llama",
    .hf_types = llama_hf_types,
    .n_hf_types = MEMRA_ARRAY_LEN(llama_hf_types),
    .hf_act_key = "hidden_act",
    .hf_act = "silu",
    .hf_read = llama_hf_read,
    .hf_write = llama_hf_write,
    .gguf_read = llama_gguf_read,
    .contract = llama_contract,
    .tensor_names = llama_tensor_names,
    .n_tensor_names = MEMRA_ARRAY_LEN(llama_tensor_names),
    .forward = llama_forward,
    .act = BK_ACT_SILU,
    .tensor_parallel = 1,
    .gguf_rope_permuted = 1,
    .gguf_rope_freqs = llama_gguf_rope_freqs,
};
