#include "kernels/delta_chunk.cuh"
#include "kernels/dev_common.cuh"
#include "kernels/launch.cuh"

namespace {

constexpr int CH = DELTA_WINDOW;
constexpr int PREP_THREADS = 256;
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
    float *ks = prep_smem, *qs = ks + CH * KP, *am = qs + CH * KP;
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
    // the pairs s <= t (what the substitution and the scan read), pair
    // idx = t (t + 1) / 2 + s
    for (int idx = threadIdx.x; idx < L * (L + 1) / 2; idx += blockDim.x) {
        int t = (int)((sqrtf(8.0f * (float)idx + 1.0f) - 1.0f) * 0.5f);
        t += (t + 1) * (t + 2) / 2 <= idx; // the float root can fall one short
        t -= t * (t + 1) / 2 > idx;
        const int s = idx - t * (t + 1) / 2;
        const bool same = slot[t] >= 0 && slot[s] == slot[t];
        float kk = 0.0f, qk = 0.0f;
        if (same)
            for (int u = 0; u < KD; u++) {
                kk = fmaf(ks[t * KP + u], ks[s * KP + u], kk);
                qk = fmaf(qs[t * KP + u], ks[s * KP + u], qk);
            }
        const float dec = same ? expf(__fsub_rn(gam[t], gam[s])) : 0.0f;
        am[t * (CH + 1) + s] = bt[t] * dec * kk; // (s == t: unread)
        if (slot[t] >= 0)
            bf.pm[((size_t)(r0 + t) * nv + h) * CH + s] = dec * qk;
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
                    rhs = p.conv_out[(size_t)(r0 + t) * conv_dim + 2 * key_dim + (size_t)h * vd + c];
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
constexpr int SC_COLS = SC_WCOLS * SC_WARPS, SC_THREADS = 32 * SC_WARPS;

template <int KD>
struct Scan {
    static constexpr int B = KD / SC_PARTS, BP = B + 4, RS = SC_PARTS * BP;
    static constexpr int PMS = CH + 1; // P's rows, padded: lanes read eight rows at once
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

// The sum of a value over the SC_PARTS lanes of a column (the same bits in
// each: every step adds the same pair).
DEV float parts_sum(float v)
{
#pragma unroll
    for (int m = SC_WCOLS; m < 32; m *= 2)
        v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
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
    __shared__ int run_at;
    pdl_trigger();
    pdl_wait();
    if (threadIdx.x == 0) { // the first row of run blockIdx.y
        run_at = -1;
        for (int r = 0, k = -1; r < p.n; r++)
            if (p.slot[r] >= 0 && (r == 0 || p.slot[r] != p.slot[r - 1]) && ++k == (int)blockIdx.y) {
                run_at = r;
                break;
            }
    }
    __syncthreads();
    const int h = blockIdx.x, i = run_at;
    if (i < 0)
        return;
    const int lane = threadIdx.x % 32, pt = lane / SC_WCOLS;
    const int lc = threadIdx.x / 32 * SC_WCOLS + lane % SC_WCOLS;
    const int vd = p.v_dim, nv = p.n_v, j = blockIdx.z * SC_COLS + lc;
    const bool act = j < vd;
    const int kh = p.tiled ? h % p.n_k : h / (nv / p.n_k);
    const size_t key_dim = (size_t)p.n_k * KD, conv_dim = 2 * key_dim + (size_t)nv * vd;
    const int s = p.slot[i];
    int e = i + 1;
    while (e < p.n && p.slot[e] == s)
        e++;
    float *S = p.state + (size_t)s * p.state_floats + p.state_off +
               (size_t)(p.conv_k - 1) * conv_dim + (size_t)h * KD * vd;
    const chunk_bufs bf = bufs_of(p);
    float st[B];
    const bool fresh = p.pos[i] == 0;
#pragma unroll
    for (int u = 0; u < B; u++)
        st[u] = act && !fresh ? S[(size_t)(pt * B + u) * vd + j] : 0.0f;
    for (int a = i; a < e;) {
        const int w0 = a / CH * CH, b = e < w0 + CH ? e : w0 + CH, L = b - a, o = a - w0;
        if ((int)threadIdx.x < L) { // gamma, and k's decay to the window's end
            const float glast = bf.gam[(size_t)(b - 1) * nv + h];
            gm[threadIdx.x] = bf.gam[(size_t)(a + threadIdx.x) * nv + h];
            kdec[threadIdx.x] = expf(__fsub_rn(glast, gm[threadIdx.x]));
        }
        __syncthreads();
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
        for (int t = threadIdx.x / SC_COLS; t < L; t += SC_THREADS / SC_COLS) { // U, into D
            const int c = threadIdx.x % SC_COLS, jc = blockIdx.z * SC_COLS + c;
            dm[t * SC_COLS + c] = jc < vd ? bf.u[((size_t)(a + t) * nv + h) * vd + jc] : 0.0f;
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
        // D = U - W S0 and q S0, two rows at a time (a row past the window
        // reads its last), each column's parts summed
        for (int t0 = 0; t0 < L; t0 += 2) {
            const int t1 = t0 + 1 < L ? t0 + 1 : t0;
            const float w0 = parts_sum(part_dot<B>(ws + t0 * RS + pt * BP, st));
            const float q0 = parts_sum(part_dot<B>(qs + t0 * RS + pt * BP, st));
            const float w1 = parts_sum(part_dot<B>(ws + t1 * RS + pt * BP, st));
            const float q1 = parts_sum(part_dot<B>(qs + t1 * RS + pt * BP, st));
            if (pt == 0) {
                dm[t0 * SC_COLS + lc] = __fsub_rn(dm[t0 * SC_COLS + lc], w0);
                sq[t0 * SC_COLS + lc] = q0;
                if (t1 != t0) {
                    dm[t1 * SC_COLS + lc] = __fsub_rn(dm[t1 * SC_COLS + lc], w1);
                    sq[t1 * SC_COLS + lc] = q1;
                }
            }
        }
        __syncthreads();
        for (int t = pt; t < L; t += SC_PARTS) {
            float out = expf(gm[t]) * sq[t * SC_COLS + lc];
            for (int c = 0; c <= t; c++)
                out = fmaf(pm[t * PMS + c], dm[c * SC_COLS + lc], out);
            if (act)
                p.out[((size_t)(a + t) * nv + h) * vd + j] = out;
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
    return (2 * (size_t)CH * (KD + 1) + (size_t)CH * (CH + 1)) * sizeof(float);
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
