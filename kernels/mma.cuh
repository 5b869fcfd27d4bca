// Warp-level tensor-core operations below WMMA: ldmatrix and the
// m16n8k16 bf16 mma (C++ only, never included by C).
//
// Why not WMMA: its fragments are opaque, so a kernel loads and stores
// them through generic sequences (a 16x16 tile's load is several shared
// loads and address computations per lane), and an n16 tile is the
// narrowest. mma.sync's fragments are documented registers, ldmatrix
// fills them from shared memory in one instruction per four 8x8 matrices,
// and a column tile is 8 wide: the decode GEMM spends a fraction of the
// instructions per step (docs/decisions/0009-decode-gemm.md).
//
// The fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16",
// "ldmatrix"), with g = lane / 4, t = lane % 4 and a register's element
// of lower index in its low 16 bits:
//   ldmatrix .xN: lanes 8i..8i+7 give the addresses of matrix i's eight
//     16-byte rows (shared memory, 16-byte aligned); register i of lane l
//     gets row l / 4 of matrix i, elements 2t and 2t + 1 (.trans: element
//     l / 4 of rows 2t and 2t + 1).
//   A (16 x 16 bf16, row-major): a[0] row g, k 2t..2t+1; a[1] row g + 8;
//     a[2] row g, k 2t + 8..; a[3] row g + 8, k 2t + 8...
//   B (16 x 8 bf16, "col": stored as 8 rows of 16 k): b[0] k 2t..2t+1 of
//     column g; b[1] k 2t + 8...
//   C, D (16 x 8 f32): d[0], d[1] row g, columns 2t, 2t + 1; d[2], d[3]
//     row g + 8.
// So a 16 x 16 tile of A stored row-major is one ldmatrix .x4 with lane l
// pointing at row l % 16, column 8 (l / 16); two 8-column tiles of B
// stored as [column][k] one .x4 with lane l pointing at column
// (l % 8) + 8 (l / 16), k 8 ((l / 8) % 2).
//
// Under the CPU emulation (tests/gpu/emu/emu_cuda.h defines
// MEMRA_CUDA_EMU) the same calls are warp collectives that move the
// values between lanes with these layouts and sum each product in f32 in
// ascending k, then add c. On the device the order inside one mma is the
// hardware's; memra's bounds assume none.
#ifndef MEMRA_KERNELS_MMA_CUH
#define MEMRA_KERNELS_MMA_CUH

#include <cuda_runtime.h>

#define MMA_DEV __device__ __forceinline__

// Registers of four 8x8 bf16 matrices; p: this lane's row address.
MMA_DEV void ldmatrix_x4(unsigned r[4], const void *p)
{
#if defined(MEMRA_CUDA_EMU)
    emu::ldmatrix(r, 4, p);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#elif defined(__CUDA_ARCH__)
#error "kernels/mma.cuh needs compute capability 8.0 or later"
#else
    (void)r;
    (void)p;
#endif
}

// The same with each 8x8 matrix transposed (.trans): register i of lane
// l gets elements l / 4 of rows 2 (l % 4) and 2 (l % 4) + 1 of matrix i
// (so a [k][n] tile stored row-major loads as B fragments).
MMA_DEV void ldmatrix_x4_trans(unsigned r[4], const void *p)
{
#if defined(MEMRA_CUDA_EMU)
    emu::ldmatrix_trans(r, 4, p);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
    (void)r;
    (void)p;
#endif
}

// Two matrices: lanes 0-15 give the row addresses (the others' p are
// unused but must be valid).
MMA_DEV void ldmatrix_x2(unsigned r[2], const void *p)
{
#if defined(MEMRA_CUDA_EMU)
    emu::ldmatrix(r, 2, p);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(a));
#else
    (void)r;
    (void)p;
#endif
}

// d = A B + d: A 16 x 16, B 16 x 8 (bf16), d 16 x 8 (f32).
MMA_DEV void mma_bf16_16816(float d[4], const unsigned a[4], const unsigned b[2])
{
#if defined(MEMRA_CUDA_EMU)
    emu::mma_bf16_16816(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d;
    (void)a;
    (void)b;
#endif
}

#endif
