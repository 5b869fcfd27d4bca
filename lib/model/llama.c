/* The llama family: Llama 2, Llama 3.x, Mistral (and the llama2.c models).
 * Pre-norm blocks, RMSNorm, GQA attention with RoPE, SwiGLU FFN.
 *
 * GGUF Q/K rows are permuted relative to HF: llama.cpp's converter turns
 * HF's rotate-half RoPE layout into ggml's interleaved-pairs layout so its
 * "normal" RoPE mode applies (see XFORM_ROPE_PERMUTE). */
#include <math.h>

#include "model/contract.h"

void llama_contract(const model_config *c, tensor_contract *k)
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
