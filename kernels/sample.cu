#include <math.h>

#include "kernels/dev_common.cuh"
#include "kernels/sample.cuh"

// ---- kernels ----

namespace {

constexpr int ST = 512;             // threads of the per-row block (stage 2)
constexpr int WT = 256;             // threads of a slice's block (every other stage)
constexpr int NBIN = 256;           // 8-bit digits
constexpr int64_t SCAN_SPAN = 8192; // logits a scan block reads, at least
constexpr int64_t WORK_SPAN = 2048; // logits a block of the later stages reads, at least
constexpr unsigned FULL = 0xFFFFFFFFu;
static_assert(SMP_SCAN_SLICES <= ST && SMP_SCAN_SLICES <= WT, "a thread per slice loads its values");

// A row's state between stages, in its scratch: stage 2 sets it, each
// stage's last block moves it on.
struct RowState {
    smp_u128 need;     // what the radix walk still needs (a count, or a mass)
    uint64_t n_finite; // logits above -inf (after bias and penalties)
    uint64_t tie_c;    // the rank, among the candidates at tie_key, of the last one kept
    int64_t idk, idp;  // the last id kept at the top-k and top-p cut keys
    float max;         // the best logit
    int32_t live;      // a token is still to be drawn (not greedy, no error)
    uint32_t prefix;   // the radix walk's digits so far
    uint32_t kk, kp;   // the top-k and top-p cut keys
    uint32_t tie_key;  // the key whose ties the ties stage ranks
};

// A row's scratch, in words.
constexpr int SC_PART = 0;                              // [SMP_SCAN_SLICES][4] the scan's values
constexpr int SC_STATE = SC_PART + SMP_SCAN_SLICES * 4; // RowState
constexpr int SC_HIST = SC_STATE + 16;                  // [3][NBIN] counts, mass bits 0-31, 32-62
constexpr int SC_SLICE = SC_HIST + 3 * NBIN;            // [SMP_SCAN_SLICES][2] a value a slice
constexpr int SC_COUNTER = SC_SLICE + SMP_SCAN_SLICES * 2; // blocks done with the stage
static_assert(sizeof(RowState) <= 16 * 8, "the row state outgrew its words");
static_assert(SC_COUNTER < SMP_SCRATCH_WORDS, "the row's scratch outgrew SMP_SCRATCH_WORDS");

DEV uint64_t *row_scratch(uint64_t *scratch, int row)
{
    return scratch + (int64_t)row * SMP_SCRATCH_WORDS;
}
DEV RowState *state_of(uint64_t *sc) { return reinterpret_cast<RowState *>(sc + SC_STATE); }
DEV unsigned long long *ull(uint64_t *p) { return reinterpret_cast<unsigned long long *>(p); }

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

// Whether this block is the last of its row's gridDim.x blocks to finish
// the stage. Each thread fences its own global additions before the
// block takes its ticket, so the block that takes the last one sees
// every other block's, reading them past L1 (__ldcg). The counter is
// left at zero for the next launch.
DEV bool last_block(uint64_t *sc, int *flag)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *counter = reinterpret_cast<unsigned *>(sc + SC_COUNTER);
        const bool last = atomicAdd(counter, 1u) == gridDim.x - 1;
        if (last)
            *counter = 0;
        *flag = last;
    }
    __syncthreads();
    const bool last = *flag != 0;
    if (last)
        __threadfence();
    return last;
}

// The walk over per-thread values in thread order (ties and the draw):
// each thread holds the count or mass of a contiguous range of ids.
template <int NT> struct Walk {
    smp_u128 tval[NT];
    smp_u128 lsum[32];
    smp_u128 total, cross_excl;
    int cross_t;
    int32_t found;
};

