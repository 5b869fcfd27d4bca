#include "core/salt.h"

#include <stdatomic.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>

uint64_t memra_process_salt(void)
{
    static _Atomic uint64_t salt;
    uint64_t s = atomic_load(&salt);
    if (s)
        return s;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = ((uint64_t)ts.tv_nsec << 32 ^ (uint64_t)ts.tv_sec) * 0x9e3779b97f4a7c15ull ^
            (uint64_t)(uintptr_t)&salt;
    }
    s |= 1;
    uint64_t want = 0;
    return atomic_compare_exchange_strong(&salt, &want, s) ? s : want;
}
