#include <math.h>

#include "kernels/dev_common.cuh"
#include "kernels/sample.cuh"

// ---- kernels ----

namespace {

constexpr int ST = 512;    // threads per row
constexpr int NCOPY = 4;   // copies of each histogram bin (fewer atomic conflicts)
constexpr int NBIN = 256;  // 8-bit digits
constexpr int SCAN_T = 256;        // threads per block of stage 1's scan
constexpr int64_t SCAN_SPAN = 8192; // logits a scan block reads, at least
static_assert(SMP_SCAN_SLICES <= ST, "a thread per slice folds the scan");

struct Shared {
    uint64_t red[4][ST];
    unsigned int hcnt[NCOPY][NBIN];
    unsigned long long hlo[NCOPY][NBIN], hhi[NCOPY][NBIN]; // weight bits 0-31, 32-62
    unsigned int bcnt[NBIN];
    smp_u128 tval[ST]; // per-thread (or per-bin) counts and masses
    smp_u128 lsum[32];
    uint64_t r[4];
    uint32_t prefix;
    smp_u128 need, total, cross_excl;
    int cross_t;
    int32_t found;
};

DEV uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

// Block-wide reduction of nv <= 4 values over NT threads (red holds one
// per thread, r the results): value j summed when bit j of sum_mask is
// set, else the max. Integers, so the order does not matter.
template <int NT>
DEV void reduce4(uint64_t (&red)[4][NT], uint64_t (&r)[4], uint64_t *v, int nv,
                 unsigned sum_mask)
{
    const int t = threadIdx.x;
    for (int j = 0; j < nv; j++)
        red[j][t] = v[j];
    __syncthreads();
    if (t < 32)
        for (int j = 0; j < nv; j++) {
            uint64_t a = red[j][t];
            for (int u = t + 32; u < NT; u += 32)
                a = (sum_mask >> j & 1) ? a + red[j][u] : max_u64(a, red[j][u]);
            red[j][t] = a;
        }
    __syncthreads();
    if (t == 0)
        for (int j = 0; j < nv; j++) {
            uint64_t a = red[j][0];
            for (int u = 1; u < 32; u++)
                a = (sum_mask >> j & 1) ? a + red[j][u] : max_u64(a, red[j][u]);
            r[j] = a;
        }
    __syncthreads();
    for (int j = 0; j < nv; j++)
        v[j] = r[j];
}

DEV void block_reduce(Shared &sh, uint64_t *v, int nv, unsigned sum_mask)
{
    reduce4<ST>(sh.red, sh.r, v, nv, sum_mask);
}

// The threads' values sh.tval[0..ST) in thread order: their total into
// sh.total, and the first thread whose running total passes the target
// (excl + val > target) into sh.cross_t with its exclusive prefix; sh.found
// is reset to -1 for that thread's walk. With draw, the target is
// floor(u * total / 2^64) (sample_math.h), else tgt.
//
// Shared scalars are written only by one thread, between two barriers
// after their last readers: a value read right after a barrier (as every
// thread reads sh.found after a walk) must not be rewritten before the
// next barrier, since other warps may not have read it yet.
DEV void find_crossing(Shared &sh, smp_u128 tgt, int draw, uint64_t u)
{
    const int t = threadIdx.x, G = ST / 32;
    __syncthreads();
    if (t < 32) {
        smp_u128 s = smp_u128_of(0);
        for (int j = 0; j < G; j++)
            s = smp_add(s, sh.tval[t * G + j]);
        sh.lsum[t] = s;
    }
    __syncthreads();
    if (t == 0) {
        smp_u128 total = smp_u128_of(0);
        for (int l = 0; l < 32; l++)
            total = smp_add(total, sh.lsum[l]);
        sh.total = total;
        if (draw)
            tgt = smp_draw_target(total, u);
        smp_u128 c = smp_u128_of(0);
        int lane = 31;
        for (int l = 0; l < 32; l++) {
            if (smp_lt(tgt, smp_add(c, sh.lsum[l]))) {
                lane = l;
                break;
            }
            c = smp_add(c, sh.lsum[l]);
        }
        int found = -1;
        for (int j = 0; j < G; j++) {
            if (smp_lt(tgt, smp_add(c, sh.tval[lane * G + j]))) {
                found = lane * G + j;
                break;
            }
            c = smp_add(c, sh.tval[lane * G + j]);
        }
        sh.cross_t = found;
        sh.cross_excl = c;
        sh.found = -1; // the crossing thread's walk sets it
    }
    __syncthreads();
}

// Key order: key, then the lower id first. A set "at least (K, idK)":
// every key above K, and the ids <= idK at K.
DEV bool in_set(uint32_t key, int64_t id, uint32_t K, int64_t idK)
{
    return key > K || (key == K && id <= idK);
}

struct Cuts {
    float max;
    uint32_t kk, kp;   // top-k and top-p cut keys
    int64_t idk, idp;  // and the last id kept at each
    double min_p_log;
};

DEV bool top_k_cand(const Cuts &c, int64_t i, float x)
{
    return x > -INFINITY && in_set(smp_key(x), i, c.kk, c.idk);
}

DEV bool survivor(const Cuts &c, int64_t i, float x)
{
    if (!(x > -INFINITY))
        return false;
    const uint32_t key = smp_key(x);
    return in_set(key, i, c.kk, c.idk) && in_set(key, i, c.kp, c.idp) &&
           HD_DSUB((double)x, (double)c.max) >= c.min_p_log;
}

// Radix select over the candidates (top-k candidates when mass, else the
// finite logits), best key first: the key at which the running count
// (or, with mass, the running weight at temperature 1) first reaches
// `need`; *rem gets what is still needed from the candidates at that key.
// With mass, need is the top-p target of the candidates' total, found
// from the first level's histogram.
template <bool MASS>
DEV uint32_t radix_select(Shared &sh, const float *l, int64_t n, const Cuts &cuts,
                          smp_u128 need, uint64_t top_p_q32, smp_u128 *rem)
{
    const int t = threadIdx.x, c = t & (NCOPY - 1);
    uint32_t prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int j = t; j < NCOPY * NBIN; j += ST) {
            sh.hcnt[j / NBIN][j % NBIN] = 0;
            sh.hlo[j / NBIN][j % NBIN] = 0;
            sh.hhi[j / NBIN][j % NBIN] = 0;
        }
        __syncthreads();
        for (int64_t i = t; i < n; i += ST) {
            const float x = l[i];
            if (MASS ? !top_k_cand(cuts, i, x) : !(x > -INFINITY))
                continue;
            const uint32_t key = smp_key(x);
            if ((key & mask) != prefix)
                continue;
            const int bin = (int)((key >> shift) & 0xFF);
            atomicAdd(&sh.hcnt[c][bin], 1u);
            if (MASS) {
                const uint64_t w = smp_weight(smp_dist(x, cuts.max, 1.0));
                atomicAdd(&sh.hlo[c][bin], (unsigned long long)(uint32_t)w);
                atomicAdd(&sh.hhi[c][bin], (unsigned long long)(w >> 32));
            }
        }
        __syncthreads();
        if (t < NBIN) {
            unsigned int cnt = 0;
            smp_u128 m = smp_u128_of(0);
            for (int k = 0; k < NCOPY; k++) {
                cnt += sh.hcnt[k][t];
                const unsigned long long hi = sh.hhi[k][t];
                const smp_u128 hm = {hi << 32, hi >> 32};
                m = smp_add(smp_add64(m, sh.hlo[k][t]), hm);
            }
            sh.bcnt[t] = cnt;
            sh.tval[t] = MASS ? m : smp_u128_of(cnt);
        }
        __syncthreads();
        if (t == 0) {
            if (MASS && shift == 24) {
                smp_u128 z = smp_u128_of(0);
                for (int b = 0; b < NBIN; b++)
                    z = smp_add(z, sh.tval[b]);
                need = smp_top_p_target(z, top_p_q32);
            }
            smp_u128 cum = smp_u128_of(0);
            int chosen = -1, last = 0;
            for (int b = NBIN - 1; b >= 0; b--) {
                if (sh.bcnt[b] == 0)
                    continue;
                last = b;
                if (!smp_lt(smp_add(cum, sh.tval[b]), need)) {
                    chosen = b;
                    break;
                }
                cum = smp_add(cum, sh.tval[b]);
            }
            if (chosen < 0) { // not reached: need never exceeds the total
                chosen = last;
                cum = smp_sub(cum, sh.tval[last]);
                need = smp_add(cum, sh.tval[last]);
            }
            sh.need = smp_sub(need, cum);
            sh.prefix = prefix | (uint32_t)chosen << shift;
        }
        __syncthreads();
        prefix = sh.prefix;
        need = sh.need;
        mask |= 0xFFu << shift;
    }
    *rem = need;
    return prefix;
}

