/* The host's memory read bandwidth: the ceiling a CPU decode step is held
 * to, since decode at batch 1 streams every weight once per token.
 *
 * The probe fills a buffer far larger than any cache, then every thread of
 * a pool sums its slice with 16-byte loads; the best of the repetitions is
 * the ceiling (GB/s = 1e9 bytes/s, read bytes only). Measuring takes a
 * second or two, so the result is cached per host in
 *   $MEMRA_CACHE/bandwidth-<hostname>.json
 * (MEMRA_CACHE defaults to $XDG_CACHE_HOME/memra, else ~/.cache/memra) and
 * reused while the host still has the same CPU model and CPU count. */
#ifndef MEMRA_BENCH_MEMBW_H
#define MEMRA_BENCH_MEMBW_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct {
    double gb_s;          /* best repetition: the ceiling */
    double median_gb_s;
    int n_threads;        /* readers */
    uint64_t buffer_bytes;
    int reps;
    int n_cpus;           /* online CPUs when measured */
    char cpu[128];        /* CPU model name (/proc/cpuinfo) */
    char hostname[128];
    char measured_at[32]; /* UTC, 2026-11-30T06:41:09Z */
} membw_result;

typedef struct {
    membw_result r;
    int from_cache;       /* 1: read from path; 0: measured now */
    char path[1024];      /* the cache file */
    char note[MEMRA_ERR_MAX + 1200]; /* why a cache was not used or not written; "" when all went well */
} membw_ceiling;

/* Measure: n_threads readers (<= 0: one per online CPU) over a buffer of
 * buffer_bytes (0: 1 GiB, at most a quarter of the available memory), reps
 * timed passes (0: 10) after one untimed pass. Fails only when the buffer
 * cannot be allocated. */
int membw_probe(int n_threads, uint64_t buffer_bytes, int reps, membw_result *out,
                memra_err *err);

/* The cache file of this host. */
int membw_cache_path(char *out, size_t n, memra_err *err);
/* Read a cache file; an unreadable or malformed file is an error naming it. */
int membw_cache_read(const char *path, membw_result *out, memra_err *err);
/* Write one (creating its directory); atomic. */
int membw_cache_write(const char *path, const membw_result *r, memra_err *err);
/* Whether a cached result still describes this host (CPU model and count);
 * when not, *why says what changed. */
int membw_cache_matches(const membw_result *r, const char **why);

/* The host's ceiling: the cached figure when there is a valid one and
 * remeasure is 0, else a fresh probe with every online CPU over
 * probe_bytes (0: the default) that is then cached. A cache that cannot be
 * read or written is no failure: out->note says so. */
int membw_host_ceiling(int remeasure, uint64_t probe_bytes, membw_ceiling *out, memra_err *err);

/* The CPU model name from /proc/cpuinfo ("model name", else "Processor" or
 * "cpu model"), "unknown" when there is none. */
void membw_cpu_model(char *out, size_t n);
/* Online CPUs (at least 1). */
int membw_online_cpus(void);
/* Now, as UTC ISO 8601 with seconds ("2026-11-30T06:41:09Z"). */
void membw_utc_now(char *out, size_t n);

#endif
