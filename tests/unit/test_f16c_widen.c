/* The kernels' F16C widening (kl_f16_to_f32_f16c, for the kernels a
 * builder marks scalar_f16: max pooling's backward) against the
 * kernels' own kl_f16_to_f32, both compiled by the kernels' compiler
 * with the kernels' flags, on every one of the 2^16 f16 patterns, with
 * and without flush-to-zero and denormals-are-zero (MXCSR 0x8040, as the
 * CPU backend runs them): the same bits for every pattern but a
 * signalling NaN, which comes out as the same NaN made quiet (its sign
 * and payload kept, the quiet bit set). */
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

static const char checker_text[] =
    "#include <xmmintrin.h>\n"
    "long check_all(int flush, uint32_t *first)\n"
    "{\n"
    "    unsigned saved = _mm_getcsr();\n"
    "    if (flush) _mm_setcsr(saved | 0x8040);\n"
    "    long bad = 0;\n"
    "    for (uint32_t i = 0; i < 65536; i++) {\n"
    "        float s = kl_f16_to_f32((uint16_t)i), h = kl_f16_to_f32_f16c((uint16_t)i);\n"
    "        uint32_t sb, hb; memcpy(&sb, &s, 4); memcpy(&hb, &h, 4);\n"
    "        int snan = (i & 0x7c00u) == 0x7c00u && (i & 0x3ffu) && !(i & 0x200u);\n"
    "        if (hb != (snan ? sb | 0x400000u : sb)) { if (!bad++) *first = i; }\n"
    "    }\n"
    "    _mm_setcsr(saved);\n"
    "    return bad;\n"
    "}\n";

typedef long (*check_fn)(int flush, uint32_t *first);

static void check(int flush)
{
    check_fn fn = (check_fn)prelude_jit_symbol(checker_text, "check_all");
    uint32_t first = 0;
    long bad = fn(flush, &first);
    if (bad)
        fail_msg("%s: %ld f16 patterns widen differently with F16C; the first 0x%04x", flush ? "FTZ/DAZ" : "IEEE", bad,
                 first);
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
