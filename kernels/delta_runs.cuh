// The runs of a DeltaNet step's rows (C++ only): rows of one sequence are
// consecutive in a step, a run; kernels that give a block to each run (a
// prompt chunk's scan, its conv windows) find theirs here.
#ifndef MEMRA_KERNELS_DELTA_RUNS_CUH
#define MEMRA_KERNELS_DELTA_RUNS_CUH

#include "kernels/delta_net.cuh"
#include "kernels/dev_common.cuh"

// Whether row i starts its sequence's run of rows in the step.
DEV bool run_start(const cu_delta &p, int i)
{
    return p.slot[i] >= 0 && (i == 0 || p.slot[i] != p.slot[i - 1]);
}

// The y-th run of the step: its first row and one past its last (first
// -1 when the step has fewer runs). The whole block calls it (blockDim.x a
// multiple of 32): each thread reads rows tid, tid + blockDim.x, ..., so
// the loads are independent; one thread walking the slots row after row
// waits out a load a row (about 40 us for 512 rows).
DEV void find_run(const cu_delta &p, int y, int *first, int *end)
{
    __shared__ int s_first, s_end, warp_n[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (threadIdx.x == 0) {
        s_first = -1;
        s_end = p.n;
    }
    __syncthreads();
    // starts counted in chunks of blockDim.x rows: each start's index is
    // the starts before its chunk, before its warp and before its lane
    for (int base = 0, before = 0; base < p.n; base += blockDim.x) {
        const int r = base + (int)threadIdx.x;
        const bool f = r < p.n && run_start(p, r);
        const unsigned bal = __ballot_sync(0xffffffffu, f);
        if (lane == 0)
            warp_n[warp] = __popc(bal);
        __syncthreads();
        int at = before + __popc(bal & ((1u << lane) - 1u)), total = 0;
        for (int w = 0; w < nw; w++) {
            at += w < warp ? warp_n[w] : 0;
            total += warp_n[w];
        }
        if (f && at == y)
            s_first = r;
        before += total;
        __syncthreads(); // s_first seen by all; warp_n free for the next chunk
        if (s_first >= 0)
            break;
    }
    if (s_first >= 0) {
        const int s = p.slot[s_first];
        for (int r = s_first + 1 + (int)threadIdx.x; r < p.n; r += blockDim.x)
            if (p.slot[r] != s) {
                atomicMin(&s_end, r);
                break;
            }
    }
    __syncthreads();
    *first = s_first;
    *end = s_end;
    __syncthreads(); // before a later call resets them
}

#endif
