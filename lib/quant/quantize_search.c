/* The scale searches the quantizers share.
 *
 * Both follow the same idea: for a set of candidate scales, round every
 * value to its integer level, then solve for the scale (and offset) that
 * minimize the weighted squared error for those levels in closed form, and
 * keep the candidate whose least-squares error is smallest; a few rounds of
 * re-rounding with the winning scale follow, kept while they help. The
 * candidates differ in how far the extreme value is stretched, which decides
 * how much of the range the block's outlier is allowed to take. */
#include <math.h>
#include <stdlib.h>

#include "quant/quantize_internal.h"

const float qz_ones[256] = {
#define Q1 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f
#define Q8 Q1, Q1, Q1, Q1, Q1, Q1, Q1, Q1
    Q8, Q8, Q8, Q8,
#undef Q8
#undef Q1
};

const float *qz_block_weights(const float *w, int n)
{
    if (!w)
        return qz_ones;
    for (int i = 0; i < n; i++)
        if (w[i] > 0.0f)
            return w;
    return qz_ones;
}

/* Least-squares score of the quants for x ~ s * q: sum w x q and sum w q^2.
 * The error of the best s for these quants is sum w x^2 - sxq^2 / sqq. */
static void sym_sums(const float *x, const float *w, int n, float iscale, float lo, float hi,
                     float *sxq, float *sqq)
{
    float a[QZ_LANES] = {0}, b[QZ_LANES] = {0};
    for (int i = 0; i < n; i += QZ_LANES) {
        for (int k = 0; k < QZ_LANES; k++) {
            const float q = qz_roundf(qz_clamp(x[i + k] * iscale, lo, hi));
            const float wq = w[i + k] * q;
            a[k] += wq * x[i + k];
            b[k] += wq * q;
        }
    }
    *sxq = qz_lanes_sum(a);
    *sqq = qz_lanes_sum(b);
}

float qz_fit_symmetric(const float *x, const float *w, int n, int qmin, int qmax, int nstep,
                       float *err)
{
    float amax = 0.0f, xm = 0.0f, sxx = 0.0f;
    for (int i = 0; i < n; i++) {
        sxx += w[i] * x[i] * x[i];
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            xm = x[i];
        }
    }
    if (amax == 0.0f) {
        *err = 0.0f;
        return 0.0f;
    }
    const float lo = (float)qmin, hi = (float)qmax;
    float best_s = 0.0f, best_score = -1.0f;
    const int sides[2] = {qmax, qmin};
    const int n_sides = qmin == -qmax ? 1 : 2;
    for (int sd = 0; sd < n_sides; sd++) {
        for (int k = -nstep; k <= nstep; k++) {
            /* the extreme value xm lands on side + 0.1 k (toward the side) */
            const float t = (float)abs(sides[sd]) + 0.1f * (float)k;
            if (t < 0.5f)
                continue;
            const float iscale = (sides[sd] < 0 ? -t : t) / xm;
            float sxq, sqq;
            sym_sums(x, w, n, iscale, lo, hi, &sxq, &sqq);
            if (sqq > 0.0f && sxq * sxq / sqq > best_score) {
                best_score = sxq * sxq / sqq;
                best_s = sxq / sqq;
            }
        }
    }
    /* re-round with the winner's scale while that lowers the error */
    for (int it = 0; it < 4 && best_s != 0.0f; it++) {
        float sxq, sqq;
        sym_sums(x, w, n, 1.0f / best_s, lo, hi, &sxq, &sqq);
        if (!(sqq > 0.0f) || sxq * sxq / sqq <= best_score)
            break;
        best_score = sxq * sxq / sqq;
        best_s = sxq / sqq;
    }
    float e = sxx - (best_score > 0.0f ? best_score : 0.0f);
    *err = e > 0.0f ? e : 0.0f;
    return best_s;
}

float qz_err_symmetric(const float *x, const float *w, int n, float s, int qmin, int qmax)
{
    const float is = s != 0.0f ? 1.0f / s : 0.0f;
    float e[QZ_LANES] = {0};
    for (int i = 0; i < n; i += QZ_LANES) {
        for (int k = 0; k < QZ_LANES; k++) {
            const float l = qz_roundf(qz_clamp(x[i + k] * is, (float)qmin, (float)qmax));
            const float d = x[i + k] - l * s;
            e[k] += w[i + k] * d * d;
        }
    }
    return qz_lanes_sum(e);
}

void qz_quants_symmetric(const float *x, int n, float s, int qmin, int qmax, int8_t *q)
{
    const float is = s != 0.0f ? 1.0f / s : 0.0f;
    for (int i = 0; i < n; i++)
        q[i] = (int8_t)qz_round(qz_clamp(x[i] * is, (float)qmin, (float)qmax));
}

/* Weighted least squares for x ~ a * l + c over the current levels l,
 * with c <= 0 (a K-quant min is subtracted) and a > 0. Returns 0 when the
 * levels do not determine a positive scale. */
