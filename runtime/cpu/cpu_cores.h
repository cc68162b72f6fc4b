/* The host's cores (runtime/cpu/cpu_cores.c): the default thread count and
 * the physical cores this process may run on. */
#ifndef KILN_CPU_CORES_H
#define KILN_CPU_CORES_H

#include <stdbool.h>

/* The default thread count (cpu_cores.c): OMP_NUM_THREADS when set, else
 * the physical cores this process may run on, else the logical CPUs; never
 * a measurement. *rule names which ("physical cores"). */
int kl_cpu_default_threads(const char **rule);
/* Distinct (package, core) pairs, read from root's
 * sys/devices/system/cpu/cpuN/topology, else proc/cpuinfo (root "" is this
 * machine; tests pass a fake tree), among the CPUs this process may run on
 * when this_process (else all); 0 when neither file says. */
int kl_cpu_physical_cores(const char *root, bool this_process);

#endif
