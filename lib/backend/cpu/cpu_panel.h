/* The panel layout of the fast path's int8 kernels
 * (docs/decisions/0018-cpu-fast-path.md, "Panels").
 *
 * A Q8_0, Q4_0, Q4_K, Q5_K or Q6_K row whose length is a multiple of 512 is repacked
 * once at load into panels of 512 values: 16 blocks of 32 (the blocks of x's
 * int8 quantization). In a panel the quants are stored by step: step s
 * (0..7) is 64 values, lane l (4 values) holding values 4s..4s+3 of block
 * l. A vpdpbusd per step then sums each block's 32 products in its own
 * int32 lane, exactly, and the block's scales apply once to that sum
 * instead of once per 4-value lane. x is put in the same order per call
 * (cpu_panel_x). A panel's bytes:
 *
 *   Q8_0 (544): f16 d[16]; int8 q[8 steps][64]
 *   Q4_0 (288): f16 d[16]; nibbles[4][64] as Q4_K's (q, the value is q - 8)
 *   Q4_K (296): f16 d0, dmin0, d1, dmin1 (super-blocks 0 and 1); uint8
 *               sc[16], m[16] (block l: super-block l / 8, sub-block l % 8);
 *               nibbles[4][64]: byte i of vector k holds step 2k's value in
 *               its low nibble and step 2k + 1's in its high one
 *   Q5_K (360): Q4_K's 296, then top[64]: byte i holds step s's fifth bit
 *               at bit s
 *   Q6_K (420): int8 sca[16], scb[16] (block l's scales for its values
 *               0-15 and 16-31); f16 d0, d1; nibbles[4][64] as Q4_K's (the
 *               low 4 bits of q + 32, 0..63); top[2][64]: byte i of vector h
 *               holds steps 4h..4h+3's top two bits at bits 0, 2, 4, 6
 */
#ifndef MEMRA_BACKEND_CPU_CPU_PANEL_H
#define MEMRA_BACKEND_CPU_CPU_PANEL_H

#include <stddef.h>
#include <stdint.h>

#include "format/dtype.h"

enum { CPU_PANEL = 512, CPU_PANEL_BLOCKS = 16 };

/* Bytes of one panel of type t; 0 when t has no panel layout. */
size_t cpu_panel_bytes(dtype t);
/* Whether a row of n values of type t can be repacked into panels. */
int cpu_panel_fits(dtype t, int64_t n);
/* One stored row (n values of type t, n a multiple of CPU_PANEL) into
 * its panels at dst (n / CPU_PANEL * cpu_panel_bytes(t) bytes). */
void cpu_panel_pack_row(dtype t, const uint8_t *src, int64_t n, uint8_t *dst);
/* x's int8 row (n values, n a multiple of CPU_PANEL) in the panel order;
 * and, per 32-block b, lo[b] = the sum of its first 16 values. */
void cpu_panel_x(const int8_t *q, int64_t n, int8_t *p, int32_t *lo);

#endif
