/* The amx level's tile kernels: a prompt's products of panel rows
 * (cpu_panel.h) on the AMX int8 tiles, each (row, token) the same bits as
 * the level's one-token panel kernel (docs/decisions/0040-cpu-amx-tiles.md).
 * Part of cpu_fast_x86.h (its pf_ / pi_ / pb_ helpers, 512-bit), included
 * there only for the amx level's table (cpu_fast_amx.c).
 *
 * A call takes CPU_TILE_ROWS (16) rows and tiles of CPU_TILE_TOKENS (16)
 * tokens (cpu_xtile). The rows' panels are unpacked once into A tiles, a
 * block's 32 quants per row in their natural order (value 4 g + j at byte
 * 4 g + j), the x tile's B rows in the same order, so one tdpbusd (tdpbssd
 * for Q8_0's signed quants) gives every (row, token) pair its block's
 * exact int32 sum S: the integer the panel kernels' vpdpbusd lanes sum. The
 * float steps then run per (row, block of the panel, token) with the
 * tokens in the vector lanes: the same IEEE operations on the same values
 * as the panel kernel's lane of that block (acc_l += float(S_l) * (scale_l
 * * dx_l) by FMA over the panels in order), and at the end the same fold
 * and tree (x86_hsum8 of the low + high halves). Per block of the panel
 * the panels run in order with that block's accumulators in registers, 16
 * rows of 16 tokens (Q4_K / Q5_K's mins after, in a pass of their own). */

enum { AMX_ROWS = CPU_TILE_ROWS, AMX_TOKENS = CPU_TILE_TOKENS, AMX_C = AMX_ROWS * AMX_TOKENS };
enum { AMX_Q8_0, AMX_Q4_0, AMX_Q4_K, AMX_Q5_K, AMX_Q6_K };

/* Palette 1's 64-byte configuration. Two sets of tiles, so one step's
 * products run while the step before's are stored and the one before
 * that meets its floats: set k is tiles 4k (C: 16 rows of 16 int32),
 * 4k + 1 (A: 16 rows x a block's 32 bytes; Q6_K a half block's 16),
 * 4k + 2 (B: 8 rows x 16 tokens' 4 values; Q6_K 4 rows) and 4k + 3
 * (Q6_K's second C). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

X86_INLINE void amx_configure(const int F)
{
    amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int k = 0; k < 2; k++) {
        c.colsb[4 * k] = c.colsb[4 * k + 2] = c.colsb[4 * k + 3] = 64;
        c.rows[4 * k] = c.rows[4 * k + 1] = c.rows[4 * k + 3] = AMX_ROWS;
        c.colsb[4 * k + 1] = F == AMX_Q6_K ? 16 : 32;
        c.rows[4 * k + 2] = F == AMX_Q6_K ? 4 : 8;
    }
    _tile_loadconfig(&c);
}

/* Slot s of a row's 512 bytes of A (32 bytes a slot) holds block
 * amx_block(s) of the panel: the order the transpose below writes. */
X86_INLINE int amx_block(int s) { return 4 * (s & 3) + (s >> 2); }

/* A panel's 8 step vectors (step s, lane l: values 4s..4s+3 of block l)
 * as one row's A bytes: per block its 32 values in order, in slot order.
 * Two 4 x 4 transposes of 32-bit lanes (steps 0-3, 4-7) within each
 * 128-bit lane, then each block's halves side by side. */
X86_INLINE void amx_put_row(const pbv *q, uint8_t *dst)
{
    const __m512i lo2 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i hi2 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    __m512i u[2][4];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const pbv *s = q + 4 * h;
        __m512i t0 = _mm512_unpacklo_epi32(s[0], s[1]), t1 = _mm512_unpackhi_epi32(s[0], s[1]);
        __m512i t2 = _mm512_unpacklo_epi32(s[2], s[3]), t3 = _mm512_unpackhi_epi32(s[2], s[3]);
        u[h][0] = _mm512_unpacklo_epi64(t0, t2); /* lane c: block 4c, its steps 4h..4h+3 */
        u[h][1] = _mm512_unpackhi_epi64(t0, t2); /* block 4c + 1 */
        u[h][2] = _mm512_unpacklo_epi64(t1, t3);
        u[h][3] = _mm512_unpackhi_epi64(t1, t3);
    }
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        _mm512_store_si512(dst + 128 * m, _mm512_permutex2var_epi64(u[0][m], lo2, u[1][m]));
        _mm512_store_si512(dst + 128 * m + 64, _mm512_permutex2var_epi64(u[0][m], hi2, u[1][m]));
    }
}

