#include "kernels/delta_net.cuh"
#include "kernels/delta_chunk.cuh"
#include "kernels/delta_runs.cuh"
#include "kernels/dev_common.cuh"
#include "kernels/launch.cuh"

namespace {

constexpr int CONV_THREADS = 128;

// The CPU reference's cpu_dot (eight interleaved partial sums, combined
// pairwise, then the tail) over a warp: lane j < 8 sums partial j, lane 8
// the tail, lane 0 combines them, in the CPU's order. The result is lane
// 0's; every lane of the warp calls it.
DEV float dot8_warp(const float *a, const float *b, int n, int lane)
{
    const int n8 = n & ~7;
    float acc = 0.0f;
    if (lane < 8)
        for (int i = lane; i < n8; i += 8)
            acc = __fadd_rn(acc, __fmul_rn(a[i], b[i]));
    else if (lane == 8)
        for (int i = n8; i < n; i++)
            acc = __fadd_rn(acc, __fmul_rn(a[i], b[i]));
    float part[9];
#pragma unroll
    for (int j = 0; j < 9; j++)
        part[j] = __shfl_sync(0xffffffffu, acc, j);
    const float s = __fadd_rn(__fadd_rn(__fadd_rn(part[0], part[1]), __fadd_rn(part[2], part[3])),
                              __fadd_rn(__fadd_rn(part[4], part[5]), __fadd_rn(part[6], part[7])));
    return __fadd_rn(s, part[8]);
}

// Row i's run start, as far as the conv sees: how many rows back (1 to
// KC - 1) the first row of another sequence (or the step's start) is;
// KC when all KC - 1 rows before i are i's sequence's, in order.
// slot_at(j), pos_at(j): row i - j's slot (-1 before the step) and position.
template <int KC, class Slot, class Pos>
DEV int rows_in_run(Slot slot_at, Pos pos_at)
{
    int j = 1;
#pragma unroll
    for (; j < KC; j++)
        if (slot_at(j) != slot_at(0) || pos_at(j) != pos_at(0) - j)
            break;
    return j;
}

// Channel ch's input at position pos - j for a row at pos whose run's rows
// are the jj rows up to it: from the step (step_in(j): row i - j's input),
// else from the window (slots oldest first, the last the position before
// the run), else 0 (before position 0).
template <int KC, class In>
DEV float conv_input(In step_in, const float *win, int pos, int jj, int j, size_t ch,
                     size_t conv_dim)
{
    if (j < jj)
        return step_in(j);
    if (pos - jj + 1 == 0 || pos - j < 0)
        return 0.0f;
    return win[(size_t)(KC - 2 - j + jj) * conv_dim + ch];
}

// The causal conv of one channel of CONV_ROWS rows: grid (channel blocks,
// row blocks). Rows are independent (row i reads the inputs of positions
// pos - KC + 1 to pos, from the step or, before the run, from the window),
// so a prompt chunk runs in parallel; delta_window_kernel moves the
// windows after. A thread loads what its rows share at once, their slots,
// positions and the step's inputs of rows i0 - KC + 1 .. i0 + CONV_ROWS -
// 1, then sums each row from those registers (a block a
// row waited out three dependent loads before its sum: 43 us a layer of a
// 512-row chunk of the Qwen3.5-9B shape on an H100).
constexpr int CONV_ROWS = 8;
template <int KC>
__global__ void delta_conv_kernel(cu_delta p)
{
    constexpr int H = KC - 1, NR = CONV_ROWS + H; // r: row i0 - H + r
    pdl_trigger();
    pdl_wait();
    const int i0 = blockIdx.y * CONV_ROWS;
    const size_t conv_dim = 2 * (size_t)p.n_k * p.k_dim + (size_t)p.n_v * p.v_dim;
    const size_t ch = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= conv_dim)
        return;
    int sl[NR], ps[NR];
    float x[NR], w[KC];
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const int i = i0 - H + r;
        const bool in = i >= 0 && i < p.n;
        sl[r] = in ? p.slot[i] : -1;
        ps[r] = in ? p.pos[i] : 0;
        x[r] = in ? p.qkv[(size_t)i * conv_dim + ch] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < KC; k++)
        w[k] = p.conv_w[ch * KC + k];
