#include "kernels/embed.cuh"
#include "kernels/weight_decode.cuh"

// ---- kernels ----

namespace {

constexpr int EMBED_THREADS = 256;

// One block per token; threads take the row's units in turn.
template <int F>
__global__ void embed_kernel(const uint8_t *__restrict__ w, size_t stride, size_t soff,
                             int64_t cols, const int32_t *__restrict__ tokens, float scale,
                             float *__restrict__ out)
{
    constexpr int U = WFmt<F>::U;
    const uint8_t *row = w + (int64_t)tokens[blockIdx.x] * (int64_t)stride;
    float *o = out + (int64_t)blockIdx.x * cols;
    const int64_t nu = wfmt_units<F>(cols);
    for (int64_t u = threadIdx.x; u < nu; u += blockDim.x) {
        float v[U];
        WFmt<F>::load(row, soff, u, v);
        const int64_t c0 = u * U;
#pragma unroll
        for (int j = 0; j < U; j++)
            if (c0 + j < cols)
                o[c0 + j] = scale == 1.0f ? v[j] : __fmul_rn(v[j], scale);
    }
}

template <int F>
void embed_launch(const cu_matrix *t, const int32_t *tokens, int n, float scale, float *out,
                  cudaStream_t s)
{
    embed_kernel<F><<<n, EMBED_THREADS, 0, s>>>(static_cast<const uint8_t *>(t->data), t->stride,
                                                t->scale_off, t->cols, tokens, scale, out);
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_embed(const cu_matrix *t, const int32_t *tokens, int n, float scale,
                                    float *out, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    switch (t->fmt) {
    case CW_F32: embed_launch<CW_F32>(t, tokens, n, scale, out, stream); break;
    case CW_F16: embed_launch<CW_F16>(t, tokens, n, scale, out, stream); break;
    case CW_BF16: embed_launch<CW_BF16>(t, tokens, n, scale, out, stream); break;
    case CW_Q8_0: embed_launch<CW_Q8_0>(t, tokens, n, scale, out, stream); break;
    case CW_Q4_0: embed_launch<CW_Q4_0>(t, tokens, n, scale, out, stream); break;
    case CW_Q4_K: embed_launch<CW_Q4_K>(t, tokens, n, scale, out, stream); break;
    case CW_Q5_K: embed_launch<CW_Q5_K>(t, tokens, n, scale, out, stream); break;
    case CW_Q6_K: embed_launch<CW_Q6_K>(t, tokens, n, scale, out, stream); break;
    case CW_NVFP4: embed_launch<CW_NVFP4>(t, tokens, n, scale, out, stream); break;
    case CW_MXFP8: embed_launch<CW_MXFP8>(t, tokens, n, scale, out, stream); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
