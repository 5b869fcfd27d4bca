/* Choosing a backend by kind. The CUDA backend exists only in builds with
 * the toolkit (CUDA=1); elsewhere backend_cuda_create is defined here and
 * fails with a message, so callers need no build-time switches. */
#include "backend/backend.h"

#include <string.h>

#include "core/cli.h"

#if MEMRA_CUDA
#include "backend/cuda/cuda_device.h"
#endif

const char *backend_kind_name(backend_kind k)
{
    return k == BK_CUDA ? "cuda" : k == BK_CPU_REF ? "cpu-ref" : "cpu";
}

int backend_kind_parse(const char *s, backend_kind *out, memra_err *err)
{
    static const backend_kind kinds[] = {BK_CPU, BK_CPU_REF, BK_CUDA};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(s, backend_kind_name(kinds[i]))) {
            *out = kinds[i];
            return 0;
        }
    return memra_fail(err, "backend '%s' is not cpu, cpu-ref or cuda", s);
}

backend_kind backend_kind_default(void)
{
#if MEMRA_CUDA
    if (cuda_device_count() > 0)
        return BK_CUDA;
#endif
    return BK_CPU;
}

backend_kind backend_kind_or_usage(const char *arg)
{
    backend_kind k;
    memra_err err;
    if (backend_kind_parse(arg, &k, &err) != 0)
        cli_usage("--backend: %s", err.msg);
    if (k == BK_CUDA && !MEMRA_CUDA)
        cli_usage("--backend cuda: this build has no CUDA (build with CUDA=1)");
    return k;
}

#if !MEMRA_CUDA
backend *backend_cuda_create(int device, memra_err *err)
{
    memra_fail(err, "CUDA device %d: this build has no CUDA backend (built with CUDA=0)", device);
    return NULL;
}
#endif

backend *backend_create(backend_kind k, int device, int n_threads, memra_err *err)
{
    switch (k) {
    case BK_CUDA:
        return backend_cuda_create(device, err);
    case BK_CPU:
        return backend_cpu_create(n_threads);
    case BK_CPU_REF:
        return backend_cpu_ref_create(n_threads);
    }
    memra_fail(err, "backend kind %d is not cpu, cpu-ref or cuda", (int)k);
    return NULL;
}
