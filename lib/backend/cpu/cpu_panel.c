/* Repacking into the panel layout (cpu_panel.h): load-time code, written
 * for clarity. Each format's integer fields are read as its dequantizer
 * (format/dequant_kquant.c) reads them and written in panel order. */
#include "backend/cpu/cpu_panel.h"

#include <string.h>

#include "backend/cpu/cpu_fast.h"
#include "format/dequant.h"

size_t cpu_panel_bytes(dtype t)
{
    switch (t) {
    case DT_Q8_0: return 544;
    case DT_Q4_0: return 288;
    case DT_Q4_K: return 296;
    case DT_Q5_K: return 360;
    case DT_Q6_K: return 420;
    default: return 0;
    }
}

int cpu_panel_fits(dtype t, int64_t n) { return cpu_panel_bytes(t) > 0 && n > 0 && n % CPU_PANEL == 0; }

/* Where value v (0..31) of block l at step s sits: s = v / 4, byte
 * l * 4 + v % 4 of the step. */
static int step_byte(int l, int v) { return l * 4 + v % 4; }

/* A K-quant super-block's 256 quants as q[sub-block][value], read a
 * whole group of bytes at a time (load time: 4.8 GB of an 8B model). */

/* Q4_K (q5 = 0) and Q5_K: sub-block 2g takes the low nibbles of the
 * group's 32 bytes, 2g + 1 the high ones; Q5_K's fifth bit of value i of
 * sub-block j is bit j of qh[i]. */
static void k45_quants(const uint8_t *sb, int q5, uint8_t q[8][32])
{
    const uint8_t *qs = sb + (q5 ? 48 : 16), *qh = sb + 16;
    for (int g = 0; g < 4; g++)
        for (int i = 0; i < 32; i++) {
            uint8_t b = qs[32 * g + i];
            q[2 * g][i] = b & 0x0F;
            q[2 * g + 1][i] = b >> 4;
        }
    if (q5)
        for (int j = 0; j < 8; j++)
            for (int i = 0; i < 32; i++)
                q[j][i] |= (uint8_t)(((qh[i] >> j) & 1) << 4);
}

/* Q6_K: per half h, ql bytes 0-31 and 32-63 give low then high nibbles,
 * qh bytes 0-31 the top two bits at shifts 0, 2, 4, 6 for the half's four
 * 32-value sub-blocks; 0..63 (the value is q - 32). */
