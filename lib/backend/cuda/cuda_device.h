/* The CUDA device as memra sees it: what it is, which tuning class it falls
 * in, and the read+write bandwidth it reaches. Tuned defaults are keyed on
 * the class, and only the Hopper data-center parts (H100/H200, sm_90) have
 * measured ones; every other card is GENERIC and gets the safe path. */
#ifndef MEMRA_BACKEND_CUDA_DEVICE_H
#define MEMRA_BACKEND_CUDA_DEVICE_H

#include <stddef.h>

#include "core/err.h"

typedef enum { DEVICE_CLASS_GENERIC = 0, DEVICE_CLASS_HOPPER = 1 } device_class;

typedef struct {
    int index;
    char name[256];
    int cc_major, cc_minor;
    int sm_count;
    size_t total_mem;
    device_class klass;
} cuda_device_info;

const char *device_class_name(device_class c);
/* Number of CUDA devices; 0 (not an error) when there is no driver or device. */
int cuda_device_count(void);
int cuda_device_query(int index, cuda_device_info *out, memra_err *err);
/* Copy `bytes` device-to-device `reps` times with 16-byte vectors and return
 * the bytes moved (read + write) per second, in GB/s (1e9). */
int cuda_measure_copy_bandwidth(int index, size_t bytes, int reps, double *gbs, memra_err *err);

#endif
