/* The monotonic clock (CLOCK_MONOTONIC), for intervals: timings, timeouts,
 * ages. Never the time of day. */
#ifndef MEMRA_CORE_CLOCK_H
#define MEMRA_CORE_CLOCK_H

#include <time.h>

static inline double clock_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double clock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

#endif
