/* The physical cores this process may run on (core/cpus.h). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/check.h"
#include "core/cpus.h"

/* A small integer from a sysfs file; -1 when it cannot be read. */
static long read_id(const char *sysfs, int cpu, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/%s", sysfs, cpu, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    if (fscanf(f, "%ld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

int cpus_physical_cores(const char *sysfs)
{
    cpu_set_t mask;
    int n_cpus = 0;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? (int)n : 1;
    }
    /* (package, core) of each CPU in the mask; a pair seen before is a
     * second hardware thread of that core. */
    long *seen = xmalloc(sizeof(long) * 2 * CPU_SETSIZE);
    int n_cores = 0, unknown = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &mask))
            continue;
        n_cpus++;
        long pkg = read_id(sysfs, cpu, "physical_package_id");
        long core = read_id(sysfs, cpu, "core_id");
        if (pkg < 0 || core < 0) {
            unknown = 1;
            continue;
        }
        int dup = 0;
        for (int i = 0; i < n_cores && !dup; i++)
            dup = seen[2 * i] == pkg && seen[2 * i + 1] == core;
        if (!dup) {
            seen[2 * n_cores] = pkg;
            seen[2 * n_cores + 1] = core;
            n_cores++;
        }
    }
    free(seen);
    if (unknown || n_cores == 0)
        return n_cpus > 0 ? n_cpus : 1;
    return n_cores;
}
