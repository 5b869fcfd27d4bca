/* How many threads a program should run by default: the physical cores
 * this process may run on. Two hardware threads of one core share its
 * execution units, so a second thread on a core adds little to the
 * compute-bound kernels and takes cache from the first (llama.cpp's
 * default is the same); and a container's or taskset's CPU mask is
 * honoured, which _SC_NPROCESSORS_ONLN is not. */
#ifndef MEMRA_CORE_CPUS_H
#define MEMRA_CORE_CPUS_H

/* The physical cores among the CPUs in the process's affinity mask: CPUs
 * with the same (physical_package_id, core_id) under
 * SYSFS/devices/system/cpu/cpuN/topology count once. sysfs: the root
 * ("/sys"; tests give a tree of their own). Falls back to the CPUs in the
 * mask when a CPU's topology cannot be read, and to 1 at the least. */
int cpus_physical_cores(const char *sysfs);

#endif
