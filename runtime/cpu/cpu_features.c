/* kl_cpu_has: x86 feature bits from cpuid leaves 1 and 7, each counted
 * only when XCR0 says the OS saves the state it needs (AVX: YMM; AVX-512:
 * opmask and ZMM; AMX: tile config and data), as the compilers' own
 * __builtin_cpu_supports does. Read once; false on other architectures. */
#include "cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <stdint.h>

static uint64_t xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static unsigned read_features(void)
{
    unsigned a, b, c, d, bits = 0;
    if (__get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e) /* GenuineIntel */
        bits |= 1u << KL_CPU_INTEL;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    unsigned c1 = c;
    bool osxsave = c1 >> 27 & 1;
    uint64_t x = osxsave ? xcr0() : 0;
    bool ymm = (x & 0x6) == 0x6, zmm = ymm && (x & 0xe0) == 0xe0, tiles = (x & 0x60000) == 0x60000;
    unsigned b7 = 0, d7 = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d))
        b7 = b, d7 = d;
    if (ymm && (c1 >> 12 & 1))
        bits |= 1u << KL_CPU_FMA;
    if (ymm && (c1 >> 29 & 1))
        bits |= 1u << KL_CPU_F16C;
    if (ymm && (b7 >> 5 & 1))
        bits |= 1u << KL_CPU_AVX2;
    if (zmm && (b7 >> 16 & 1))
        bits |= 1u << KL_CPU_AVX512F;
    if (zmm && (b7 >> 30 & 1))
        bits |= 1u << KL_CPU_AVX512BW;
    if (zmm && (b7 >> 31 & 1))
        bits |= 1u << KL_CPU_AVX512VL;
    /* (Linux also wants a request before a process may use the tile
       data, ARCH_REQ_XCOMP_PERM: gemm16.c makes it.) */
    if (tiles && (d7 >> 24 & 1))
        bits |= 1u << KL_CPU_AMX_TILE;
    if (tiles && (d7 >> 22 & 1))
        bits |= 1u << KL_CPU_AMX_BF16;
    return bits | 1u << 31; /* bit 31: read */
}

bool kl_cpu_has(kl_cpu_feature f)
{
    static unsigned bits; /* races write the same value */
    unsigned v = __atomic_load_n(&bits, __ATOMIC_RELAXED);
    if (!v) {
        v = read_features();
        __atomic_store_n(&bits, v, __ATOMIC_RELAXED);
    }
    return v >> f & 1;
}
#else
bool kl_cpu_has(kl_cpu_feature f)
{
    (void)f;
    return false;
}
#endif
