#include "kernels/dev_common.cuh"
#include "kernels/gather_cols.cuh"
#include "kernels/launch.cuh"

// ---- kernel ----
//
// One thread an output value, the grid striding over the rows: each
// thread reads its column's map entry and, where it names one, that
// source value (a copy: the bytes the source holds).

namespace {

constexpr int GC_THREADS = 256;

__global__ void gather_cols_kernel(const float *__restrict__ src, int n, int64_t n_src,
                                   const int32_t *__restrict__ map, int64_t n_dst, float fill,
                                   float *__restrict__ out)
{
    pdl_trigger();
    pdl_wait();
    const size_t total = (size_t)n * (size_t)n_dst;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const size_t r = i / (size_t)n_dst, c = i % (size_t)n_dst;
        const int32_t j = map[c];
        out[i] = j >= 0 ? src[r * (size_t)n_src + (size_t)j] : fill;
    }
}

} // namespace

// ---- launcher ----

extern "C" cudaError_t launch_gather_cols(const float *src, int n, int64_t n_src,
                                          const int32_t *map, int64_t n_dst, float fill,
                                          float *out, cudaStream_t stream)
{
    const size_t total = (size_t)(n > 0 ? n : 0) * (size_t)(n_dst > 0 ? n_dst : 0);
    if (total == 0)
        return cudaSuccess;
    size_t blocks = (total + GC_THREADS - 1) / GC_THREADS;
    if (blocks > 65536)
        blocks = 65536;
    launch_pdl(gather_cols_kernel, dim3((unsigned)blocks), dim3(GC_THREADS), 0, stream, src, n,
               n_src, map, n_dst, fill, out);
    return cudaGetLastError();
}
