/* The gated delta rule of a prompt chunk in the chunked form: rows in
 * windows of DELTA_WINDOW, the state read and written once a window.
 *
 * Within a window's rows of one sequence (a segment, state S0 before it),
 * with gamma_t the sum of the log decays g up to row t in the segment and
 * G_t = exp(gamma_t), the rule's corrections delta_t solve a lower
 * triangular system:
 *     (I + A) D = B V - B G K S0,   A[t][s] = beta_t exp(gamma_t - gamma_s) k_t.k_s  (s < t)
 * so D = U - W S0 with U = (I + A)^-1 B V and W = (I + A)^-1 B G K, which
 * do not depend on S0: every window's U and W are computed at once
 * (delta_chunk_prep_kernel, forward substitution a column a thread).
 * Then, window after window (delta_chunk_scan_kernel, a block per value
 * head and group of state columns, the state in registers):
 *     D = U - W S0
 *     o_t = G_t q_t.S0 + sum_{s <= t} exp(gamma_t - gamma_s) (q_t.k_s) delta_s
 *     S = G_last S0 + sum_s exp(gamma_last - gamma_s) k_s delta_s^T
 * The same rule as the recurrent form, summed in another order: its
 * rounding differs from the CPU reference's within the kernel check's
 * bound, and a row's bytes depend on where the window boundaries fall,
 * which is the step's rows (a prefill step's contract, backend.h). */
#ifndef MEMRA_KERNELS_DELTA_CHUNK_CUH
#define MEMRA_KERNELS_DELTA_CHUNK_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include "kernels/delta_net.cuh"

#ifdef __cplusplus
extern "C" {
#endif

enum { DELTA_WINDOW = 64 };

/* Bytes of shared memory a block of the chunked rule asks for (a device
 * that offers fewer runs the rule row after row). */
size_t delta_chunk_smem(int k_dim);
/* Floats of scratch the chunked rule needs for n rows. */
size_t delta_chunk_floats(int n, int n_v, int k_dim, int v_dim);
/* The rule of p's rows (after the conv and the q/k norms), into p->out. */
cudaError_t launch_delta_chunk_rule(const cu_delta *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