#pragma unroll
    for (int rr = 0; rr < CONV_ROWS; rr++) {
        const int r = rr + H, i = i0 + rr;
        if (sl[r] < 0) // (and rows past the step)
            continue;
        // rows i - jj + 1 .. i are the run's
        const int jj = rows_in_run<KC>([&](int j) { return sl[r - j]; },
                                       [&](int j) { return ps[r - j]; });
        const float *win = p.state + (size_t)sl[r] * p.state_floats + p.state_off;
        auto input = [&](int j) { // the input at position pos - j
            return conv_input<KC>([&](int b) { return x[r - b]; }, win, ps[r], jj, j, ch,
                                  conv_dim);
        };
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < KC; k++)
            acc = __fadd_rn(acc, __fmul_rn(w[k], input(KC - 1 - k)));
        p.conv_out[(size_t)i * conv_dim + ch] = silu_f(acc);
        // a checkpoint keeps the window as it stands after this row (read
        // from the old window: delta_window_kernel moves it only after this
        // kernel)
        if (p.save && p.save[i] >= 0) {
            float *keep = p.state + (size_t)p.save[i] * p.state_floats + p.state_off;
#pragma unroll
            for (int k = 0; k < KC - 1; k++)
                keep[(size_t)k * conv_dim + ch] = input(KC - 2 - k);
        }
    }
}

// After the conv: the window of each run's last row becomes the inputs of
// its last KC - 1 positions (shifted in place, oldest first).
// A block a row of the step (decode steps: each row ends its run), or,
// with chunk (a prompt chunk: most rows do not), a block a run, which
// finds its last row.
template <int KC>
__global__ void delta_window_kernel(cu_delta p)
{
    pdl_trigger();
    pdl_wait();
    int i = (int)blockIdx.y;
    if (p.chunk) {
        int first, end;
        find_run(p, (int)blockIdx.y, &first, &end);
        i = first < 0 ? -1 : end - 1;
    }
    const size_t conv_dim = 2 * (size_t)p.n_k * p.k_dim + (size_t)p.n_v * p.v_dim;
    const size_t ch = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 0 || p.slot[i] < 0 || ch >= conv_dim || (i + 1 < p.n && p.slot[i + 1] == p.slot[i]))
        return;
    float *win = p.state + (size_t)p.slot[i] * p.state_floats + p.state_off;
    const int jj = rows_in_run<KC>([&](int j) { return i - j < 0 ? -1 : p.slot[i - j]; },
                                   [&](int j) { return p.pos[i - j]; });
    auto step_in = [&](int j) { return p.qkv[(size_t)(i - j) * conv_dim + ch]; };
#pragma unroll
    for (int k = 0; k < KC - 1; k++) // window slot k: the input of position pos - (KC - 2 - k)
        win[(size_t)k * conv_dim + ch] = conv_input<KC>(step_in, win, p.pos[i], jj, KC - 2 - k, ch,
                                                        conv_dim);
    // (slot k reads the old window's slots >= k + 1 only: in place is safe)
}