// The c-th (1-based) lowest id among the candidates at key K.
template <bool MASS>
DEV int64_t tie_select(Shared &sh, const float *l, int64_t n, const Cuts &cuts, uint32_t K,
                       uint64_t c)
{
    const int t = threadIdx.x;
    const int64_t per = (n + ST - 1) / ST, lo = t * per, hi = min(n, lo + per);
    uint64_t cnt = 0;
    for (int64_t i = lo; i < hi; i++) {
        const float x = l[i];
        cnt += (MASS ? top_k_cand(cuts, i, x) : x > -INFINITY) && smp_key(x) == K;
    }
    sh.tval[t] = smp_u128_of(cnt);
    find_crossing(sh, smp_u128_of(c - 1), 0, 0);
    if (t == sh.cross_t) {
        uint64_t k = sh.cross_excl.lo;
        for (int64_t i = lo; i < hi; i++) {
            const float x = l[i];
            if ((MASS ? top_k_cand(cuts, i, x) : x > -INFINITY) && smp_key(x) == K && ++k == c) {
                sh.found = (int32_t)i;
                break;
            }
        }
    }
    __syncthreads();
    return sh.found;
}

// One logit of a row scan (stage 1 when FIRST, else the scan after bias
// and penalties): v[0] the highest bad id's complement (NaN or +inf in
// stage 1, +inf after), v[1] whether any logit is finite (FIRST), v[2]
// the argmax (the key and the complement of the id, packed) and v[3] the
// count of logits above -inf. Maxima and a count: the order in which a
// thread meets its logits does not matter.
template <bool FIRST> DEV void scan_logit(float x, int64_t i, uint64_t *v)
{
    if (FIRST ? !(x < INFINITY) : x == INFINITY)
        v[0] = max_u64(v[0], 0xFFFFFFFFull - (uint64_t)i);
    if (x > -INFINITY) {
        if (FIRST)
            v[1] = 1;
        v[2] = max_u64(v[2], (uint64_t)smp_key(x) << 32 | (0xFFFFFFFFull - (uint64_t)i));
        v[3]++;
    }
}

