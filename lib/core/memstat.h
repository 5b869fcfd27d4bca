/* The process's resident memory, for memra-bench's peak column on the CPU
 * backend: VmRSS and its high-water mark VmHWM from /proc/self/status.
 * The mark can be reset (writing 5 to /proc/self/clear_refs, Linux 4.0+),
 * so a benchmark row can report its own peak rather than the process's. */
#ifndef MEMRA_CORE_MEMSTAT_H
#define MEMRA_CORE_MEMSTAT_H

#include <stdint.h>

#include "core/err.h"

/* Current and peak resident bytes of this process. */
int memstat_rss(uint64_t *current, uint64_t *peak, memra_err *err);
/* Reset the peak to the current RSS; -1 (err says why) where the kernel
 * does not allow it, and the peak stays the process's since it began. */
int memstat_reset_peak(memra_err *err);

#endif