// q and k of each (row, key head) L2-normalized in place (q also times
// k_dim^-1/2), a warp each, QK_WARPS heads a block, reducing in the CPU's
// order. A lane's values (k_dim <= 128) are loaded with the reductions',
// as in delta_gated_norm_kernel.
constexpr int QK_WARPS = 4;
__global__ void delta_qk_norm_kernel(cu_delta p)
{
    pdl_trigger();
    pdl_wait();
    const int i = blockIdx.x, kh = blockIdx.y * QK_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (kh >= p.n_k || p.slot[i] < 0) // (whole warps)
        return;
    const int kd = p.k_dim;
    const size_t key_dim = (size_t)p.n_k * kd;
    const size_t conv_dim = 2 * key_dim + (size_t)p.n_v * p.v_dim;
    float *q = p.conv_out + (size_t)i * conv_dim + (size_t)kh * kd, *k = q + key_dim;
    float qv[4], kv[4]; // k_dim <= 128 (delta_net_supports)
#pragma unroll
    for (int m = 0; m < 4; m++) {
        const int t = lane + 32 * m;
        qv[m] = t < kd ? q[t] : 0.0f;
        kv[m] = t < kd ? k[t] : 0.0f;
    }
    const float qq = __shfl_sync(0xffffffffu, dot8_warp(q, q, kd, lane), 0);
    const float kk = __shfl_sync(0xffffffffu, dot8_warp(k, k, kd, lane), 0);
    const float iq = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(qq, 1e-6f)));
    const float ik = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(kk, 1e-6f)));
    const float qscale = __fdiv_rn(1.0f, __fsqrt_rn((float)kd));
#pragma unroll
    for (int m = 0; m < 4; m++) {
        const int t = lane + 32 * m;
        if (t < kd) {
            q[t] = __fmul_rn(__fmul_rn(qv[m], iq), qscale);
            k[t] = __fmul_rn(kv[m], ik);
        }
    }
}

// The delta rule over a sequence's rows, the only sequential part of the
// mixer: block (value head h, run start, column group) owns DR_COLS columns
// of the head's state S [KD][v_dim], split over DR_PARTS threads a column,
// thread (j, part) keeping rows [part * KD / 4, (part + 1) * KD / 4) of
// column j in registers for the run. A read of S (S^T k, S^T q) sums each
// part by row mod 4, then the parts in order, then pairwise (the CPU's
// order). Writes the row's raw output o (delta_gated_norm_kernel norms it).
constexpr int DR_PARTS = 4, DR_COLS = 32;