// The threads' values w.tval[0..NT) in thread order: the first thread
// whose running total passes tgt (excl + val > tgt) into w.cross_t with
// its exclusive prefix in w.cross_excl; w.found is reset to -1 for that
// thread's walk.
template <int NT> DEV void find_crossing(Walk<NT> &w, smp_u128 tgt)
{
    const int t = threadIdx.x, G = NT / 32;
    __syncthreads();
    if (t < 32) {
        smp_u128 s = smp_u128_of(0);
        for (int j = 0; j < G; j++)
            s = smp_add(s, w.tval[t * G + j]);
        w.lsum[t] = s;
    }
    __syncthreads();
    if (t == 0) {
        smp_u128 c = smp_u128_of(0);
        int lane = 31;
        for (int l = 0; l < 32; l++) {
            if (smp_lt(tgt, smp_add(c, w.lsum[l]))) {
                lane = l;
                break;
            }
            c = smp_add(c, w.lsum[l]);
        }
        int found = -1;
        for (int j = 0; j < G; j++) {
            if (smp_lt(tgt, smp_add(c, w.tval[lane * G + j]))) {
                found = lane * G + j;
                break;
            }
            c = smp_add(c, w.tval[lane * G + j]);
        }
        w.cross_t = found;
        w.cross_excl = c;
        w.found = -1; // the crossing thread's walk sets it
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

DEV Cuts cuts_of(const RowState &s, const smp_row &r)
{
    return {s.max, s.kk, s.kp, s.idk, s.idp, r.min_p_log};
}

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

DEV bool top_k_on(const RowState &s, const smp_row &r)
{
    return s.live && r.top_k > 0 && (uint64_t)r.top_k < s.n_finite;
}

DEV bool top_p_on(const RowState &s, const smp_row &r)
{
    return s.live && r.top_p_q32 < SMP_TOP_P_OFF;
}

// A candidate of the radix walk: the finite logits for top-k, the top-k
// set for top-p.
template <bool MASS> DEV bool walk_cand(const Cuts &c, int64_t i, float x)
{
    return MASS ? top_k_cand(c, i, x) : x > -INFINITY;
}

DEV unsigned long long shfl_u64(unsigned long long v, int src)
{
    const unsigned lo = (unsigned)__shfl_sync(FULL, (int)(unsigned)v, src);
    const unsigned hi = (unsigned)__shfl_sync(FULL, (int)(unsigned)(v >> 32), src);
    return (unsigned long long)hi << 32 | lo;
}

// A warp's candidates into the block's histogram, one atomic a bin the
// warp hits: the lanes on the lowest pending lane's bin are counted (and
// their weights summed) together. Most logits fall in a few top-level
// bins, where one atomic a lane queued 32 deep on one address.
template <bool MASS>
DEV void hist_add(unsigned *cnt, unsigned long long *lo, unsigned long long *hi, bool on,
                  int bin, uint64_t w)
{
    const int lane = threadIdx.x & 31;
    unsigned pend = __ballot_sync(FULL, on);
    while (pend) {
        const int leader = __popc((pend & (0u - pend)) - 1u);
        const int lb = __shfl_sync(FULL, bin, leader);
        const bool mine = on && bin == lb;
        const unsigned grp = __ballot_sync(FULL, mine);
        unsigned long long a = 0, b = 0;
        if (MASS) {
            a = mine ? (uint32_t)w : 0;
            b = mine ? w >> 32 : 0;
            if (grp & (grp - 1))
                for (int m = 16; m; m >>= 1) {
                    a += shfl_u64(a, lane ^ m);
                    b += shfl_u64(b, lane ^ m);
                }
        }
        if (lane == leader) {
            atomicAdd(&cnt[lb], (unsigned)__popc(grp));
            if (MASS) {
                atomicAdd(&lo[lb], a);
                atomicAdd(&hi[lb], b);
            }
        }
        on = on && !mine;
        pend &= ~grp;
    }
}

// A bin's count, or with MASS its mass (bits 0-31 and 32-62 summed apart).
template <bool MASS>
DEV smp_u128 bin_value(unsigned cnt, unsigned long long lo, unsigned long long hi)
{
    if (!MASS)
        return smp_u128_of(cnt);
    const smp_u128 h = {hi << 32, hi >> 32};
    return smp_add(smp_add64(smp_u128_of(0), lo), h);
}

// One digit of a radix select (shift 24, 16, 8, 0), best key first, over
// the candidates whose key matches the digits found so far: every slice
// adds its histogram (counts, or with MASS the weights at temperature 1)
// to the row's, and the last block takes the bin where the running count
// (or mass) from the top first reaches the row's need. With MASS the
// need is top-p's target, set at the first digit from the candidates'
// total. After the last digit the key is the cut and what is still
// needed is the rank among its ties.
template <bool MASS>
__global__ void __launch_bounds__(WT)
sample_level_kernel(const float *__restrict__ logits, int64_t n, int64_t span,
                    const smp_row *__restrict__ rows, uint64_t *__restrict__ scratch, int shift)
{
    __shared__ unsigned cnt[NBIN];
    __shared__ unsigned long long lo_s[NBIN], hi_s[NBIN];
    __shared__ smp_u128 gsum[32];
    __shared__ unsigned gnon[32];
    __shared__ int flag;
    const int t = threadIdx.x;
    uint64_t *sc = row_scratch(scratch, blockIdx.y);
    const smp_row r = rows[blockIdx.y];
    const RowState s = *state_of(sc);
    if (!(MASS ? top_p_on(s, r) : top_k_on(s, r)))
        return;
    const Cuts cuts = cuts_of(s, r);
    const uint32_t kmask = shift == 24 ? 0u : ~0u << (shift + 8);
    for (int b = t; b < NBIN; b += WT) {
        cnt[b] = 0;
        lo_s[b] = hi_s[b] = 0;
    }
    __syncthreads();
    const float *l = logits + (int64_t)blockIdx.y * n;
    const int64_t lo = (int64_t)blockIdx.x * span, hi = min(n, lo + span);
    for (int64_t i0 = lo; i0 < hi; i0 += WT) { // every lane of a warp goes round
        const int64_t i = i0 + t;
        bool on = false;
        int bin = 0;
        uint64_t w = 0;
        if (i < hi) {
            const float x = l[i];
            const uint32_t key = smp_key(x);
            on = walk_cand<MASS>(cuts, i, x) && (key & kmask) == s.prefix;
            bin = (int)(key >> shift & 0xFF);
            if (MASS && on)
                w = smp_weight(smp_dist(x, cuts.max, 1.0));
        }
        hist_add<MASS>(cnt, lo_s, hi_s, on, bin, w);
    }
    __syncthreads();
    unsigned long long *gh = ull(sc + SC_HIST);
    for (int b = t; b < NBIN; b += WT)
        if (cnt[b]) {
            atomicAdd(&gh[b], (unsigned long long)cnt[b]);
            if (MASS) {
                atomicAdd(&gh[NBIN + b], lo_s[b]);
                atomicAdd(&gh[2 * NBIN + b], hi_s[b]);
            }
        }
    if (!last_block(sc, &flag))
        return;
    // The row's histogram into shared memory, and zeroed for the next digit.
    for (int b = t; b < NBIN; b += WT) {
        cnt[b] = (unsigned)__ldcg(&gh[b]);
        lo_s[b] = MASS ? __ldcg(&gh[NBIN + b]) : 0;
        hi_s[b] = MASS ? __ldcg(&gh[2 * NBIN + b]) : 0;
        gh[b] = gh[NBIN + b] = gh[2 * NBIN + b] = 0;
    }
    __syncthreads();
    // 32 groups of 8 bins from the top: their sums and how many are not
    // empty, so one thread's walk takes 40 steps, not 256.
    if (t < 32) {
        smp_u128 m = smp_u128_of(0);
        unsigned ne = 0;
        for (int j = 0; j < 8; j++) {
            const int b = NBIN - 1 - (t * 8 + j);
            ne += cnt[b] != 0;
            m = smp_add(m, bin_value<MASS>(cnt[b], lo_s[b], hi_s[b]));
        }
        gsum[t] = m;
        gnon[t] = ne;
    }
    __syncthreads();
    if (t != 0)
        return;
    smp_u128 need = s.need;
    if (MASS && shift == 24) {
        smp_u128 z = smp_u128_of(0);
        for (int g = 0; g < 32; g++)
            z = smp_add(z, gsum[g]);
        need = smp_top_p_target(z, r.top_p_q32);
    }
    smp_u128 cum = smp_u128_of(0);
    int chosen = -1;
    for (int g = 0; g < 32 && chosen < 0; g++) {
        if (gnon[g] == 0)
            continue;
        if (smp_lt(smp_add(cum, gsum[g]), need)) {
            cum = smp_add(cum, gsum[g]);
            continue;
        }
        for (int j = 0; j < 8; j++) {
            const int b = NBIN - 1 - (g * 8 + j);
            if (cnt[b] == 0)
                continue;
            const smp_u128 v = bin_value<MASS>(cnt[b], lo_s[b], hi_s[b]);
            if (!smp_lt(smp_add(cum, v), need)) {
                chosen = b;
                break;
            }
            cum = smp_add(cum, v);
        }
    }
    if (chosen < 0) { // not reached: the need never exceeds the total; take the last bin
        for (chosen = 0; chosen < NBIN - 1 && cnt[chosen] == 0; chosen++)
            ;
        need = cum;
        cum = smp_sub(cum, bin_value<MASS>(cnt[chosen], lo_s[chosen], hi_s[chosen]));
    }
    RowState *st = state_of(sc);
    const uint32_t prefix = s.prefix | (uint32_t)chosen << shift;
    const smp_u128 rem = smp_sub(need, cum);
    st->need = rem;
    st->prefix = prefix;
    if (shift > 0)
        return;
    // The cut key, and the rank among its candidates of the last one kept.
    st->prefix = 0; // for the next walk
    st->tie_key = prefix;
    uint64_t c = rem.lo;
    if (MASS) {
        // The candidates at the key share one weight w: the fewest c >= 1
        // with c * w >= rem, from a double estimate corrected exactly.
        const uint64_t w = smp_weight(smp_dist(smp_key_float(prefix), cuts.max, 1.0));
        c = 1;
        if (!smp_is_zero(rem) && w > 0) {
            double est = smp_to_double(rem) / (double)w;
            c = est < 1.0 ? 1 : (uint64_t)est;
            while (c > 1 && !smp_lt(smp_mul64(c - 1, w), rem))
                c--;
            while (smp_lt(smp_mul64(c, w), rem))
                c++;
        }
    }
    st->tie_c = c;
}

// The stages that end on one id, found by a walk in id order: the ties
// at top-k's and top-p's cut keys (the tie_c-th candidate at the key: the
// last one kept) and the draw (the survivor where the running mass at the
// row's temperature passes floor(u * total / 2^64)).
enum WalkStage { TIES_K, TIES_P, DRAW };

// What a logit adds to its stage's running total: 1 for a candidate at
// the cut key, a survivor's weight for the draw.
template <int STAGE>
DEV uint64_t walk_value(const Cuts &c, uint32_t K, double temperature, int64_t i, float x)
{
    if (STAGE == DRAW)
        return survivor(c, i, x) ? smp_weight(smp_dist(x, c.max, temperature)) : 0;
    return walk_cand<STAGE == TIES_P>(c, i, x) && smp_key(x) == K;
}

// Every slice sums its values (bits 0-31 and 32-62 apart); the last block
// loads the slices' sums side by side (one thread's loop over them waited
// out a round trip to L2 for each), finds the slice where the running
// total passes the target and walks it, a contiguous range of ids a
// thread, to the id.
template <int STAGE>
__global__ void __launch_bounds__(WT)
sample_walk_kernel(const float *__restrict__ logits, int64_t n, int64_t span,
                   const smp_row *__restrict__ rows, uint64_t *__restrict__ scratch,
                   smp_outcome *__restrict__ out)
{
    __shared__ uint64_t red[4][WT];
    __shared__ uint64_t rr[4];
    __shared__ Walk<WT> w;
    __shared__ int flag, js;
    __shared__ smp_u128 jtgt;
    const int t = threadIdx.x;
    uint64_t *sc = row_scratch(scratch, blockIdx.y);
    const smp_row r = rows[blockIdx.y];
    const RowState s = *state_of(sc);
    if (!(STAGE == DRAW ? s.live != 0 : STAGE == TIES_P ? top_p_on(s, r) : top_k_on(s, r)))
        return;
    const Cuts cuts = cuts_of(s, r);
    const uint32_t K = s.tie_key;
    const float *l = logits + (int64_t)blockIdx.y * n;
    const int64_t lo = (int64_t)blockIdx.x * span, hi = min(n, lo + span);
    uint64_t v[2] = {0, 0};
    for (int64_t i = lo + t; i < hi; i += WT) {
        const uint64_t x = walk_value<STAGE>(cuts, K, r.temperature, i, l[i]);
        v[0] += (uint32_t)x;
        v[1] += x >> 32;
    }
    reduce4<WT>(red, rr, v, 2, 3u);
    if (t == 0) {
        sc[SC_SLICE + 2 * blockIdx.x] = v[0];
        sc[SC_SLICE + 2 * blockIdx.x + 1] = v[1];
    }
    if (!last_block(sc, &flag))
        return;
    if (t < (int)gridDim.x) {
        red[0][t] = __ldcg(ull(sc + SC_SLICE + 2 * t));
        red[1][t] = __ldcg(ull(sc + SC_SLICE + 2 * t + 1));
    }
    __syncthreads();
    if (t == 0) {
        smp_u128 target = smp_u128_of(s.tie_c - 1);
        if (STAGE == DRAW) {
            smp_u128 total = smp_u128_of(0);
            for (int j = 0; j < (int)gridDim.x; j++)
                total = smp_add(total, bin_value<true>(0, red[0][j], red[1][j]));
            target = smp_draw_target(total, smp_uniform(r.seed, r.step));
        }
        smp_u128 cum = smp_u128_of(0);
        int j = 0;
        for (; j < (int)gridDim.x - 1; j++) {
            const smp_u128 m = bin_value<true>(0, red[0][j], red[1][j]);
            if (smp_lt(target, smp_add(cum, m)))
                break;
            cum = smp_add(cum, m);
        }
        js = j;
        jtgt = smp_sub(target, cum);
    }
    __syncthreads();
    const int64_t slo = (int64_t)js * span, shi = min(n, slo + span);
    const int64_t per = (shi - slo + WT - 1) / WT, a = slo + t * per, b = min(shi, a + per);
    smp_u128 sum = smp_u128_of(0);
    for (int64_t i = a; i < b; i++)
        sum = smp_add64(sum, walk_value<STAGE>(cuts, K, r.temperature, i, l[i]));
    w.tval[t] = sum;
    find_crossing<WT>(w, jtgt);
    if (t == w.cross_t) {
        smp_u128 cum = w.cross_excl;
        for (int64_t i = a; i < b; i++) {
            cum = smp_add64(cum, walk_value<STAGE>(cuts, K, r.temperature, i, l[i]));
            if (smp_lt(jtgt, cum)) {
                w.found = (int32_t)i;
                break;
            }
        }
    }
    __syncthreads();
    if (t != 0)
        return;
    if (STAGE == DRAW) {
        const smp_outcome res = {w.found, SMP_OK, 0, 0.0f};
        out[blockIdx.y] = res;
    } else if (STAGE == TIES_P) {
        state_of(sc)->kp = K;
        state_of(sc)->idp = w.found;
    } else {
        state_of(sc)->kk = K;
        state_of(sc)->idk = w.found;
    }
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
// and writes its four values to the row's scratch. One block a row read a
// 248k-token row at ~20 GB/s, 51 us a greedy token on an H100; the
// values are maxima and a count, so how the row is cut does not change
// them.
__global__ void __launch_bounds__(WT)
sample_scan_kernel(const float *__restrict__ logits, int64_t n, int64_t span,
                   uint64_t *__restrict__ scratch)
{
    __shared__ uint64_t red[4][WT];
    __shared__ uint64_t r[4];
    const int64_t lo = (int64_t)blockIdx.x * span, hi = min(n, lo + span);
    uint64_t v[4] = {0, 0, 0, 0};
    if (lo < hi)
        scan_row<true, WT>(logits + (int64_t)blockIdx.y * n + lo, lo, hi - lo, v);
    reduce4<WT>(red, r, v, 4, 1u << 3);
    if (threadIdx.x < 4)
        row_scratch(scratch, blockIdx.y)[SC_PART + blockIdx.x * 4 + threadIdx.x] =
            v[threadIdx.x];
}

// Stage 2, one block a row: the scan's slices folded, the errors, the
// mask, bias and penalties in place (and the row scanned again after
// them), the greedy pick; a row that draws gets its state for the
// stages after.
__global__ void __launch_bounds__(ST)
sample_prep_kernel(float *__restrict__ logits, int64_t n, const smp_row *__restrict__ rows,
                   const smp_bias *__restrict__ bias, const smp_pen *__restrict__ pen,
                   const uint32_t *__restrict__ mask, uint64_t *__restrict__ scratch,
                   int n_slices, smp_outcome *__restrict__ out)
{
    __shared__ uint64_t red[4][ST];
    __shared__ uint64_t rr[4];
    const int t = threadIdx.x;
    const smp_row r = rows[blockIdx.x];
    uint64_t *sc = row_scratch(scratch, blockIdx.x);
    float *l = logits + (int64_t)blockIdx.x * n;
    smp_outcome res = {-1, SMP_OK, 0, 0.0f};
    const bool plain = r.n_bias == 0 && r.n_pen == 0 && r.n_mask == 0;
    int live = 0;
    RowState st = {};

    // The histogram and the counter start at zero for the stages after.
    for (int j = t; j < 3 * NBIN; j += ST)
        sc[SC_HIST + j] = 0;
    if (t == 0)
        sc[SC_COUNTER] = 0;
    // 1. NaN / +inf, any finite, the argmax (the key and the complement
    // of the id, packed) and the count: the scan's slices, folded.
    uint64_t v[4] = {0, 0, 0, 0};
    if (t < n_slices)
        for (int j = 0; j < 4; j++)
            v[j] = sc[SC_PART + t * 4 + j];
    reduce4<ST>(red, rr, v, 4, 1u << 3);
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
        reduce4<ST>(red, rr, v, 4, 1u << 3);
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
    if (r.temperature == 0.0) {
        res.id = (int32_t)(0xFFFFFFFFull - (v[2] & 0xFFFFFFFFull));
        goto done;
    }
    live = 1;
    st.need = smp_u128_of(r.top_k > 0 ? (uint64_t)r.top_k : 0);
    st.n_finite = v[3];
    st.idk = st.idp = INT64_MAX;
    st.max = smp_key_float((uint32_t)(v[2] >> 32));
    st.live = 1;
done:
    if (t == 0) {
        *state_of(sc) = st;
        if (!live)
            out[blockIdx.x] = res;
    }
}

} // namespace

// ---- launchers ----

namespace {

// Slices of at least least_span logits, at most SMP_SCAN_SLICES a row,
// each a multiple of four long: the span, and the count into *slices.
int64_t slice_span(int64_t n, int64_t least_span, int *slices)
{
    int64_t k = (n + least_span - 1) / least_span;
    k = k < SMP_SCAN_SLICES ? k : SMP_SCAN_SLICES;
    const int64_t span = ((n + k - 1) / k + 3) & ~(int64_t)3;
    *slices = (int)((n + span - 1) / span);
    return span;
}

__global__ void sample_feed_kernel(const smp_outcome *o, int64_t n_vocab, int32_t *token)
{
    if (threadIdx.x != 0)
        return;
    const int32_t id = o->id;
    token[0] = o->status == SMP_OK && id >= 0 && id < n_vocab ? id : 0;
}

} // namespace

extern "C" cudaError_t launch_sample_feed(const smp_outcome *o, int64_t n_vocab,
                                          int32_t *token, cudaStream_t stream)
{
    sample_feed_kernel<<<1, 32, 0, stream>>>(o, n_vocab, token); /* one warp, one lane writes */
    return cudaGetLastError();
}

extern "C" cudaError_t launch_sample(float *logits, int64_t n_vocab, int n_rows,
                                     const smp_row *rows, const smp_bias *bias,
                                     const smp_pen *pen, const uint32_t *mask,
                                     uint64_t *scratch, unsigned stages, smp_outcome *out,
                                     cudaStream_t stream)
{
    if (n_rows <= 0)
        return cudaSuccess;
    if (n_vocab <= 0 || n_vocab >= INT32_MAX || n_rows > 65535)
        return cudaErrorInvalidValue;
    int ns = 0, nw = 0;
    const int64_t span = slice_span(n_vocab, SCAN_SPAN, &ns);
    sample_scan_kernel<<<dim3(ns, n_rows), WT, 0, stream>>>(logits, n_vocab, span, scratch);
    sample_prep_kernel<<<n_rows, ST, 0, stream>>>(logits, n_vocab, rows, bias, pen, mask,
                                                  scratch, ns, out);
    if (!(stages & (SMP_STAGE_DRAW | SMP_STAGE_TOP_K | SMP_STAGE_TOP_P)))
        return cudaGetLastError();
    const int64_t wspan = slice_span(n_vocab, WORK_SPAN, &nw);
    const dim3 grid(nw, n_rows);
    if (stages & SMP_STAGE_TOP_K) {
        for (int shift = 24; shift >= 0; shift -= 8)
            sample_level_kernel<false><<<grid, WT, 0, stream>>>(logits, n_vocab, wspan, rows,
                                                                scratch, shift);
        sample_walk_kernel<TIES_K><<<grid, WT, 0, stream>>>(logits, n_vocab, wspan, rows,
                                                            scratch, out);
    }
    if (stages & SMP_STAGE_TOP_P) {
        for (int shift = 24; shift >= 0; shift -= 8)
            sample_level_kernel<true><<<grid, WT, 0, stream>>>(logits, n_vocab, wspan, rows,
                                                               scratch, shift);
        sample_walk_kernel<TIES_P><<<grid, WT, 0, stream>>>(logits, n_vocab, wspan, rows,
                                                            scratch, out);
    }
    sample_walk_kernel<DRAW><<<grid, WT, 0, stream>>>(logits, n_vocab, wspan, rows, scratch, out);
    return cudaGetLastError();
}
