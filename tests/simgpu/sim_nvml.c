/* The simulated device's NVML: the calls Kiln's monitor and doctor make
 * (runtime/observe/monitor.c, doctor_probe.c). The memory readings are
 * the simulator's own counts (cuMemGetInfo's); utilisation, power,
 * temperature and clocks are plausible constants for the part, marked
 * simulated where Kiln prints them (never a GPU's measurement). Return
 * codes as NVML's: 0 success, 1 uninitialised, 2 invalid argument. A
 * device is found by index (the simulator has no PCI bus id); every
 * device reads this process's memory count (each rank of a job uses one
 * device, its own). */
#include <stdio.h>
#include <string.h>

#include "sim.h"

enum { NVML_OK = 0, NVML_UNINITIALIZED = 1, NVML_INVALID = 2 };

typedef struct { unsigned gpu, memory; } nvml_util;
typedef struct { unsigned long long total, free, used; } nvml_mem;

static int nvml_inits;
static char device_handle[SIM_MAX_DEVICES]; /* device i's handle: &device_handle[i] */

SIM_EXPORT int nvmlInit_v2(void)
{
    if (cuInit(0) != CUDA_SUCCESS)
        return NVML_UNINITIALIZED;
    nvml_inits++;
    return NVML_OK;
}

SIM_EXPORT int nvmlShutdown(void)
{
    if (!nvml_inits)
        return NVML_UNINITIALIZED;
    nvml_inits--;
    return NVML_OK;
}

SIM_EXPORT int nvmlSystemGetDriverVersion(char *v, unsigned n)
{
    if (!v || n < 1)
        return NVML_INVALID;
    int d = 0;
    cuDriverGetVersion(&d);
    snprintf(v, n, "%d.%d (simulated)", d / 1000, d % 1000 / 10);
    return NVML_OK;
}

SIM_EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **dev)
{
    if (!nvml_inits)
        return NVML_UNINITIALIZED;
    if (i >= (unsigned)sim_ndev || !dev)
        return NVML_INVALID;
    *dev = &device_handle[i];
    return NVML_OK;
}

#define NEED_DEVICE(dev, out)                                                                                          \
    do {                                                                                                               \
        if (!nvml_inits)                                                                                               \
            return NVML_UNINITIALIZED;                                                                                 \
        if ((char *)(dev) < device_handle || (char *)(dev) >= device_handle + sim_ndev || !(out))                     \
            return NVML_INVALID;                                                                                       \
    } while (0)

SIM_EXPORT int nvmlDeviceGetMemoryInfo(void *dev, nvml_mem *m)
{
    NEED_DEVICE(dev, m);
    size_t free_b = 0, total = 0;
    cuMemGetInfo(&free_b, &total);
    m->total = total, m->free = free_b, m->used = total - free_b;
    return NVML_OK;
}

SIM_EXPORT int nvmlDeviceGetUtilizationRates(void *dev, nvml_util *u)
{
    NEED_DEVICE(dev, u);
    u->gpu = 50, u->memory = 20;
    return NVML_OK;
}

SIM_EXPORT int nvmlDeviceGetPowerUsage(void *dev, unsigned *mw)
{
    NEED_DEVICE(dev, mw);
    *mw = !strcmp(sim_dev->key, "a100") ? 150000 : 250000;
    return NVML_OK;
}

SIM_EXPORT int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned *c)
{
    NEED_DEVICE(dev, c);
    if (sensor != 0)
        return NVML_INVALID;
    *c = 45;
    return NVML_OK;
}

SIM_EXPORT int nvmlDeviceGetClockInfo(void *dev, int type, unsigned *mhz)
{
    NEED_DEVICE(dev, mhz);
    /* NVML_CLOCK_SM 1, NVML_CLOCK_MEM 2 (graphics 0 as SM). */
    if (type < 0 || type > 2)
        return NVML_INVALID;
    *mhz = (unsigned)((type == 2 ? sim_dev->mem_clock_khz : sim_dev->clock_khz) / 1000);
    return NVML_OK;
}

SIM_EXPORT int nvmlDeviceGetCurrentClocksThrottleReasons(void *dev, unsigned long long *bits)
{
    NEED_DEVICE(dev, bits);
    *bits = 0;
    return NVML_OK;
}
