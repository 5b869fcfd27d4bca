// The mat-vec's single-token instances (one input row: decode), apart from
// the batched and grouped ones in kernels/matmul.cu so that the two
// translation units compile in parallel. Device code: kernels/matmul_kernels.cuh.
#include "kernels/matmul_kernels.cuh"

namespace {

DEV float *mv_stage_smem()
{
    extern __shared__ float mv_stage[];
    return mv_stage;
}

// The quant formats stage x in shared memory when it fits (MV_STAGE_MAX),
// else read it from registers, as the float formats always do.
template <int F, int R, bool AX>
void mv_launch(const MVArgs &a, dim3 grid, int sm_count, bool one_pass, cudaStream_t s)
{
    if constexpr (!WFmt<F>::DIRECT) {
        const size_t sm = mv_stage_bytes<F>(a.cols);
        if (sm <= MV_STAGE_MAX) {
            static std::atomic<uint64_t> memo{0};
            auto *k = matvec_kernel<F, R, 1, AX, true>;
            if (sm > 48 * 1024 &&
                cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm) !=
                    cudaSuccess)
                return; // launch_matvec reports it (cudaGetLastError)
            grid = mv_grid(k, sm, grid, sm_count, one_pass, memo);
            launch_pdl(matvec_kernel<F, R, 1, AX, true>, grid, dim3(MV_THREADS), sm, s, a);
            return;
        }
    }
    static std::atomic<uint64_t> memo{0};
    grid = mv_grid(matvec_kernel<F, R, 1, AX, false>, 0, grid, sm_count, one_pass, memo);
    launch_pdl(matvec_kernel<F, R, 1, AX, false>, grid, dim3(MV_THREADS), 0, s, a);
}

// The instance for R: 1, 2 or 4 with aligned x, 1 or 2 else.
template <int F>
void mv_pick(const MVArgs &a, dim3 grid, int r, bool ax, int sms, bool one, cudaStream_t s)
{
    if (!ax) {
        if (r == 1)
            mv_launch<F, 1, false>(a, grid, sms, one, s);
        else
            mv_launch<F, 2, false>(a, grid, sms, one, s);
    } else if (r == 1) {
        mv_launch<F, 1, true>(a, grid, sms, one, s);
    } else if (r == 2) {
        mv_launch<F, 2, true>(a, grid, sms, one, s);
    } else {
        mv_launch<F, 4, true>(a, grid, sms, one, s);
    }
}

} // namespace

void memra_mv::launch_single(int fmt, const MVArgs &a, dim3 grid, int r, bool ax, int sm_count,
                             bool one_pass, cudaStream_t s)
{
    switch (fmt) {
    case CW_F32: mv_pick<CW_F32>(a, grid, r, ax, sm_count, one_pass, s); break;
    case CW_F16: mv_pick<CW_F16>(a, grid, r, ax, sm_count, one_pass, s); break;
    case CW_BF16: mv_pick<CW_BF16>(a, grid, r, ax, sm_count, one_pass, s); break;
    case CW_Q8_0: mv_pick<CW_Q8_0>(a, grid, r, ax, sm_count, one_pass, s); break;
    case CW_Q4_0: mv_pick<CW_Q4_0>(a, grid, r, ax, sm_count, one_pass, s); break;
    case CW_Q4_K: mv_pick<CW_Q4_K>(a, grid, r, ax, sm_count, one_pass, s); break;
    case CW_Q5_K: mv_pick<CW_Q5_K>(a, grid, r, ax, sm_count, one_pass, s); break;
    case CW_Q6_K: mv_pick<CW_Q6_K>(a, grid, r, ax, sm_count, one_pass, s); break;
    case CW_NVFP4: mv_pick<CW_NVFP4>(a, grid, r, ax, sm_count, one_pass, s); break;
    case CW_MXFP8: mv_pick<CW_MXFP8>(a, grid, r, ax, sm_count, one_pass, s); break;
    default: break; // launch_matvec checked the format
    }
}