template <int KD>
__global__ void delta_rule_kernel(cu_delta p)
{
    constexpr int B = KD / DR_PARTS;
    pdl_trigger();
    pdl_wait();
    const int h = blockIdx.x, i = blockIdx.y;
    if (!run_start(p, i))
        return;
    __shared__ float qs[KD], ks[KD], part[DR_PARTS][4][DR_COLS], bc[DR_COLS];
    const int lc = threadIdx.x % DR_COLS, pt = threadIdx.x / DR_COLS;
    const int vd = p.v_dim, nv = p.n_v, j = blockIdx.z * DR_COLS + lc;
    const bool act = j < vd;
    const int kh = p.tiled ? h % p.n_k : h / (nv / p.n_k);
    const size_t key_dim = (size_t)p.n_k * KD, conv_dim = 2 * key_dim + (size_t)nv * vd;
    const int s = p.slot[i];
    float *S = p.state + (size_t)s * p.state_floats + p.state_off +
               (size_t)(p.conv_k - 1) * conv_dim + (size_t)h * KD * vd;
    float st[B];
    const bool fresh = p.pos[i] == 0;
#pragma unroll
    for (int u = 0; u < B; u++)
        st[u] = act && !fresh ? S[(size_t)(pt * B + u) * vd + j] : 0.0f;
    const float a = p.a_is_log ? -expf(p.a[h]) : p.a[h];
    for (int r = i; r < p.n && p.slot[r] == s; r++) {
        const float *row = p.conv_out + (size_t)r * conv_dim;
        for (int t = threadIdx.x; t < KD; t += blockDim.x) {
            qs[t] = row[(size_t)kh * KD + t];
            ks[t] = row[key_dim + (size_t)kh * KD + t];
        }
        const float g = __fmul_rn(a, softplus_f(__fadd_rn(p.alpha[(size_t)r * nv + h],
                                                          p.dt_bias[h])));
        const float decay = expf(g);
        __syncthreads();
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < B; u++) {
            st[u] = __fmul_rn(st[u], decay);
            acc[u & 3] = __fadd_rn(acc[u & 3], __fmul_rn(st[u], ks[pt * B + u]));
        }
#pragma unroll
        for (int m = 0; m < 4; m++)
            part[pt][m][lc] = acc[m];
        __syncthreads();
        if (pt == 0) {
            float sm[4];
#pragma unroll
            for (int m = 0; m < 4; m++)
                sm[m] = __fadd_rn(__fadd_rn(__fadd_rn(part[0][m][lc], part[1][m][lc]),
                                            part[2][m][lc]),
                                  part[3][m][lc]);
            const float kv = __fadd_rn(__fadd_rn(sm[0], sm[1]), __fadd_rn(sm[2], sm[3]));
            const float v = act ? row[2 * key_dim + (size_t)h * vd + j] : 0.0f;
            const float beta = sigmoid_f(p.beta[(size_t)r * nv + h]);
            bc[lc] = __fmul_rn(__fsub_rn(v, kv), beta);
        }
        __syncthreads();
        const float delta = bc[lc];
        acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
#pragma unroll
        for (int u = 0; u < B; u++) {
            st[u] = __fadd_rn(st[u], __fmul_rn(ks[pt * B + u], delta));
            acc[u & 3] = __fadd_rn(acc[u & 3], __fmul_rn(st[u], qs[pt * B + u]));
        }
#pragma unroll
        for (int m = 0; m < 4; m++)
            part[pt][m][lc] = acc[m];
        __syncthreads();
        if (pt == 0 && act) {
            float sm[4];
#pragma unroll
            for (int m = 0; m < 4; m++)
                sm[m] = __fadd_rn(__fadd_rn(__fadd_rn(part[0][m][lc], part[1][m][lc]),
                                            part[2][m][lc]),
                                  part[3][m][lc]);
            p.out[((size_t)r * nv + h) * vd + j] =
                __fadd_rn(__fadd_rn(sm[0], sm[1]), __fadd_rn(sm[2], sm[3]));
        }
        // the next row writes qs and ks only after every thread has passed
        // the barrier above, and part only after the next row's first one
        if (act && p.save && p.save[r] >= 0) {
            // a checkpoint keeps S as it stands after this row
            float *keep = p.state + (size_t)p.save[r] * p.state_floats + p.state_off +
                          (size_t)(p.conv_k - 1) * conv_dim + (size_t)h * KD * vd;
#pragma unroll
            for (int u = 0; u < B; u++)
                keep[(size_t)(pt * B + u) * vd + j] = st[u];
        }
    }
    if (act)
#pragma unroll
        for (int u = 0; u < B; u++)
            S[(size_t)(pt * B + u) * vd + j] = st[u];
}

// out = rmsnorm(o) * norm * silu(z) per (row, value head), in place: a
// warp a (row, head), GN_WARPS heads a block, reducing in the CPU's order.
// A lane's values (up to GN_KEEP) are loaded with the reduction's, so a
// warp waits out one round trip, not three (a block of a head took 23 us a
// layer of a 512-row chunk of the Qwen3.5-9B shape on an H100).
constexpr int GN_WARPS = 4, GN_KEEP = 4;
__global__ void delta_gated_norm_kernel(cu_delta p)
{
    pdl_trigger();
    pdl_wait();
    const int i = blockIdx.x, h = blockIdx.y * GN_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (h >= p.n_v || p.slot[i] < 0) // (whole warps)
        return;
    const int vd = p.v_dim;
    float *o = p.out + ((size_t)i * p.n_v + h) * vd;
    const float *z = p.z + ((size_t)i * p.n_v + h) * vd;
    const bool keep = vd <= 32 * GN_KEEP;
    float ov[GN_KEEP], zv[GN_KEEP], nw[GN_KEEP];
#pragma unroll
    for (int m = 0; m < GN_KEEP; m++) {
        const int t = lane + 32 * m;
        const bool in = keep && t < vd;
        ov[m] = in ? o[t] : 0.0f;
        zv[m] = in ? z[t] : 0.0f;
        nw[m] = in ? p.norm[t] : 0.0f;
    }
    const float oo = __shfl_sync(0xffffffffu, dot8_warp(o, o, vd, lane), 0);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(oo, (float)vd), p.eps)));
    if (keep) {
#pragma unroll
        for (int m = 0; m < GN_KEEP; m++) {
            const int t = lane + 32 * m;
            if (t < vd)
                o[t] = __fmul_rn(__fmul_rn(__fmul_rn(ov[m], inv), nw[m]), silu_f(zv[m]));
        }
    } else {
        for (int t = lane; t < vd; t += 32)
            o[t] = __fmul_rn(__fmul_rn(__fmul_rn(o[t], inv), p.norm[t]), silu_f(z[t]));
    }
}