// A thread's part of a scan of the n logits at l, whose ids start at
// base, over NT threads. They are read in 16-byte pieces, four in flight
// per thread, when l is aligned for them (a vocabulary that is a multiple
// of four): one 4-byte load at a time left a block waiting on L2.
template <bool FIRST, int NT>
DEV void scan_row(const float *l, int64_t base, int64_t n, uint64_t *v)
{
    const int t = threadIdx.x;
    int64_t i = t;
    if ((reinterpret_cast<uintptr_t>(l) & 15) == 0) {
        const float4 *l4 = reinterpret_cast<const float4 *>(l);
        const int64_t n4 = n / 4;
        int64_t q = t;
        for (; q + 3 * NT < n4; q += 4 * NT) {
            float4 f[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                f[u] = l4[q + u * NT];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int64_t b = base + 4 * (q + u * NT);
                scan_logit<FIRST>(f[u].x, b, v);
                scan_logit<FIRST>(f[u].y, b + 1, v);
                scan_logit<FIRST>(f[u].z, b + 2, v);
                scan_logit<FIRST>(f[u].w, b + 3, v);
            }
        }
        for (; q < n4; q += NT) {
            const float4 f = l4[q];
            const int64_t b = base + 4 * q;
            scan_logit<FIRST>(f.x, b, v);
            scan_logit<FIRST>(f.y, b + 1, v);
            scan_logit<FIRST>(f.z, b + 2, v);
            scan_logit<FIRST>(f.w, b + 3, v);
        }
        i = 4 * n4 + t;
    }
    for (; i < n; i += NT)
        scan_logit<FIRST>(l[i], base + i, v);
}

