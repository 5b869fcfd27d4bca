#include "kernels/delta_chunk.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/delta_runs.cuh"
#include "kernels/dev_common.cuh"
#include "kernels/launch.cuh"

namespace {

constexpr int CH = DELTA_WINDOW;
constexpr int PREP_THREADS = 256;
// The preparation stages a window's rows of v in shared memory for value
// heads up to this size (larger ones read them from global memory).
constexpr int PREP_VS = 128;
// Staging loops issue STAGE loads a thread before storing any: a window's
// rows come from L2 or memory, and a load-store-load chain waits out each
// round trip in turn.
constexpr int STAGE = 8;

// The scratch, per (row, value head): U [v_dim], W [k_dim], the window's
// masked, decayed q.k row P [CH] (window-relative columns), gamma.
struct chunk_bufs {
    float *u, *w, *pm, *gam;
};

DEV chunk_bufs bufs_of(const cu_delta &p)
{
    const size_t rows = (size_t)p.n * p.n_v;
    chunk_bufs b;
    b.u = p.chunk;
    b.w = b.u + rows * p.v_dim;
    b.pm = b.w + rows * p.k_dim;
    b.gam = b.pm + rows * CH;
    return b;
}

DEV float log_decay(const cu_delta &p, int r, int h)
{
    const float a = p.a_is_log ? -expf(p.a[h]) : p.a[h];
    return __fmul_rn(a, softplus_f(__fadd_rn(p.alpha[(size_t)r * p.n_v + h], p.dt_bias[h])));
}

// One window of rows (blockIdx.y) of one value head (blockIdx.x): gamma,
// A and P, then U and W by forward substitution, a column a thread (the
// column's CH values in registers, A read from shared memory).
template <int KD>
__global__ void __launch_bounds__(PREP_THREADS) delta_chunk_prep_kernel(cu_delta p)
{
    extern __shared__ float prep_smem[];
    constexpr int KP = KD + 1; // padded rows: lanes reading rows s, s + 1 .. hit other banks
    // vs: the window's rows of v (U's right-hand side) when v_dim <= PREP_VS
    float *ks = prep_smem, *qs = ks + CH * KP, *am = qs + CH * KP, *vs = am + CH * (CH + 1);
    __shared__ float gam[CH], bt[CH];
    __shared__ int slot[CH];
    pdl_trigger();
    pdl_wait();
    const int h = blockIdx.x, r0 = blockIdx.y * CH;
    const int L = p.n - r0 < CH ? p.n - r0 : CH;
    const int nv = p.n_v, vd = p.v_dim;
    const int kh = p.tiled ? h % p.n_k : h / (nv / p.n_k);
    const size_t key_dim = (size_t)p.n_k * KD, conv_dim = 2 * key_dim + (size_t)nv * vd;
    const chunk_bufs bf = bufs_of(p);
    // (STAGE loads in flight a thread before their stores)
    for (int base = threadIdx.x; base < CH * KD; base += STAGE * blockDim.x) {
        float q[STAGE], k[STAGE];
#pragma unroll
        for (int m = 0; m < STAGE; m++) {
            const int idx = base + m * blockDim.x, t = idx / KD, u = idx % KD;
            const float *row = p.conv_out + (size_t)(r0 + t) * conv_dim;
            q[m] = idx < CH * KD && t < L ? row[(size_t)kh * KD + u] : 0.0f;
            k[m] = idx < CH * KD && t < L ? row[key_dim + (size_t)kh * KD + u] : 0.0f;
        }
#pragma unroll
        for (int m = 0; m < STAGE; m++) {
            const int idx = base + m * blockDim.x, t = idx / KD, u = idx % KD;
            if (idx < CH * KD) {
                qs[t * KP + u] = q[m];
                ks[t * KP + u] = k[m];
            }
        }
    }
    const bool v_staged = vd <= PREP_VS;
    if (v_staged)
        for (int base = threadIdx.x; base < CH * vd; base += STAGE * blockDim.x) {
            float v[STAGE];
#pragma unroll
            for (int m = 0; m < STAGE; m++) {
                const int idx = base + m * blockDim.x, t = idx / vd, c = idx % vd;
                v[m] = idx < CH * vd && t < L
                           ? p.conv_out[(size_t)(r0 + t) * conv_dim + 2 * key_dim + (size_t)h * vd + c]
                           : 0.0f;
            }
#pragma unroll
            for (int m = 0; m < STAGE; m++) {
                const int idx = base + m * blockDim.x;
                if (idx < CH * vd)
                    vs[idx] = v[m];
            }
        }
    if (threadIdx.x < CH) {
        const int t = threadIdx.x;
        slot[t] = t < L ? p.slot[r0 + t] : -1;
        gam[t] = t < L && slot[t] >= 0 ? log_decay(p, r0 + t, h) : 0.0f;
        bt[t] = t < L && slot[t] >= 0 ? sigmoid_f(p.beta[(size_t)(r0 + t) * nv + h]) : 0.0f;
    }
    __syncthreads();
    if (threadIdx.x == 0) // the sums of g from each segment's first row
        for (int t = 1; t < L; t++)
            if (slot[t] == slot[t - 1])
                gam[t] = __fadd_rn(gam[t - 1], gam[t]);
    __syncthreads();
    // the pairs s <= t (what the substitution and the scan read), in tiles
    // of 2 x 2 pairs (rows t = 2T, 2T + 1, columns s = 2S, 2S + 1, S <= T),
    // tile idx = T (T + 1) / 2 + S: each row of k and q read from shared
    // memory serves two pairs, and a thread's four sums run side by side
    const int TL = (L + 1) / 2;
    for (int idx = threadIdx.x; idx < TL * (TL + 1) / 2; idx += blockDim.x) {
        int T = (int)((sqrtf(8.0f * (float)idx + 1.0f) - 1.0f) * 0.5f);
        T += (T + 1) * (T + 2) / 2 <= idx; // the float root can fall one short
        T -= T * (T + 1) / 2 > idx;
        const int S = idx - T * (T + 1) / 2;
        float kk[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}, qk[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        const float *k0 = ks + 2 * T * KP, *k1 = k0 + KP, *q0 = qs + 2 * T * KP, *q1 = q0 + KP;
        const float *c0 = ks + 2 * S * KP, *c1 = c0 + KP;
#pragma unroll 4
        for (int u = 0; u < KD; u++) {
            const float a0 = k0[u], a1 = k1[u], b0 = q0[u], b1 = q1[u], x0 = c0[u], x1 = c1[u];
            kk[0][0] = fmaf(a0, x0, kk[0][0]);
            kk[0][1] = fmaf(a0, x1, kk[0][1]);
            kk[1][0] = fmaf(a1, x0, kk[1][0]);
            kk[1][1] = fmaf(a1, x1, kk[1][1]);
            qk[0][0] = fmaf(b0, x0, qk[0][0]);
            qk[0][1] = fmaf(b0, x1, qk[0][1]);
            qk[1][0] = fmaf(b1, x0, qk[1][0]);
            qk[1][1] = fmaf(b1, x1, qk[1][1]);
        }
#pragma unroll
        for (int dt = 0; dt < 2; dt++)
#pragma unroll
            for (int ds = 0; ds < 2; ds++) {
                const int t = 2 * T + dt, s = 2 * S + ds;
                if (t >= L || s > t)
                    continue;
                const bool same = slot[t] >= 0 && slot[s] == slot[t];
                const float dec = same ? expf(__fsub_rn(gam[t], gam[s])) : 0.0f;
                am[t * (CH + 1) + s] = bt[t] * dec * (same ? kk[dt][ds] : 0.0f); // (s == t: unread)
                if (slot[t] >= 0)
                    bf.pm[((size_t)(r0 + t) * nv + h) * CH + s] = dec * (same ? qk[dt][ds] : 0.0f);
            }
    }
    if ((int)threadIdx.x < L && slot[threadIdx.x] >= 0)
        bf.gam[(size_t)(r0 + threadIdx.x) * nv + h] = gam[threadIdx.x];
    __syncthreads();
    // columns 0 .. vd - 1: U (right-hand side beta v); then W (beta G k)
    for (int c = threadIdx.x; c < vd + KD; c += blockDim.x) {
        float x[CH];
#pragma unroll
        for (int t = 0; t < CH; t++) {
            float rhs = 0.0f;
            if (t < L && slot[t] >= 0) {
                if (c < vd)
                    rhs = v_staged ? vs[t * vd + c]
                                   : p.conv_out[(size_t)(r0 + t) * conv_dim + 2 * key_dim +
                                                (size_t)h * vd + c];
                else
                    rhs = expf(gam[t]) * ks[t * KP + c - vd];
            }
            x[t] = bt[t] * rhs;
        }
#pragma unroll
        for (int t = 1; t < CH; t++) {
            float acc = x[t];
#pragma unroll
            for (int s = 0; s < t; s++)
                acc = fmaf(-am[t * (CH + 1) + s], x[s], acc);
            x[t] = acc;
        }
#pragma unroll
        for (int t = 0; t < CH; t++)
            if (t < L && slot[t] >= 0) {
                const size_t rh = (size_t)(r0 + t) * nv + h;
                if (c < vd)
                    bf.u[rh * vd + c] = x[t];
                else
                    bf.w[rh * KD + c - vd] = x[t];
            }
    }
}

// The scan's geometry for key heads of KD: a block owns SC_COLS columns
// of one value head's state; a warp SC_WCOLS of them, each column split
// over SC_PARTS lanes of the warp (lane = part * SC_WCOLS + column), lane
// (part, column) keeping rows [part * B, (part + 1) * B) of its column in
// registers, so a read of the column (W S0, q S0) sums its parts by
// shuffles. Rows of W, q and k sit in shared memory with each part's B
// values BP apart (4 more than B), so the eight parts a warp reads hit
// distinct banks.
constexpr int SC_PARTS = 8, SC_WCOLS = 32 / SC_PARTS, SC_WARPS = 8;
static_assert(SC_PARTS == 8 && CH % SC_PARTS == 0, "the output loop reads P eight columns at a time");
constexpr int SC_COLS = SC_WCOLS * SC_WARPS, SC_THREADS = 32 * SC_WARPS;

template <int KD>
struct Scan {
    static constexpr int B = KD / SC_PARTS, BP = B + 4, RS = SC_PARTS * BP;
    // P's rows, padded: the eight rows lanes read at once (four floats a
    // lane) fall in distinct banks
    static constexpr int PMS = CH + 4;
    // W, q and the decayed k of a window's rows, P, D (the corrections),
    // q S0, gamma, k's decay to the window's end
    static constexpr size_t FLOATS = 3 * (size_t)CH * RS + (size_t)CH * PMS +
                                     2 * (size_t)CH * SC_COLS + 2 * CH;
    static constexpr size_t BYTES = FLOATS * sizeof(float);
};

// sum_u row[u] st[u] over this lane's B values of a staged row.
template <int B>
DEV float part_dot(const float *row, const float *st)
{
    float acc = 0.0f;
    if constexpr (B % 4 == 0) {
#pragma unroll
        for (int u = 0; u < B; u += 4) {
            const float4 r = *reinterpret_cast<const float4 *>(row + u);
            acc = fmaf(r.x, st[u], acc);
            acc = fmaf(r.y, st[u + 1], acc);
            acc = fmaf(r.z, st[u + 2], acc);
            acc = fmaf(r.w, st[u + 3], acc);
        }
    } else {
#pragma unroll
        for (int u = 0; u < B; u++)
            acc = fmaf(row[u], st[u], acc);
    }
    return acc;
}

// Eight values, each summed over the SC_PARTS (8) lanes of a column, one
// total to a lane: the lane of part pt gets value 4 b0 + 2 b1 + b2 (b0,
// b1, b2 the bits of pt, low first). A butterfly that halves what it
// sends each step (4, 2, then 1 value), pairing parts in the order an
// all-reduce would (pt ^ 1, then ^ 2, then ^ 4; a + b == b + a), so each
// total has the bits of summing ((p0 + p1) + (p2 + p3)) + ((p4 + p5) +
// (p6 + p7)), whichever lane holds it.
DEV float parts_sum8(const float (&v)[8], int pt)
{
    const bool b0 = pt & 1, b1 = pt & 2, b2 = pt & 4;
    float h[4], g[2];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float send = b0 ? v[i] : v[4 + i], keep = b0 ? v[4 + i] : v[i];
        h[i] = keep + __shfl_xor_sync(0xffffffffu, send, SC_WCOLS);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float send = b1 ? h[i] : h[2 + i], keep = b1 ? h[2 + i] : h[i];
        g[i] = keep + __shfl_xor_sync(0xffffffffu, send, 2 * SC_WCOLS);
    }
    const float send = b2 ? g[0] : g[1], keep = b2 ? g[1] : g[0];
    return keep + __shfl_xor_sync(0xffffffffu, send, 4 * SC_WCOLS);
}

// The windows of one sequence's run (the blockIdx.y-th run of the step),
// state columns blockIdx.z * SC_COLS .. of value head blockIdx.x. (A block
// a row, most returning at once, as the row-after-row rule launches, would
// cost more than the work: each asks for most of an SM's shared memory.)
template <int KD>
__global__ void __launch_bounds__(SC_THREADS) delta_chunk_scan_kernel(cu_delta p)
{
    using G = Scan<KD>;
    constexpr int B = G::B, BP = G::BP, RS = G::RS, PMS = G::PMS;
    extern __shared__ float4 scan_smem[]; // (float4: 16-byte aligned)
    float *ws = reinterpret_cast<float *>(scan_smem), *qs = ws + CH * RS, *ks = qs + CH * RS, *pm = ks + CH * RS;
    float *dm = pm + CH * PMS, *sq = dm + CH * SC_COLS, *gm = sq + CH * SC_COLS, *kdec = gm + CH;
    pdl_trigger();
    pdl_wait();
    int i, e; // run blockIdx.y's rows: i .. e - 1
    find_run(p, (int)blockIdx.y, &i, &e);
    const int h = blockIdx.x;
    if (i < 0)
        return;
    const int lane = threadIdx.x % 32, pt = lane / SC_WCOLS;
    const int lc = threadIdx.x / 32 * SC_WCOLS + lane % SC_WCOLS;
    const int vd = p.v_dim, nv = p.n_v, j = blockIdx.z * SC_COLS + lc;
    const bool act = j < vd;
    const int kh = p.tiled ? h % p.n_k : h / (nv / p.n_k);
    const size_t key_dim = (size_t)p.n_k * KD, conv_dim = 2 * key_dim + (size_t)nv * vd;
    const int s = p.slot[i];
    float *S = p.state + (size_t)s * p.state_floats + p.state_off +
               (size_t)(p.conv_k - 1) * conv_dim + (size_t)h * KD * vd;
    const chunk_bufs bf = bufs_of(p);
    // float4 staging: a part's B values contiguous and every row 16-byte aligned
    const bool vec4 = B % 4 == 0 && conv_dim % 4 == 0 &&
                      ((reinterpret_cast<uintptr_t>(p.conv_out) | reinterpret_cast<uintptr_t>(bf.w)) & 15) == 0;
    float st[B];
    const bool fresh = p.pos[i] == 0;
#pragma unroll
    for (int u = 0; u < B; u++)
        st[u] = act && !fresh ? S[(size_t)(pt * B + u) * vd + j] : 0.0f;
    // W and q of the rows a0 .. a0 + L0 - 1 into shared memory by
    // asynchronous copies (vec4 only): a window's are issued as soon as the
    // window before has read its own, so they land while it computes
    auto stage_wq = [&](int a0, int L0) {
        for (int idx = threadIdx.x; idx < L0 * KD / 4; idx += blockDim.x) {
            const int t = idx / (KD / 4), u = idx % (KD / 4) * 4, at = t * RS + u / B * BP + u % B;
            cp_async16(ws + at, bf.w + ((size_t)(a0 + t) * nv + h) * KD + u, 16);
            cp_async16(qs + at, p.conv_out + (size_t)(a0 + t) * conv_dim + (size_t)kh * KD + u, 16);
        }
        cp_async_commit();
    };
    bool wq_ahead = false;
    for (int a = i; a < e;) {
        const int w0 = a / CH * CH, b = e < w0 + CH ? e : w0 + CH, L = b - a, o = a - w0;
        if ((int)threadIdx.x < L) { // gamma, and k's decay to the window's end
            const float glast = bf.gam[(size_t)(b - 1) * nv + h];
            gm[threadIdx.x] = bf.gam[(size_t)(a + threadIdx.x) * nv + h];
            kdec[threadIdx.x] = expf(__fsub_rn(glast, gm[threadIdx.x]));
        }
        __syncthreads();
        if (vec4) { // four values a load (a part's B values stay together)
            if (!wq_ahead) // W and q: by the copies of the window before, else now
                stage_wq(a, L);
            for (int base = threadIdx.x; base < L * KD / 4; base += STAGE * blockDim.x) {
                float4 k[STAGE];
#pragma unroll
                for (int m = 0; m < STAGE; m++) {
                    const int idx = base + m * blockDim.x, t = idx / (KD / 4), u = idx % (KD / 4) * 4;
                    k[m] = idx < L * KD / 4
                               ? *reinterpret_cast<const float4 *>(p.conv_out + (size_t)(a + t) * conv_dim +
                                                                   key_dim + (size_t)kh * KD + u)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
                for (int m = 0; m < STAGE; m++) {
                    const int idx = base + m * blockDim.x, t = idx / (KD / 4), u = idx % (KD / 4) * 4;
                    if (idx < L * KD / 4) {
                        const float kd = kdec[t];
                        *reinterpret_cast<float4 *>(ks + t * RS + u / B * BP + u % B) =
                            make_float4(k[m].x * kd, k[m].y * kd, k[m].z * kd, k[m].w * kd);
                    }
                }
            }
            cp_async_wait<0>();
        }
        else
            for (int base = threadIdx.x; base < L * KD; base += STAGE * blockDim.x) {
                float w[STAGE], q[STAGE], k[STAGE];
#pragma unroll
                for (int m = 0; m < STAGE; m++) {
                    const int idx = base + m * blockDim.x, t = idx / KD, u = idx % KD;
                    const float *row = p.conv_out + (size_t)(a + t) * conv_dim;
                    const bool in = idx < L * KD;
                    w[m] = in ? bf.w[((size_t)(a + t) * nv + h) * KD + u] : 0.0f;
                    q[m] = in ? row[(size_t)kh * KD + u] : 0.0f;
                    k[m] = in ? row[key_dim + (size_t)kh * KD + u] : 0.0f;
                }
#pragma unroll
                for (int m = 0; m < STAGE; m++) {
                    const int idx = base + m * blockDim.x, t = idx / KD, u = idx % KD;
                    if (idx < L * KD) {
                        const int at = t * RS + u / B * BP + u % B;
                        ws[at] = w[m];
                        qs[at] = q[m];
                        ks[at] = k[m] * kdec[t];
                    }
                }
            }
        { // U, into D: the window's rows of this block's columns, all loads in flight first
            constexpr int RSTEP = SC_THREADS / SC_COLS, NU = CH / RSTEP;
            const int c = threadIdx.x % SC_COLS, jc = blockIdx.z * SC_COLS + c;
            float u[NU];
#pragma unroll
            for (int m = 0; m < NU; m++) {
                const int t = (int)threadIdx.x / SC_COLS + m * RSTEP;
                u[m] = t < L && jc < vd ? bf.u[((size_t)(a + t) * nv + h) * vd + jc] : 0.0f;
            }
#pragma unroll
            for (int m = 0; m < NU; m++) {
                const int t = (int)threadIdx.x / SC_COLS + m * RSTEP;
                if (t < L)
                    dm[t * SC_COLS + c] = u[m];
            }
        }
        for (int base = threadIdx.x; base < L * CH; base += STAGE * blockDim.x) {
            float v[STAGE];
#pragma unroll
            for (int m = 0; m < STAGE; m++) {
                const int idx = base + m * blockDim.x, t = idx / CH, c = idx % CH;
                v[m] = idx < L * CH && c < L ? bf.pm[((size_t)(a + t) * nv + h) * CH + o + c]
                                             : 0.0f;
            }
#pragma unroll
            for (int m = 0; m < STAGE; m++) {
                const int idx = base + m * blockDim.x;
                if (idx < L * CH)
                    pm[idx / CH * PMS + idx % CH] = v[m];
            }
        }
        __syncthreads();
        // D = U - W S0 and q S0, four rows at a time (rows past the window
        // read its last), each column's parts summed, a total a lane
        for (int t0 = 0; t0 < L; t0 += 4) {
            float v[8]; // W S0 of rows t0 .. t0 + 3, then q S0 of them: this lane's part
#pragma unroll
            for (int m = 0; m < 4; m++) {
                const int t = t0 + m < L ? t0 + m : L - 1;
                v[m] = part_dot<B>(ws + t * RS + pt * BP, st);
                v[4 + m] = part_dot<B>(qs + t * RS + pt * BP, st);
            }
            const float sum = parts_sum8(v, pt);
            const int f = (pt & 1) * 4 + (pt & 2) + (pt >> 2 & 1), t = t0 + (f & 3);
            if (t < L) {
                if (f < 4)
                    dm[t * SC_COLS + lc] = __fsub_rn(dm[t * SC_COLS + lc], sum);
                else
                    sq[t * SC_COLS + lc] = sum;
            }
        }
        __syncthreads();
        // W and q read: the next window's copies may land now
        wq_ahead = vec4 && b < e;
        if (wq_ahead)
            stage_wq(b, e - b < CH ? e - b : CH);
        // The outputs: this lane's rows t = pt + SC_PARTS r, each summing
        // P[t][c] D[c] over c = 0 .. t in order, all rows at once so each
        // D[c] is read once (row r takes column c when c <= t, c = cb
        // SC_PARTS + cc: blocks cb < r whole, block r up to cc = pt; the
        // loops unrolled, so only the diagonal blocks test).
        {
            constexpr int NR = CH / SC_PARTS;
            float acc[NR];
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const int t = pt + r * SC_PARTS;
                acc[r] = t < L ? expf(gm[t]) * sq[t * SC_COLS + lc] : 0.0f;
            }
#pragma unroll
            for (int cb = 0; cb < NR; cb++) {
                if (cb * SC_PARTS >= L)
                    break;
                float d[SC_PARTS];
#pragma unroll
                for (int cc = 0; cc < SC_PARTS; cc++)
                    d[cc] = dm[(cb * SC_PARTS + cc) * SC_COLS + lc];
#pragma unroll
                for (int r = cb; r < NR; r++) {
                    // (a row past the window sums what shared memory holds: never stored)
                    const float *pr = pm + (pt + r * SC_PARTS) * PMS + cb * SC_PARTS;
                    const float4 p0 = *reinterpret_cast<const float4 *>(pr);
                    const float4 p1 = *reinterpret_cast<const float4 *>(pr + 4);
                    const float pv[SC_PARTS] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
                    for (int cc = 0; cc < SC_PARTS; cc++)
                        if (r > cb || cc <= pt)
                            acc[r] = fmaf(pv[cc], d[cc], acc[r]);
                }
            }
            if (act)
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    const int t = pt + r * SC_PARTS;
                    if (t < L)
                        p.out[((size_t)(a + t) * nv + h) * vd + j] = acc[r];
                }
        }
        const float dl = expf(gm[L - 1]);
#pragma unroll
        for (int u = 0; u < B; u++)
            st[u] *= dl;
        for (int t = 0; t < L; t++) {
            const float d = dm[t * SC_COLS + lc];
            const float *kr = ks + t * RS + pt * BP;
#pragma unroll
            for (int u = 0; u < B; u++)
                st[u] = fmaf(kr[u], d, st[u]);
        }
        __syncthreads(); // before the next window's rows overwrite shared memory
        a = b;
    }
    if (act)
#pragma unroll
        for (int u = 0; u < B; u++)
            S[(size_t)(pt * B + u) * vd + j] = st[u];
}