static int affine_solve(float sw, float swx, float sl, float sl2, float slx, float *a, float *c)
{
    const float det = sw * sl2 - sl * sl;
    if (!(det > 0.0f))
        return 0;
    float aa = (sw * slx - sl * swx) / det;
    float cc = (sl2 * swx - sl * slx) / det;
    if (cc > 0.0f) {
        cc = 0.0f;
        aa = slx / sl2;
    }
    if (!(aa > 0.0f))
        return 0;
    *a = aa;
    *c = cc;
    return 1;
}

typedef struct {
    float sw, swx, sxx;
} affine_base;

/* Level sums for offset c and inverse scale iscale, then the least-squares
 * (a, c) for those levels and their error; returns 0 when unsolvable. */
static int affine_try(const float *x, const float *w, int n, float nmax, float c0, float iscale,
                      const affine_base *bs, float *a, float *c, float *err)
{
    float al[QZ_LANES] = {0}, al2[QZ_LANES] = {0}, alx[QZ_LANES] = {0};
    for (int i = 0; i < n; i += QZ_LANES) {
        for (int k = 0; k < QZ_LANES; k++) {
            const float l = qz_roundf(qz_clamp((x[i + k] - c0) * iscale, 0.0f, nmax));
            const float wl = w[i + k] * l;
            al[k] += wl;
            al2[k] += wl * l;
            alx[k] += wl * x[i + k];
        }
    }
    const float sl = qz_lanes_sum(al), sl2 = qz_lanes_sum(al2), slx = qz_lanes_sum(alx);
    if (!affine_solve(bs->sw, bs->swx, sl, sl2, slx, a, c))
        return 0;
    /* sum w (a l + c - x)^2, expanded over the sums */
    const float A = *a, C = *c;
    float e = bs->sxx - 2.0f * A * slx - 2.0f * C * bs->swx + A * A * sl2 + 2.0f * A * C * sl +
              C * C * bs->sw;
    *err = e > 0.0f ? e : 0.0f;
    return 1;
}

void qz_fit_affine(const float *x, const float *w, int n, int nmax, int nstep, float *a, float *b)
{
    float xmin = x[0], xmax = x[0];
    affine_base bs = {0.0f, 0.0f, 0.0f};
    for (int i = 0; i < n; i++) {
        xmin = x[i] < xmin ? x[i] : xmin;
        xmax = x[i] > xmax ? x[i] : xmax;
        bs.sw += w[i];
        bs.swx += w[i] * x[i];
        bs.sxx += w[i] * x[i] * x[i];
    }
    if (xmin > 0.0f)
        xmin = 0.0f;
    if (!(xmax > xmin)) { /* constant block, <= 0: all levels 0, x = -b */
        *a = 0.0f;
        *b = -xmin;
        return;
    }
    const float fmax = (float)nmax, range = xmax - xmin;
    float best_a = range / fmax, best_c = xmin, best_err = INFINITY;
    for (int is = 0; is <= nstep; is++) {
        const float iscale = (fmax - 1.0f + 2.0f * (float)is / (float)nstep) / range;
        float aa, cc, e;
        if (affine_try(x, w, n, fmax, xmin, iscale, &bs, &aa, &cc, &e) && e < best_err) {
            best_err = e;
            best_a = aa;
            best_c = cc;
        }
    }
    for (int it = 0; it < 3 && best_err < INFINITY; it++) {
        float aa, cc, e;
        if (!affine_try(x, w, n, fmax, best_c, 1.0f / best_a, &bs, &aa, &cc, &e) || e >= best_err)
            break;
        best_err = e;
        best_a = aa;
        best_c = cc;
    }
    *a = best_a;
    *b = -best_c;
}

uint16_t qz_f16_scale(const float *x, const float *w, int n, float s, float s_ref, int qmin,
                      int qmax, int8_t *q)
{
    const uint16_t h0 = qz_f16(s);
    uint16_t cand[4] = {h0, h0, h0, qz_f16(s_ref)};
    for (int k = 0; k < 2; k++) {
        const int mag = (h0 & 0x7FFF) + (k ? 1 : -1);
        if (s != 0.0f && mag > 0 && mag <= 0x7BFF) /* not zero, not past the largest f16 */
            cand[k + 1] = (uint16_t)((h0 & 0x8000) | mag);
    }
    uint16_t best = h0;
    float best_err = qz_err_symmetric(x, w, n, fp16_to_f32(h0), qmin, qmax);
    for (int k = 1; k < 4; k++) {
        if (cand[k] == best)
            continue;
        const float e = qz_err_symmetric(x, w, n, fp16_to_f32(cand[k]), qmin, qmax);
        if (e < best_err) {
            best_err = e;
            best = cand[k];
        }
    }
    qz_quants_symmetric(x, n, fp16_to_f32(best), qmin, qmax, q);
    return best;
}