/* Lane l of v to at[l * AMX_ROWS]: a row's per-block value into the
 * [block][row] table the epilogue broadcasts from. */
X86_INLINE void amx_put_lanes(__m512 v, float *at)
{
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4,
                                                             3, 2, 1, 0),
                                           _mm512_set1_epi32(AMX_ROWS));
    _mm512_i32scatter_ps(at, idx, v, 4);
}

/* One panel of one row: its step vectors (the quants as the panel kernel
 * feeds vpdpbusd) and its per-block factors into sa, sb, sc
 * ([block][row] tables of this panel): Q8_0 / Q4_0 d; Q4_K / Q5_K d sc
 * and dmin m; Q6_K the two 16-value scales (as int32 bits) and d. */
X86_INLINE void amx_unpack(const uint8_t *w, pbv *q, float *sa, float *sb, float *sc, const int F)
{
    if (F == AMX_Q8_0) {
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            q[s] = pb_load(w + 32 + 64 * s);
        amx_put_lanes(pf_f16(w), sa);
    } else if (F == AMX_Q4_0) {
        p_nibbles(w + 32, q);
        amx_put_lanes(pf_f16(w), sa);
    } else if (F == AMX_Q4_K || F == AMX_Q5_K) {
        amx_put_lanes(pf_mul(pf_two(x86_f16(w), x86_f16(w + 4)), pf_u8(w + 8)), sa);
        amx_put_lanes(pf_mul(pf_two(x86_f16(w + 2), x86_f16(w + 6)), pf_u8(w + 24)), sb);
        p_nibbles(w + 40, q);
        if (F == AMX_Q5_K) {
            pbv top = pb_load(w + 296);
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++)
                q[s] = pb_fifth(q[s], top, s);
        }
    } else {
        amx_put_lanes(_mm512_castsi512_ps(pi_i8(w)), sa);
        amx_put_lanes(_mm512_castsi512_ps(pi_i8(w + 16)), sb);
        amx_put_lanes(pf_two(x86_f16(w + 32), x86_f16(w + 34)), sc);
        p_q6_quants(w, q);
    }
}

/* A block of a panel (its A rows at a, its B tile at xb) into the C
 * tiles of set (C, A, B, C2): Q6_K's two half blocks into C and C2, the
 * others' whole block into C; and the C tiles to c (C2 at c + 128). The
 * tile numbers are the instructions' own (literals). */
#define AMX_PRODUCTS(C, A, B, C2, a, xb, F)                                                        \
    do {                                                                                           \
        _tile_zero(C);                                                                             \
        if ((F) == AMX_Q6_K) {                                                                     \
            _tile_zero(C2);                                                                        \
            _tile_loadd(A, (a), 512);                                                              \
            _tile_loadd(B, (xb), 64);                                                              \
            _tile_dpbusd(C, A, B);                                                                 \
            _tile_loadd(A, (a) + 16, 512);                                                         \
            _tile_loadd(B, (xb) + 256, 64);                                                        \
            _tile_dpbusd(C2, A, B);                                                                \
        } else {                                                                                   \
            _tile_loadd(A, (a), 512);                                                              \
            _tile_loadd(B, (xb), 64);                                                              \
            if ((F) == AMX_Q8_0)                                                                   \
                _tile_dpbssd(C, A, B);                                                             \
            else                                                                                   \
                _tile_dpbusd(C, A, B);                                                             \
        }                                                                                          \
    } while (0)
#define AMX_STORE(C, C2, c, F)                                                                     \
    do {                                                                                           \
        _tile_stored(C, (c), 64);                                                                  \
        if ((F) == AMX_Q6_K)                                                                       \
            _tile_stored(C2, (c) + AMX_C, 64);                                                       \
    } while (0)