template <int KD>
cudaError_t launch_rule(const cu_delta *p, cudaStream_t stream)
{
    const unsigned groups = (unsigned)((p->v_dim + DR_COLS - 1) / DR_COLS);
    launch_pdl(delta_rule_kernel<KD>, dim3((unsigned)p->n_v, (unsigned)p->n, groups),
               dim3(DR_COLS * DR_PARTS), 0, stream, *p);
    return cudaGetLastError();
}

template <int KC>
void launch_conv(const cu_delta *p, unsigned ch_blocks, cudaStream_t stream)
{
    const dim3 grid(ch_blocks, (unsigned)((p->n + CONV_ROWS - 1) / CONV_ROWS));
    launch_pdl(delta_conv_kernel<KC>, grid, dim3(CONV_THREADS), 0, stream, *p);
    const dim3 wgrid(ch_blocks, p->chunk ? (unsigned)p->n_runs : (unsigned)p->n);
    if (wgrid.y > 0)
        launch_pdl(delta_window_kernel<KC>, wgrid, dim3(CONV_THREADS), 0, stream, *p);
}

} // namespace

extern "C" int delta_net_supports(int k_dim, int v_dim)
{
    return (k_dim == 16 || k_dim == 32 || k_dim == 64 || k_dim == 128) && v_dim >= 1 &&
           v_dim <= 1024;
}

extern "C" cudaError_t launch_delta_net(const cu_delta *p, cudaStream_t stream)
{
    if (p->n <= 0)
        return cudaSuccess;
    if (!delta_net_supports(p->k_dim, p->v_dim) || p->conv_k < 2 || p->conv_k > 4 ||
        p->n_k <= 0 || p->n_v % p->n_k != 0 || p->n > 65535 || p->n_v > 65535)
        return cudaErrorInvalidValue;
    const size_t conv_dim = 2 * (size_t)p->n_k * p->k_dim + (size_t)p->n_v * p->v_dim;
    const unsigned ch_blocks = (unsigned)((conv_dim + CONV_THREADS - 1) / CONV_THREADS);
    switch (p->conv_k) {
    case 2: launch_conv<2>(p, ch_blocks, stream); break;
    case 3: launch_conv<3>(p, ch_blocks, stream); break;
    default: launch_conv<4>(p, ch_blocks, stream); break;
    }
    launch_pdl(delta_qk_norm_kernel,
               dim3((unsigned)p->n, (unsigned)((p->n_k + QK_WARPS - 1) / QK_WARPS)),
               dim3(32 * QK_WARPS), 0, stream, *p);
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess)
        return rc;
    if (p->chunk)
        rc = launch_delta_chunk_rule(p, stream);
    else switch (p->k_dim) {
    case 16: rc = launch_rule<16>(p, stream); break;
    case 32: rc = launch_rule<32>(p, stream); break;
    case 64: rc = launch_rule<64>(p, stream); break;
    default: rc = launch_rule<128>(p, stream); break;
    }
    if (rc != cudaSuccess)
        return rc;
    launch_pdl(delta_gated_norm_kernel,
               dim3((unsigned)p->n, (unsigned)((p->n_v + GN_WARPS - 1) / GN_WARPS)),
               dim3(32 * GN_WARPS), 0, stream, *p);
    return cudaGetLastError();
}
