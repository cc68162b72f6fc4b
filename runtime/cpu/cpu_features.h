/* The x86 features the CPU kernels choose between, read with cpuid (and
 * xgetbv for the register state the OS enables), so the choice compiles
 * under gcc and clang alike: clang 14's __builtin_cpu_supports knows no
 * "f16c" or "amx-tile". */
#pragma once

#include <stdbool.h>

typedef enum kl_cpu_feature {
    KL_CPU_FMA,
    KL_CPU_F16C,
    KL_CPU_AVX2,
    KL_CPU_AVX512F,
    KL_CPU_AVX512BW,
    KL_CPU_AVX512VL,
    KL_CPU_AMX_TILE,
    KL_CPU_AMX_BF16,
    KL_CPU_INTEL, /* not a feature: the vendor is Intel (cpuid leaf 0) */
} kl_cpu_feature;

/* Whether this CPU has feature f and the OS saves the registers it uses. */
bool kl_cpu_has(kl_cpu_feature f);
