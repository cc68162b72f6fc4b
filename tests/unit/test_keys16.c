/* base/scalar.h's keys16, which the fp16 kernels use to maximise, compare
 * and select 16-bit floats in their own bits (codegen/print_expr.c
 * print_bits16), against the float operations they stand for (kl_max,
 * kl_relu, ==, <), compiled by the kernels' compiler with the kernels'
 * flags: every one of the 2^16 patterns against every 61st pattern and
 * the special ones (zeros, infinities, quiet and signalling NaNs of both
 * signs, the smallest subnormals, the largest finite numbers), for f16
 * with and without flush-to-zero and denormals-are-zero (MXCSR 0x8040,
 * as the CPU backend runs kernels) and for bf16 without (under DAZ a bf16
 * subnormal is an f32 subnormal and compares as zero, which its key does
 * not: the kernels keep bf16 in floats). What the keys promise: the
 * maximum is the float maximum's bits, but a NaN for a NaN and, of +0
 * and -0, +0 (kl_max gives the second); == and < agree with the floats'
 * (< but for -0 < +0, which is not checked). */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "codegen/kir.h"
#include "runtime/exec/backend.h"
#include "prelude_jit.h"

/* For one format (FMT f16 or bf16): bad cases counted, the first kept. */
#define CHECKER(FMT, INF) \
    "long check_" #FMT "(int flush, uint32_t *first_a, uint32_t *first_b)\n" \
    "{\n" \
    "    static const uint16_t special[] = {0x0000, 0x8000, " #INF ", 0x8000 | " #INF ", " #INF " | 1,\n" \
    "        0x8000 | " #INF " | 1, 0x7fff, 0xffff, 0x0001, 0x8001, 0x3c00, 0xbc00, " #INF " - 1, 0x8000 | (" #INF " - 1)};\n" \
    "    unsigned saved = _mm_getcsr();\n" \
    "    if (flush) _mm_setcsr(saved | 0x8040);\n" \
    "    long bad = 0;\n" \
    "    int nspecial = (int)(sizeof special / sizeof special[0]);\n" \
    "    for (uint32_t j = 0; j < 65536u / 61u + (uint32_t)nspecial; j++) {\n" \
    "        uint32_t b = j < (uint32_t)nspecial ? special[j] : (j - (uint32_t)nspecial) * 61u;\n" \
    "        float fb = kl_" #FMT "_to_f32((uint16_t)b);\n" \
    "        for (uint32_t a = 0; a < 65536u; a++) {\n" \
    "            float fa = kl_" #FMT "_to_f32((uint16_t)a);\n" \
    "            float mx = kl_max(fa, fb), rl = kl_relu(fa);\n" \
    "            uint32_t km = kl_unkey16(kl_kmax(kl_" #FMT "_key(a), kl_" #FMT "_key(b)));\n" \
    "            uint32_t kr = kl_unkey16(kl_kmax(kl_" #FMT "_key(a), 0));\n" \
    "            float fkm = kl_" #FMT "_to_f32((uint16_t)km), fkr = kl_" #FMT "_to_f32((uint16_t)kr);\n" \
    "            int ok = mx != mx ? fkm != fkm : mx == 0.0f ? (km & 0x7fffu) == 0 && (km == 0 || (a != 0 && b != 0)) : (fkm == mx && km == kl_f32_to_" #FMT "(mx));\n" \
    "            ok &= rl != rl ? fkr != fkr : rl == 0.0f ? kr == 0 : (fkr == rl && kr == a);\n" \
    "            ok &= kl_" #FMT "_eq(a, b) == (fa == fb);\n" \
    "            ok &= (fa != fa || fb != fb) || (fa == 0.0f && fb == 0.0f) || ((kl_" #FMT "_key(a) < kl_" #FMT "_key(b)) == (fa < fb));\n" \
    "            ok &= kl_sel16(1, a, b) == a && kl_sel16(0, a, b) == b;\n" \
    "            if (!ok && !bad++) { *first_a = a; *first_b = b; }\n" \
    "        }\n" \
    "    }\n" \
    "    _mm_setcsr(saved);\n" \
    "    return bad;\n" \
    "}\n"

static const char checker_text[] = "#include <xmmintrin.h>\n" CHECKER(f16, 0x7c00) CHECKER(bf16, 0x7f80);

typedef long (*check_fn)(int flush, uint32_t *first_a, uint32_t *first_b);

static void check(const char *fmt, int flush)
{
    char name[32];
    snprintf(name, sizeof name, "check_%s", fmt);
    check_fn fn = (check_fn)prelude_jit_symbol(checker_text, name);
    uint32_t a = 0, b = 0;
    long bad = fn(flush, &a, &b);
    if (bad)
        fail_msg("%s%s: %ld pairs where the keys disagree with the floats; the first a=0x%04x b=0x%04x", fmt,
                 flush ? " under FTZ/DAZ" : "", bad, a, b);
}

static void test_f16(void **state)
{
    (void)state;
    check("f16", 0);
}

static void test_f16_flush_to_zero(void **state)
{
    (void)state;
    check("f16", 1);
}

static void test_bf16(void **state)
{
    (void)state;
    check("bf16", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_f16_flush_to_zero),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