static void q6k_quants(const uint8_t *sb, uint8_t q[8][32])
{
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = sb + 64 * h, *qh = sb + 128 + 32 * h;
        for (int l = 0; l < 32; l++) {
            q[4 * h][l] = (uint8_t)((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
            q[4 * h + 1][l] = (uint8_t)((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
            q[4 * h + 2][l] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            q[4 * h + 3][l] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* The 4-bit fields of a panel's 512 quants (q[l][v]: block l's value v)
 * as nibble vectors: vector k, lane l: step 2k's 4 values in the low
 * nibbles, step 2k + 1's in the high ones (4 bytes at a time: the fields
 * are below 16, so nothing carries between bytes). */
static void put_nibbles(uint8_t *dst, const uint8_t q[16][32])
{
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < 16; l++) {
            uint32_t lo = rd32(&q[l][8 * k]) & 0x0F0F0F0Fu, hi = rd32(&q[l][8 * k + 4]) & 0x0F0F0F0Fu;
            wr32(dst + 64 * k + step_byte(l, 0), lo | (hi << 4));
        }
}

static void pack_q8_0(const uint8_t *src, uint8_t *dst)
{
    for (int l = 0; l < 16; l++) {
        const uint8_t *blk = src + 34 * l;
        memcpy(dst + 2 * l, blk, 2);
        for (int s = 0; s < 8; s++)
            memcpy(dst + 32 + 64 * s + step_byte(l, 0), blk + 2 + 4 * s, 4);
    }
}

static void pack_q4_0(const uint8_t *src, uint8_t *dst)
{
    uint8_t q[16][32];
    for (int l = 0; l < 16; l++) {
        const uint8_t *blk = src + 18 * l;
        memcpy(dst + 2 * l, blk, 2);
        for (int v = 0; v < 16; v++) {
            q[l][v] = blk[2 + v] & 0x0F;
            q[l][v + 16] = blk[2 + v] >> 4;
        }
    }
    put_nibbles(dst + 32, q);
}

/* Q4_K (Q5 = 0) and Q5_K (Q5 = 1): the scales and mins unpacked to bytes,
 * the low 4 bits as nibble vectors, Q5_K's fifth bits as one vector whose
 * byte b holds step s's bit at bit s. */
static void pack_k45(const uint8_t *src, uint8_t *dst, int q5)
{
    uint8_t q[16][32];
    for (int k = 0; k < 2; k++) {
        const uint8_t *sb = src + (q5 ? 176 : 144) * k;
        memcpy(dst + 4 * k, sb, 4); /* d, dmin */
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            dequant_k4_scale_min(j, sb + 4, &sc, &m);
            dst[8 + 8 * k + j] = sc;
            dst[24 + 8 * k + j] = m;
        }
        k45_quants(sb, q5, (uint8_t(*)[32])q[8 * k]);
    }
    put_nibbles(dst + 40, q);
    if (q5)
        for (int l = 0; l < 16; l++) {
            uint32_t b = 0;
            for (int s = 0; s < 8; s++)
                b |= ((rd32(&q[l][4 * s]) >> 4) & 0x01010101u) << s;
            wr32(dst + 296 + step_byte(l, 0), b);
        }
}

static void pack_q6_k(const uint8_t *src, uint8_t *dst)
{
    uint8_t q[16][32];
    for (int k = 0; k < 2; k++) {
        const uint8_t *sb = src + 210 * k;
        for (int j = 0; j < 8; j++) {
            dst[8 * k + j] = sb[192 + 2 * j];
            dst[16 + 8 * k + j] = sb[192 + 2 * j + 1];
        }
        q6k_quants(sb, (uint8_t(*)[32])q[8 * k]);
        memcpy(dst + 32 + 2 * k, sb + 208, 2); /* d */
    }
    put_nibbles(dst + 36, q);
    uint8_t *top = dst + 36 + 256;
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 16; l++) {
            uint32_t b = 0;
            for (int s = 0; s < 4; s++)
                b |= ((rd32(&q[l][4 * (4 * h + s)]) >> 4) & 0x03030303u) << (2 * s);
            wr32(top + 64 * h + step_byte(l, 0), b);
        }
}

void cpu_panel_pack_row(dtype t, const uint8_t *src, int64_t n, uint8_t *dst)
{
    size_t in = t == DT_Q8_0 ? 16 * 34 : t == DT_Q4_0 ? 16 * 18 : t == DT_Q4_K ? 2 * 144
              : t == DT_Q5_K ? 2 * 176 : 2 * 210;
    size_t out = cpu_panel_bytes(t);
    for (int64_t p = 0; p < n / CPU_PANEL; p++, src += in, dst += out) {
        if (t == DT_Q8_0)
            pack_q8_0(src, dst);
        else if (t == DT_Q4_0)
            pack_q4_0(src, dst);
        else if (t == DT_Q4_K || t == DT_Q5_K)
            pack_k45(src, dst, t == DT_Q5_K);
        else
            pack_q6_k(src, dst);
    }
}

void cpu_panel_x(const int8_t *q, int64_t n, int8_t *p, int32_t *lo)
{
    for (int64_t b0 = 0; b0 < n / 32; b0 += 16, q += CPU_PANEL, p += CPU_PANEL) {
        for (int l = 0; l < 16; l++) {
            const int8_t *blk = q + 32 * l;
            int32_t s = 0;
            for (int v = 0; v < 16; v++)
                s += blk[v];
            lo[b0 + l] = s;
            for (int st = 0; st < 8; st++)
                memcpy(p + 64 * st + 4 * l, blk + 4 * st, 4);
        }
    }
}

void cpu_tile_x(const int8_t *q, const float *d, const int32_t *s, const int32_t *lo, int64_t n,
                int u, int8_t *tb, float *td, int32_t *ts, int32_t *tlo)
{
    for (int64_t b = 0; b < n / CPU_QBLOCK; b++) {
        int8_t *dst = tb + b * 512 + 4 * u;
        for (int g = 0; g < 8; g++) {
            if (q)
                memcpy(dst + 64 * g, q + b * CPU_QBLOCK + 4 * g, 4);
            else
                memset(dst + 64 * g, 0, 4);
        }
        td[b * CPU_TILE_TOKENS + u] = q ? d[b] : 0.0f;
        ts[b * CPU_TILE_TOKENS + u] = q ? s[b] : 0;
        tlo[b * CPU_TILE_TOKENS + u] = q ? lo[b] : 0;
    }
}