template <int KD>
constexpr size_t prep_smem_bytes()
{
    return (2 * (size_t)CH * (KD + 1) + (size_t)CH * (CH + 1) + (size_t)CH * PREP_VS) * sizeof(float);
}

template <int KD>
constexpr size_t chunk_smem_bytes()
{
    return prep_smem_bytes<KD>() > Scan<KD>::BYTES ? prep_smem_bytes<KD>() : Scan<KD>::BYTES;
}

template <int KD>
cudaError_t chunk_rule(const cu_delta *p, cudaStream_t stream)
{
    const size_t prep = prep_smem_bytes<KD>();
    cudaError_t rc = cudaFuncSetAttribute(delta_chunk_prep_kernel<KD>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)prep);
    if (rc == cudaSuccess)
        rc = cudaFuncSetAttribute(delta_chunk_scan_kernel<KD>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)Scan<KD>::BYTES);
    if (rc != cudaSuccess)
        return rc;
    const unsigned windows = (unsigned)((p->n + CH - 1) / CH);
    launch_pdl(delta_chunk_prep_kernel<KD>, dim3((unsigned)p->n_v, windows), dim3(PREP_THREADS),
               prep, stream, *p);
    if (p->n_runs <= 0)
        return cudaGetLastError();
    const unsigned groups = (unsigned)((p->v_dim + SC_COLS - 1) / SC_COLS);
    launch_pdl(delta_chunk_scan_kernel<KD>, dim3((unsigned)p->n_v, (unsigned)p->n_runs, groups),
               dim3(SC_THREADS), Scan<KD>::BYTES, stream, *p);
    return cudaGetLastError();
}

} // namespace

extern "C" size_t delta_chunk_smem(int k_dim)
{
    switch (k_dim) {
    case 16: return chunk_smem_bytes<16>();
    case 32: return chunk_smem_bytes<32>();
    case 64: return chunk_smem_bytes<64>();
    default: return chunk_smem_bytes<128>();
    }
}

extern "C" size_t delta_chunk_floats(int n, int n_v, int k_dim, int v_dim)
{
    return (size_t)n * n_v * ((size_t)v_dim + k_dim + CH + 1);
}

extern "C" cudaError_t launch_delta_chunk_rule(const cu_delta *p, cudaStream_t stream)
{
    switch (p->k_dim) {
    case 16: return chunk_rule<16>(p, stream);
    case 32: return chunk_rule<32>(p, stream);
    case 64: return chunk_rule<64>(p, stream);
    default: return chunk_rule<128>(p, stream);
    }
}
