/* The toolkit libraries the CUDA backend loads at run time (cuBLASLt for
 * prefill GEMMs, NCCL for a pipeline's processes), so no memra binary
 * needs them to start. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"

void *cuda_dlopen(const char *env_var, const char *soname)
{
    const char *env = getenv(env_var);
    if (env && *env)
        return dlopen(env, RTLD_NOW | RTLD_LOCAL);
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *home = getenv("CUDA_HOME");
        char path[1024];
        snprintf(path, sizeof path, "%s/lib64/%s", home && *home ? home : "/usr/local/cuda",
                 soname);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    return h;
}