/* The fold and tree of x86_hsum8(pf_fold(a)) over a row's 16 block
 * accumulators at a[l * AMX_TOKENS], for the 16 tokens at once. */
X86_INLINE __m512 amx_hsum(const float *a)
{
    __m512 f[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        f[i] = _mm512_add_ps(_mm512_load_ps(a + i * AMX_TOKENS), _mm512_load_ps(a + (i + 8) * AMX_TOKENS));
    __m512 s0 = _mm512_add_ps(f[0], f[4]), s1 = _mm512_add_ps(f[1], f[5]);
    __m512 s2 = _mm512_add_ps(f[2], f[6]), s3 = _mm512_add_ps(f[3], f[7]);
    return _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
}

/* The 16 x 16 floats v[r] lane u to v[u] lane r, in registers: pairs of
 * rows interleaved by 32 and by 64 bits within each 128-bit lane, then
 * the 128-bit lanes of four vectors exchanged twice (64 shuffles for 256
 * values, against a scalar store each). */
X86_INLINE void amx_transpose(__m512 *v)
{
    __m512 t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    }
    /* v[4 g + k], 128-bit lane L: rows 4 g .. 4 g + 3 of column 4 L + k */
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
        __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
        v[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        v[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        v[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        v[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512 ab02 = _mm512_shuffle_f32x4(v[k], v[4 + k], 0x88);
        __m512 ab13 = _mm512_shuffle_f32x4(v[k], v[4 + k], 0xDD);
        __m512 cd02 = _mm512_shuffle_f32x4(v[8 + k], v[12 + k], 0x88);
        __m512 cd13 = _mm512_shuffle_f32x4(v[8 + k], v[12 + k], 0xDD);
        t[k] = _mm512_shuffle_f32x4(ab02, cd02, 0x88);
        t[8 + k] = _mm512_shuffle_f32x4(ab02, cd02, 0xDD);
        t[4 + k] = _mm512_shuffle_f32x4(ab13, cd13, 0x88);
        t[12 + k] = _mm512_shuffle_f32x4(ab13, cd13, 0xDD);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        v[i] = t[i];
}

/* One tile of tokens against the rows unpacked into abuf and the
 * [panel][block][row] factor tables sa, sb, sc: out[u * AMX_ROWS + r]. */
X86_INLINE void amx_tokens(const uint8_t *abuf, const float *sa, const float *sb, const float *sc,
                           const cpu_xtile *x, int64_t np, int nr, float *out, float *acc,
                           float *mins, int32_t *cb, const int F)
{
    /* Step i is block amx_block(i / np) of panel i % np: the blocks one
     * after another, each over the panels in order. At step i, step i +
     * 1's products (running since step i - 1) are stored, step i + 2's
     * start (in set i % 2), and step i's, stored a step ago, meet their
     * floats: neither a store nor the loads wait on what was just
     * issued. */
    const int64_t steps = 16 * np;
    __m512 ac[AMX_ROWS];
#pragma GCC unroll 16
    for (int r = 0; r < AMX_ROWS; r++)
        ac[r] = _mm512_setzero_ps();
    /* Step i's panel and block counted along, not divided out: a 64-bit
     * division a step sat on the path to the tile loads' addresses. */
#define AMX_STEP_A(p, k) (abuf + (size_t)(p) * AMX_ROWS * 512 + 32 * (k))
#define AMX_STEP_B(p, k) (x->b + (size_t)((p) * 16 + amx_block((int)(k))) * 512)
    AMX_PRODUCTS(0, 1, 2, 3, AMX_STEP_A(0, 0), AMX_STEP_B(0, 0), F);
    if (steps > 1)
        AMX_PRODUCTS(4, 5, 6, 7, AMX_STEP_A(1 % np, 1 / np), AMX_STEP_B(1 % np, 1 / np), F);
    int64_t p = 0, k = 0, p2 = 2 % np, k2 = 2 / np; /* steps i and i + 2 */
    AMX_STORE(0, 3, cb, F);
    for (int64_t i = 0; i < steps; i++) {
        const int l = amx_block((int)k);
        if (p == 0 && i > 0) {
#pragma GCC unroll 16
            for (int r = 0; r < AMX_ROWS; r++)
                ac[r] = _mm512_setzero_ps();
        }
        if (i + 1 < steps) {
            if (i % 2 == 0)
                AMX_STORE(4, 7, cb + ((i + 1) & 1) * 2 * AMX_C, F);
            else
                AMX_STORE(0, 3, cb + ((i + 1) & 1) * 2 * AMX_C, F);
        }
        if (i + 2 < steps) {
            if (i % 2 == 0)
                AMX_PRODUCTS(0, 1, 2, 3, AMX_STEP_A(p2, k2), AMX_STEP_B(p2, k2), F);
            else
                AMX_PRODUCTS(4, 5, 6, 7, AMX_STEP_A(p2, k2), AMX_STEP_B(p2, k2), F);
            if (++p2 == np) {
                p2 = 0;
                k2++;
            }
        }
        const int32_t *c = cb + (i & 1) * 2 * AMX_C;
        const int64_t b = p * 16 + l;
        const __m512 xd = _mm512_loadu_ps(x->d + b * AMX_TOKENS);
        const float *ta = sa + (p * 16 + l) * AMX_ROWS, *tb = sb + (p * 16 + l) * AMX_ROWS,
                    *tc = sc + (p * 16 + l) * AMX_ROWS;
        if (F == AMX_Q6_K) {
            const __m512i lo = _mm512_loadu_si512(x->lo + b * AMX_TOKENS);
            const __m512i xs = _mm512_loadu_si512(x->s + b * AMX_TOKENS);
            const __m512i lo5 = _mm512_slli_epi32(lo, 5);
            const __m512i hi5 = _mm512_slli_epi32(_mm512_sub_epi32(xs, lo), 5);
#pragma GCC unroll 16
            for (int r = 0; r < AMX_ROWS; r++) {
                int32_t ia, ib;
                memcpy(&ia, ta + r, 4);
                memcpy(&ib, tb + r, 4);
                __m512i ha = _mm512_sub_epi32(_mm512_load_si512(c + 16 * r), lo5);
                __m512i hb = _mm512_sub_epi32(_mm512_load_si512(c + AMX_C + 16 * r), hi5);
                __m512i sum = _mm512_add_epi32(_mm512_mullo_epi32(ha, _mm512_set1_epi32(ia)),
                                               _mm512_mullo_epi32(hb, _mm512_set1_epi32(ib)));
                ac[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                                        _mm512_mul_ps(_mm512_set1_ps(tc[r]), xd), ac[r]);
            }
        } else {
            __m512i off = _mm512_setzero_si512();
            if (F == AMX_Q4_0) /* the sums of q x with q = 0..15, less 8 sum(x) */
                off = _mm512_slli_epi32(_mm512_loadu_si512(x->s + b * AMX_TOKENS), 3);
#pragma GCC unroll 16
            for (int r = 0; r < AMX_ROWS; r++) {
                __m512i sum = _mm512_sub_epi32(_mm512_load_si512(c + 16 * r), off);
                ac[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                                        _mm512_mul_ps(_mm512_set1_ps(ta[r]), xd), ac[r]);
            }
        }
        if (p == np - 1) {
#pragma GCC unroll 16
            for (int r = 0; r < AMX_ROWS; r++)
                _mm512_store_ps(acc + (r * 16 + l) * AMX_TOKENS, ac[r]);
            if (F == AMX_Q4_K || F == AMX_Q5_K) {
                /* The block's mins over the panels, in their own pass (no
                 * products in them; the registers are the rows'). */
#pragma GCC unroll 16
                for (int r = 0; r < AMX_ROWS; r++)
                    ac[r] = _mm512_setzero_ps();
                for (int64_t q = 0; q < np; q++) {
                    const int64_t bq = q * 16 + l;
                    const __m512 xm = _mm512_mul_ps(
                        _mm512_loadu_ps(x->d + bq * AMX_TOKENS),
                        _mm512_cvtepi32_ps(_mm512_loadu_si512(x->s + bq * AMX_TOKENS)));
                    const float *tq = sb + bq * AMX_ROWS;
#pragma GCC unroll 16
                    for (int r = 0; r < AMX_ROWS; r++)
                        ac[r] = _mm512_fmadd_ps(_mm512_set1_ps(tq[r]), xm, ac[r]);
                }
#pragma GCC unroll 16
                for (int r = 0; r < AMX_ROWS; r++)
                    _mm512_store_ps(mins + (r * 16 + l) * AMX_TOKENS, ac[r]);
            }
        }
        if (++p == np) {
            p = 0;
            k++;
        }
    }
#undef AMX_STEP_A
#undef AMX_STEP_B
    /* Rows past nr hold zeros times finite factors, or garbage that goes
     * nowhere: the caller copies a token's first nr. */
    (void)nr;
    __m512 v[AMX_ROWS];
#pragma GCC unroll 16
    for (int r = 0; r < AMX_ROWS; r++) {
        v[r] = amx_hsum(acc + r * 16 * AMX_TOKENS);
        if (F == AMX_Q4_K || F == AMX_Q5_K)
            v[r] = _mm512_sub_ps(v[r], amx_hsum(mins + r * 16 * AMX_TOKENS));
    }
    amx_transpose(v);
#pragma GCC unroll 16
    for (int u = 0; u < AMX_TOKENS; u++)
        _mm512_storeu_ps(out + u * AMX_ROWS, v[u]);
}

X86_INLINE void amx_tile(const uint8_t *w, size_t rb, int nr, const cpu_xtile *x, int nx,
                         int64_t n, float *out, uint8_t *scratch, const int F, const int PB)
{
    const int64_t np = n / 512;
    uint8_t *abuf = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63); /* [np][row][512] */
    float *sa = (float *)(abuf + (size_t)np * AMX_ROWS * 512); /* [np][block][row] */
    float *sb = sa + np * 16 * AMX_ROWS, *sc = sb + np * 16 * AMX_ROWS;
    float *acc = sc + np * 16 * AMX_ROWS; /* [row][block][token] */
    float *mins = acc + AMX_ROWS * 16 * AMX_TOKENS;
    int32_t *cb = (int32_t *)(mins + AMX_ROWS * 16 * AMX_TOKENS); /* [2][2][AMX_C] */
    for (int r = 0; r < AMX_ROWS; r++)
        for (int64_t p = 0; p < np; p++) {
            uint8_t *dst = abuf + ((size_t)p * AMX_ROWS + (size_t)r) * 512;
            float *ta = sa + p * 16 * AMX_ROWS + r, *tb = sb + p * 16 * AMX_ROWS + r,
                  *tc = sc + p * 16 * AMX_ROWS + r;
            if (r < nr) {
                const uint8_t *src = w + (size_t)r * rb + (size_t)p * (size_t)PB;
                /* the next block of rows (the task's next call), into L2
                 * while this one's tiles run (past the matrix: harmless) */
                for (int k = 0; k < PB; k += 64)
                    __builtin_prefetch(src + AMX_ROWS * rb + k, 0, 2);
                pbv q[8];
                amx_unpack(src, q, ta, tb, tc, F);
                amx_put_row(q, dst);
            } else { /* rows past nr: zeros, their outputs unused */
                memset(dst, 0, 512);
                for (int l = 0; l < 16; l++)
                    ta[l * AMX_ROWS] = tb[l * AMX_ROWS] = tc[l * AMX_ROWS] = 0.0f;
            }
        }
    amx_configure(F);
    for (int xi = 0; xi < nx; xi++, out += AMX_ROWS * AMX_TOKENS)
        amx_tokens(abuf, sa, sb, sc, &x[xi], np, nr, out, acc, mins, cb, F);
    _tile_release();
}

#define AMX_KERNEL(NAME, F, PB)                                                                    \
    static void tile_##NAME(const uint8_t *w, size_t rb, int nr, const cpu_xtile *x, int nx,       \
                            int64_t n, float *out, uint8_t *scratch)                               \
    {                                                                                              \
        amx_tile(w, rb, nr, x, nx, n, out, scratch, F, PB);                                        \
    }
AMX_KERNEL(q8_0, AMX_Q8_0, 544)
AMX_KERNEL(q4_0, AMX_Q4_0, 288)
AMX_KERNEL(q4_k, AMX_Q4_K, 296)
AMX_KERNEL(q5_k, AMX_Q5_K, 360)
AMX_KERNEL(q6_k, AMX_Q6_K, 420)
