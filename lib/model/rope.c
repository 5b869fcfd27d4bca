/* RoPE inverse frequencies for every rope scaling memra reads, computed as
 * transformers' modeling_rope_utils computes them (in f32 tensors, with
 * the scalar parameters in double), so positions turn by the same angles
 * as in the reference. */
#include <math.h>

#include "model/model.h"

/* YaRN's correction range: the (fractional) dimension at which a
 * frequency completes `rotations` turns over the original context. */
static double yarn_correction_dim(double rotations, double dim, double base, double orig_ctx)
{
    return (dim * log(orig_ctx / (rotations * 2.0 * M_PI))) / (2.0 * log(base));
}

void model_rope_inv_freq(const model_config *c, double theta, int scaled, float *inv_freq,
                         float *attn_factor)
{
    /* partial rotary: only the first rope_dim dims turn, at base^(2i / rope_dim) */
    int dim = (int)config_rope_dim(c), half = dim / 2;
    *attn_factor = 1.0f;
    /* pos_freqs = base ** (arange(0, dim, 2).float() / dim) */
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)dim;
        inv_freq[i] = 1.0f / powf((float)theta, e);
    }
    if (!scaled)
        return;
    double factor = c->rope_scaling.factor;
    switch (c->rope_scaling.kind) {
    case ROPE_SCALING_NONE:
        break;
    case ROPE_SCALING_LINEAR:
        for (int i = 0; i < half; i++)
            inv_freq[i] /= (float)factor;
        break;
    case ROPE_SCALING_LLAMA3: {
        double orig = (double)c->rope_scaling.original_ctx;
        double lo = c->rope_scaling.low_freq_factor, hi = c->rope_scaling.high_freq_factor;
        float low_wavelen = (float)(orig / lo), high_wavelen = (float)(orig / hi);
        for (int i = 0; i < half; i++) {
            float f = inv_freq[i];
            float wavelen = (float)(2.0 * M_PI) / f;
            if (wavelen > low_wavelen) {
                inv_freq[i] = f / (float)factor;
            } else if (!(wavelen < high_wavelen)) {
                float smooth = ((float)orig / wavelen - (float)lo) / (float)(hi - lo);
                inv_freq[i] = (1.0f - smooth) * f / (float)factor + smooth * f;
            }
        }
        break;
    }
    case ROPE_SCALING_YARN: {
        double base = theta, orig = (double)c->rope_scaling.original_ctx;
        double low = floor(yarn_correction_dim(c->rope_scaling.beta_fast, dim, base, orig));
        double high = ceil(yarn_correction_dim(c->rope_scaling.beta_slow, dim, base, orig));
        if (low < 0)
            low = 0;
        if (high > dim - 1)
            high = dim - 1;
        if (low == high)
            high += 0.001;
        for (int i = 0; i < half; i++) {
            float e = (float)(2 * i) / (float)dim;
            float pos_freq = powf((float)base, e);
            float extrap = 1.0f / pos_freq;
            float interp = 1.0f / ((float)factor * pos_freq);
            float ramp = ((float)i - (float)low) / (float)(high - low);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float extrap_factor = 1.0f - ramp;
            inv_freq[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
        }
        *attn_factor = (float)c->rope_scaling.attn_factor;
        break;
    }
    }
}

void model_rope_inv_freq_partial(int head_dim, int angles, double theta, float *inv_freq)
{
    /* 1 / base ** (arange(0, 2 * angles, 2).float() / head_dim), then zeros */
    for (int i = 0; i < head_dim / 2; i++)
        inv_freq[i] = i < angles ? 1.0f / powf((float)theta, (float)(2 * i) / (float)head_dim)
                                 : 0.0f;
}
