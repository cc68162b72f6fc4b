/* The kernels' staged f16 rows (codegen/emit_c.c: kl_f16_widen_row and
 * kl_f16_narrow_row, F16C where the kernels' target has it, 8 at a time
 * with an overlapping last block, and one at a time under 8) against the
 * kernels' own element conversions kl_f16_to_f32 and kl_f32_to_f16, bit
 * for bit, compiled by the kernels' compiler with the kernels' flags,
 * with and without flush-to-zero and denormals-are-zero (MXCSR 0x8040, as
 * the CPU backend runs kernels): every one of the 2^16 f16 patterns and
 * every 31st float (every exponent, inf, NaNs of both signs with their
 * payloads), cut into rows of every length from 1 to 40 in turn, each
 * row starting anywhere (unaligned). */
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

static const char checker_text[] =
    "#include <xmmintrin.h>\n"
    "long check_rows(int flush, uint32_t *first, int *kind)\n"
    "{\n"
    "    unsigned saved = _mm_getcsr();\n"
    "    if (flush) _mm_setcsr(saved | 0x8040);\n"
    "    long bad = 0;\n"
    "    uint16_t h[48], hn[48];\n"
    "    float w[48], f[48];\n"
    "    int64_t n = 1;\n"
    "    for (uint32_t i = 0; i < 65536u; i += (uint32_t)n, n = n % 40 + 1) {\n"
    "        int64_t m = i + n > 65536u ? 65536 - i : n;\n"
    "        for (int64_t j = 0; j < m; j++) h[j] = (uint16_t)(i + j);\n"
    "        kl_f16_widen_row(w, h, m);\n"
    "        for (int64_t j = 0; j < m; j++) {\n"
    "            float r = kl_f16_to_f32(h[j]);\n"
    "            if (memcmp(&r, &w[j], 4)) { if (!bad++) { *first = i + (uint32_t)j; *kind = 0; } }\n"
    "        }\n"
    "    }\n"
    "    n = 1;\n"
    "    for (uint64_t u = 0; u < 0x100000000ull; n = n % 40 + 1) {\n"
    "        int64_t m = 0;\n"
    "        for (; m < n && u < 0x100000000ull; m++, u += 31) { uint32_t b = (uint32_t)u; memcpy(&f[m], &b, 4); }\n"
    "        kl_f16_narrow_row(hn, f, m);\n"
    "        for (int64_t j = 0; j < m; j++) {\n"
    "            if (hn[j] != kl_f32_to_f16(f[j])) { if (!bad++) { memcpy(first, &f[j], 4); *kind = 1; } }\n"
    "        }\n"
    "    }\n"
    "    _mm_setcsr(saved);\n"
    "    return bad;\n"
    "}\n";

typedef long (*check_fn)(int flush, uint32_t *first, int *kind);

static void check(int flush)
{
    check_fn fn = (check_fn)prelude_jit_symbol(checker_text, "check_rows");
    uint32_t first = 0;
    int kind = 0;
    long bad = fn(flush, &first, &kind);
    if (bad)
        fail_msg("%s: %ld elements of staged rows differ from the element conversions; the first %s 0x%08x",
                 flush ? "FTZ/DAZ" : "IEEE", bad, kind ? "narrows" : "widens", first);
}

static void test_ieee(void **state)
{
    (void)state;
    check(0);
}

static void test_flush_to_zero(void **state)
{
    (void)state;
    check(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ieee),
        cmocka_unit_test(test_flush_to_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