// Stage 1 spread over the card: block (s, r) scans slice s of row r (span
// logits, a multiple of four so every slice keeps the row's alignment)
// and writes its four values to part[r][s]. One block a row read a
// 248k-token row at ~20 GB/s, 51 us a greedy token on an H100; the
// values are maxima and a count, so how the row is cut does not change
// them.
__global__ void __launch_bounds__(SCAN_T)
sample_scan_kernel(const float *__restrict__ logits, int64_t n, int64_t span,
                   uint64_t *__restrict__ part)
{
    __shared__ uint64_t red[4][SCAN_T];
    __shared__ uint64_t r[4];
    const int64_t lo = (int64_t)blockIdx.x * span, hi = min(n, lo + span);
    uint64_t v[4] = {0, 0, 0, 0};
    if (lo < hi)
        scan_row<true, SCAN_T>(logits + (int64_t)blockIdx.y * n + lo, lo, hi - lo, v);
    reduce4<SCAN_T>(red, r, v, 4, 1u << 3);
    if (threadIdx.x < 4)
        part[((int64_t)blockIdx.y * SMP_SCAN_SLICES + blockIdx.x) * 4 + threadIdx.x] =
            v[threadIdx.x];
}

__global__ void __launch_bounds__(ST)
sample_kernel(float *__restrict__ logits, int64_t n, const smp_row *__restrict__ rows,
              const smp_bias *__restrict__ bias, const smp_pen *__restrict__ pen,
              const uint32_t *__restrict__ mask, const uint64_t *__restrict__ part,
              int n_slices, smp_outcome *__restrict__ out)
{
    __shared__ Shared sh;
    const int t = threadIdx.x;
    const smp_row r = rows[blockIdx.x];
    float *l = logits + (int64_t)blockIdx.x * n;
    smp_outcome res = {-1, SMP_OK, 0, 0.0f};
    const bool plain = r.n_bias == 0 && r.n_pen == 0 && r.n_mask == 0;

    // 1. NaN / +inf, any finite, the argmax (the key and the complement
    // of the id, packed) and the count: the scan's slices, folded.
    uint64_t v[4] = {0, 0, 0, 0};
    if (t < n_slices)
        for (int j = 0; j < 4; j++)
            v[j] = part[((int64_t)blockIdx.x * SMP_SCAN_SLICES + t) * 4 + j];
    block_reduce(sh, v, 4, 1u << 3);
    const int any_finite = (int)v[1];
    if (v[0]) {
        res.status = SMP_BAD_LOGIT;
        res.bad_id = (int32_t)(0xFFFFFFFFull - v[0]);
        res.bad_value = l[res.bad_id];
        goto done;
    }
    // 2. the mask's bans, bias, then penalties (ids distinct within each
    // list), in place. The mask pass is one coalesced sweep: consecutive
    // threads share a mask word and write consecutive logits.
    if (!plain) {
        if (r.n_mask) {
            const uint32_t *mk = mask + r.mask_at;
            for (int64_t i = t; i < n; i += ST)
                if (!smp_mask_allows(mk, i))
                    l[i] = -INFINITY;
            __syncthreads();
        }
        for (int j = t; j < r.n_bias; j += ST) {
            const smp_bias b = bias[r.bias_at + j];
            l[b.id] = __fadd_rn(l[b.id], b.bias);
        }
        __syncthreads();
        for (int j = t; j < r.n_pen; j += ST) {
            const smp_pen p = pen[r.pen_at + j];
            l[p.id] = smp_penalize(l[p.id], p.count, r.repetition_penalty, r.presence_penalty,
                                   r.frequency_penalty);
        }
        __syncthreads();
        v[0] = v[2] = v[3] = 0;
        scan_row<false, ST>(l, 0, n, v);
        block_reduce(sh, v, 4, 1u << 3);
        if (v[0]) {
            res.status = SMP_INF_AFTER;
            res.bad_id = (int32_t)(0xFFFFFFFFull - v[0]);
            res.bad_value = INFINITY;
            goto done;
        }
    }
    if (v[3] == 0) {
        res.status = any_finite ? SMP_NONE_LEFT : SMP_ALL_NEG_INF;
        goto done;
    }
    {
        const int64_t best = (int64_t)(0xFFFFFFFFull - (v[2] & 0xFFFFFFFFull));
        const uint64_t n_finite = v[3];
        if (r.temperature == 0.0) {
            res.id = (int32_t)best;
            goto done;
        }
        Cuts cuts = {smp_key_float((uint32_t)(v[2] >> 32)), 0, 0, INT64_MAX, INT64_MAX,
                     r.min_p_log};
        smp_u128 rem;
        // 3. top-k
        if (r.top_k > 0 && (uint64_t)r.top_k < n_finite) {
            cuts.kk = radix_select<false>(sh, l, n, cuts, smp_u128_of((uint64_t)r.top_k), 0,
                                          &rem);
            cuts.idk = tie_select<false>(sh, l, n, cuts, cuts.kk, rem.lo);
        }
        // 4. top-p
        if (r.top_p_q32 < SMP_TOP_P_OFF) {
            const uint32_t kp = radix_select<true>(sh, l, n, cuts, smp_u128_of(0), r.top_p_q32,
                                                   &rem);
            // The candidates at kp share one weight w: the fewest c >= 1
            // with c * w >= rem, from a double estimate corrected exactly.
            const uint64_t w = smp_weight(smp_dist(smp_key_float(kp), cuts.max, 1.0));
            uint64_t c = 1;
            if (!smp_is_zero(rem) && w > 0) {
                double est = smp_to_double(rem) / (double)w;
                c = est < 1.0 ? 1 : (uint64_t)est;
                while (c > 1 && !smp_lt(smp_mul64(c - 1, w), rem))
                    c--;
                while (smp_lt(smp_mul64(c, w), rem))
                    c++;
            }
            cuts.idp = tie_select<true>(sh, l, n, cuts, kp, c);
            cuts.kp = kp;
        }
        // 5. min-p is in survivor(); 6. the draw over contiguous id ranges.
        const int64_t per = (n + ST - 1) / ST, lo = t * per, hi = min(n, lo + per);
        smp_u128 s = smp_u128_of(0);
        for (int64_t i = lo; i < hi; i++) {
            const float x = l[i];
            if (survivor(cuts, i, x))
                s = smp_add64(s, smp_weight(smp_dist(x, cuts.max, r.temperature)));
        }
        sh.tval[t] = s;
        find_crossing(sh, smp_u128_of(0), 1, smp_uniform(r.seed, r.step));
        if (t == sh.cross_t) {
            const smp_u128 target = smp_draw_target(sh.total, smp_uniform(r.seed, r.step));
            smp_u128 cum = sh.cross_excl;
            for (int64_t i = lo; i < hi; i++) {
                const float x = l[i];
                if (!survivor(cuts, i, x))
                    continue;
                cum = smp_add64(cum, smp_weight(smp_dist(x, cuts.max, r.temperature)));
                if (smp_lt(target, cum)) {
                    sh.found = (int32_t)i;
                    break;
                }
            }
        }
        __syncthreads();
        res.id = sh.found;
    }
done:
    if (t == 0)
        out[blockIdx.x] = res;
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_sample(float *logits, int64_t n_vocab, int n_rows,
                                     const smp_row *rows, const smp_bias *bias,
                                     const smp_pen *pen, const uint32_t *mask,
                                     uint64_t *scan, smp_outcome *out, cudaStream_t stream)
{
    if (n_rows <= 0)
        return cudaSuccess;
    if (n_vocab <= 0 || n_vocab >= INT32_MAX || n_rows > 65535)
        return cudaErrorInvalidValue;
    // Slices of at least SCAN_SPAN logits, at most SMP_SCAN_SLICES a row,
    // each a multiple of four long.
    int64_t slices = (n_vocab + SCAN_SPAN - 1) / SCAN_SPAN;
    slices = slices < SMP_SCAN_SLICES ? slices : SMP_SCAN_SLICES;
    const int64_t span = ((n_vocab + slices - 1) / slices + 3) & ~(int64_t)3;
    const int n_slices = (int)((n_vocab + span - 1) / span);
    sample_scan_kernel<<<dim3(n_slices, n_rows), SCAN_T, 0, stream>>>(logits, n_vocab, span,
                                                                       scan);
    sample_kernel<<<n_rows, ST, 0, stream>>>(logits, n_vocab, rows, bias, pen, mask, scan,
                                             n_slices, out);
    return cudaGetLastError();
}
