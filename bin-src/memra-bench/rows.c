/* The model bench's rows and the peak memory probe. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/cli.h"
#include "core/memstat.h"

#include "bench_cli.h"
#include "rows.h"

/* From the repetition times to the reported figures: every rate comes from
 * the median time, so ms/token = 1000 / tok/s exactly. */
void bench_finish_row(bench_row *r, uint64_t bytes_per_token, double ceiling_gbs)
{
    r->tok_s = r->tokens * 1e3 / r->ms.median;
    r->tok_s_min = r->tokens * 1e3 / r->ms.max;
    r->tok_s_max = r->tokens * 1e3 / r->ms.min;
    r->ms_per_token = r->ms.median / r->tokens;
    r->ms_per_step = r->decode ? r->ms.median / r->n_gen : r->ms.median;
    r->tok_s_per_seq = r->decode ? r->n_gen * 1e3 / r->ms.median : r->tok_s;
    /* decode: the weights stream once per step, whatever the batch (each
     * weight is read once for all the step's rows: the floor); prefill:
     * once per prompt as the floor (the CPU backend reads them once per
     * n_batch chunk). */
    r->gb_s = r->decode ? bytes_per_token * (r->n_gen * 1e3 / r->ms.median) / 1e9
                        : bytes_per_token / (r->ms.median / 1e3) / 1e9;
    r->pct = ceiling_gbs > 0 ? 100 * r->gb_s / ceiling_gbs : 0;
}

json_t *bench_row_json(const bench_row *r)
{
    json_t *j = json_object();
    json_object_set_new(j, "test", json_string(r->test));
    json_object_set_new(j, "kind", json_string(r->batched  ? "batch"
                                               : r->decode ? "decode"
                                                           : "prefill"));
    json_object_set_new(j, "n_prompt", json_integer(r->n_prompt));
    json_object_set_new(j, "n_gen", json_integer(r->n_gen));
    json_object_set_new(j, "depth", json_integer(r->depth));
    json_object_set_new(j, "batch", json_integer(r->batch));
    if (r->constrained)
        json_object_set_new(j, "constrained", json_true());
    json_object_set_new(j, "tokens", json_integer(r->tokens));
    json_object_set_new(j, "tok_s", json_real(r->tok_s));
    json_object_set_new(j, "tok_s_min", json_real(r->tok_s_min));
    json_object_set_new(j, "tok_s_max", json_real(r->tok_s_max));
    json_object_set_new(j, "ms_per_token", json_real(r->ms_per_token));
    if (r->decode) {
        json_object_set_new(j, "tok_s_per_seq", json_real(r->tok_s_per_seq));
        json_object_set_new(j, "ms_per_step", json_real(r->ms_per_step));
    }
    json_object_set_new(j, "ms", json_pack("{s:f,s:f,s:f,s:f}", "median", r->ms.median, "min",
                                           r->ms.min, "max", r->ms.max, "mean", r->ms.mean));
    json_object_set_new(j, "gb_s", json_real(r->gb_s));
    json_object_set_new(j, "pct_ceiling", json_real(r->pct));
    json_object_set_new(j, "peak_mem_bytes", json_integer((json_int_t)r->peak_mem));
    return j;
}

static void row_label(const bench_row *r, char *out, size_t n)
{
    if (r->batched)
        snprintf(out, n, "%s b%d @ d%" PRId64, r->test, r->batch, r->depth);
    else if (r->decode || r->depth > 0)
        snprintf(out, n, "%s @ d%" PRId64, r->test, r->depth);
    else
        snprintf(out, n, "%s", r->test);
}

/* Three significant digits or more: small models give small GB/s, the
 * H200 thousands. */
void bench_fmt_mem(uint64_t b, char *out, size_t n)
{
    if (b >= 1000000000ull)
        snprintf(out, n, "%.2f GB", b / 1e9);
    else
        snprintf(out, n, "%.1f MB", b / 1e6);
}

void bench_print_row(const bench_row *r)
{
    char label[64], toks[128], a[32], b[32], c[32], gbs[32], pct[32], mem[32];
    row_label(r, label, sizeof label);
    bench_fmt_num(r->tok_s, a, sizeof a);
    bench_fmt_num(r->tok_s_min, b, sizeof b);
    bench_fmt_num(r->tok_s_max, c, sizeof c);
    snprintf(toks, sizeof toks, "%s [%s, %s]", a, b, c);
    bench_fmt_num(r->gb_s, gbs, sizeof gbs);
    bench_fmt_num(r->pct, pct, sizeof pct);
    bench_fmt_mem(r->peak_mem, mem, sizeof mem);
    printf("| %-16s | %32s | %9.3f | %8s | %9s | %10s |\n", label, toks, r->ms_per_token, gbs,
           pct, mem);
    fflush(stdout);
}

void bench_print_batch_header(void)
{
    printf("\n| %-20s | %34s | %13s | %9s | %8s | %9s | %10s |\n", "batched decode",
           "aggregate tok/s median [min, max]", "tok/s per seq", "ms/step", "GB/s",
           "% ceiling", "peak mem");
    printf("|----------------------|------------------------------------|---------------|"
           "-----------|----------|-----------|------------|\n");
}

void bench_print_batch_row(const bench_row *r)
{
    char label[64], toks[128], a[32], b[32], c[32], per[32], gbs[32], pct[32], mem[32];
    row_label(r, label, sizeof label);
    bench_fmt_num(r->tok_s, a, sizeof a);
    bench_fmt_num(r->tok_s_min, b, sizeof b);
    bench_fmt_num(r->tok_s_max, c, sizeof c);
    snprintf(toks, sizeof toks, "%s [%s, %s]", a, b, c);
    bench_fmt_num(r->tok_s_per_seq, per, sizeof per);
    bench_fmt_num(r->gb_s, gbs, sizeof gbs);
    bench_fmt_num(r->pct, pct, sizeof pct);
    bench_fmt_mem(r->peak_mem, mem, sizeof mem);
    printf("| %-20s | %34s | %13s | %9.3f | %8s | %9s | %10s |\n", label, toks, per,
           r->ms_per_step, gbs, pct, mem);
    fflush(stdout);
}


void bench_mem_init(mem_probe *m, backend *bk)
{
    memset(m, 0, sizeof *m);
    m->bk = bk;
    memra_err err;
    uint64_t used;
    int rc = backend_mem_stats(bk, &used, &m->total, &err);
    if (rc < 0)
        cli_fail(&err);
    m->device = rc == 0;
    if (!m->device) {
        m->per_row = memstat_reset_peak(&err) == 0;
        if (!m->per_row)
            snprintf(m->note, sizeof m->note, "the process's peak since it started (cannot "
                     "reset it: %s)", err.msg);
    }
}

void bench_mem_row_begin(mem_probe *m)
{
    memra_err err;
    if (!m->device && m->per_row)
        memstat_reset_peak(&err);
}

uint64_t bench_mem_row_end(mem_probe *m)
{
    memra_err err;
    uint64_t a, b;
    if (m->device) {
        if (backend_mem_stats(m->bk, &a, &b, &err) != 0)
            cli_fail(&err);
    } else if (memstat_rss(&b, &a, &err) != 0) {
        cli_fail(&err);
    }
    if (a > m->peak)
        m->peak = a;
    return a;
}
