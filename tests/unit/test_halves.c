/* The bf16 and f16 conversions as the generated CPU kernels run them:
 * vectorised loops (compiled by the kernels' compiler with the kernels'
 * flags, -O3 -march=native), under the CPU backend's flush-to-zero and
 * denormals-are-zero (MXCSR 0x8040) and without, bit for bit against a
 * scalar reference with one branch per case (the conversions as they were
 * before issue 17, whose f16 widening found a subnormal's shift bit by bit
 * in a loop that kept every f16 kernel scalar; unit.precision checks the
 * reference's rounding against exact nearest-value search):
 *  - every one of the 2^32 floats narrowed to bf16 and to f16 (round to
 *    nearest even, NaN, inf, overflow, f16 subnormals, f32 subnormals)
 *    under flush-to-zero, as the kernels run; every 7th without;
 *  - every one of the 2^16 bf16 and f16 patterns widened to f32, NaN
 *    payloads and signs included;
 *  - the runtime's own copies (compiled with the project's flags) on every
 *    16-bit pattern and on every 97th float;
 *  - the CPU backend's f16 conversions of GEMM operands (F16C where the CPU
 *    has it, 8 or 16 at a time) against those, every 16-bit pattern and
 *    every 5th float, rows of every tail length, with and without
 *    flush-to-zero, each loop this CPU can run. */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <xmmintrin.h>

#include "codegen/kir.h"
#include "base/scalar.h"
#include "runtime/cpu/f16_rows.h"
#include "runtime/exec/backend.h"
#include "prelude_jit.h"

/* The reference, one branch per case: compiled here (for the runtime's
 * check) and, as text, into the kernels' checker. */
#define REFERENCE \
    static uint16_t ref_f32_to_bf16(float f) \
    { \
        uint32_t u; memcpy(&u, &f, 4); \
        if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); \
        u += 0x7fffu + ((u >> 16) & 1u); \
        return (uint16_t)(u >> 16); \
    } \
    static uint32_t ref_f16_to_f32_bits(uint16_t h) \
    { \
        uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu; \
        if (e == 0) { \
            if (m == 0) return s; \
            e = 113; while (!(m & 0x400u)) { m <<= 1; e--; } \
            return s | (e << 23) | ((m & 0x3ffu) << 13); \
        } \
        if (e == 31) return s | 0x7f800000u | (m << 13); \
        return s | ((e + 112) << 23) | (m << 13); \
    } \
    static uint16_t ref_f32_to_f16(float f) \
    { \
        uint32_t u; memcpy(&u, &f, 4); \
        uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu; \
        if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u); \
        if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u); \
        if (a < 0x38800000u) { \
            if (a < 0x33000000u) return (uint16_t)s; \
            uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e; \
            uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1); \
            if (rem > half || (rem == half && (r & 1u))) r++; \
            return (uint16_t)(s | r); \
        } \
        uint32_t r = a - 0x38000000u; \
        r += 0xfffu + ((r >> 13) & 1u); \
        return (uint16_t)(s | (r >> 13)); \
    }
#define TEXT_OF(...) #__VA_ARGS__
#define TEXT(...) TEXT_OF(__VA_ARGS__)
#define REFERENCE_TEXT TEXT(REFERENCE) "\n"

REFERENCE

/* The checker the kernels' compiler builds: the prelude's conversions in
 * omp simd loops over chunks (as the kernels call them), each compared
 * with the reference. Returns the mismatches; *first gets the first input
 * that mismatched (kind 0: narrowing, 1: widening). */
static const char checker_text[] =
    "#include <xmmintrin.h>\n" REFERENCE_TEXT
    "#define CHUNK 4096\n"
    "long check_all(int flush, uint64_t stride, uint32_t *first, int *kind)\n"
    "{\n"
    "    unsigned saved = _mm_getcsr();\n"
    "    if (flush) _mm_setcsr(saved | 0x8040);\n"
    "    static float x[CHUNK], bw[65536], hw[65536];\n"
    "    static uint16_t b[CHUNK], h[CHUNK], p[65536];\n"
    "    long bad = 0;\n"
    "    for (uint64_t base = 0; base < (1ull << 32); base += CHUNK * stride) {\n"
    "        for (int i = 0; i < CHUNK; i++) { uint32_t u = (uint32_t)(base + i * stride); memcpy(&x[i], &u, 4); }\n"
    "        #pragma omp simd\n"
    "        for (int i = 0; i < CHUNK; i++) { b[i] = kl_f32_to_bf16(x[i]); h[i] = kl_f32_to_f16(x[i]); }\n"
    "        for (int i = 0; i < CHUNK; i++)\n"
    "            if (b[i] != ref_f32_to_bf16(x[i]) || h[i] != ref_f32_to_f16(x[i])) {\n"
    "                if (!bad++) { *first = (uint32_t)(base + i * stride); *kind = 0; }\n"
    "            }\n"
    "    }\n"
    "    for (int i = 0; i < 65536; i++) p[i] = (uint16_t)i;\n"
    "    #pragma omp simd\n"
    "    for (int i = 0; i < 65536; i++) { bw[i] = kl_bf16_to_f32(p[i]); hw[i] = kl_f16_to_f32(p[i]); }\n"
    "    for (int i = 0; i < 65536; i++) {\n"
    "        uint32_t gb, gh, wb = (uint32_t)i << 16, wh = ref_f16_to_f32_bits((uint16_t)i);\n"
    "        memcpy(&gb, &bw[i], 4); memcpy(&gh, &hw[i], 4);\n"
    "        if (gb != wb || gh != wh) { if (!bad++) { *first = (uint32_t)i; *kind = 1; } }\n"
    "    }\n"
    "    _mm_setcsr(saved);\n"
    "    return bad;\n"
    "}\n";

typedef long (*check_fn)(int flush, uint64_t stride, uint32_t *first, int *kind);

/* stride 1: every float. */
static void check_kernels(int flush, uint64_t stride)
{
    check_fn check = (check_fn)prelude_jit_symbol(checker_text, "check_all");
    uint32_t first = 0;
    int kind = 0;
    long bad = check(flush, stride, &first, &kind);
    if (bad)
        fail_msg("%s: %ld conversions differ from the reference; the first %s 0x%08x", flush ? "FTZ/DAZ" : "IEEE", bad,
                 kind ? "widens" : "narrows", first);
}

static void test_kernels_ieee(void **state)
{
    (void)state;
    check_kernels(0, 7);
}

static void test_kernels_flush_to_zero(void **state)
{
    (void)state;
    check_kernels(1, 1);
}

/* The runtime's copies, against the same reference compiled here. */
static void test_runtime(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        float b = kl_bf16_to_f32((uint16_t)i), h = kl_f16_to_f32((uint16_t)i);
        uint32_t gb, gh;
        memcpy(&gb, &b, 4);
        memcpy(&gh, &h, 4);
        if (gb != i << 16 || gh != ref_f16_to_f32_bits((uint16_t)i))
            fail_msg("widening 0x%04x: bf16 0x%08x, f16 0x%08x", i, gb, gh);
    }
    for (uint64_t v = 0; v < (1ull << 32); v += 97) {
        uint32_t u = (uint32_t)v;
        float f;
        memcpy(&f, &u, 4);
        if (kl_f32_to_bf16(f) != ref_f32_to_bf16(f) || kl_f32_to_f16(f) != ref_f32_to_f16(f))
            fail_msg("narrowing 0x%08x: bf16 0x%04x (want 0x%04x), f16 0x%04x (want 0x%04x)", u, kl_f32_to_bf16(f),
                     ref_f32_to_bf16(f), kl_f32_to_f16(f), ref_f32_to_f16(f));
    }
}

/* The CPU backend's f16 conversions of GEMM operands (F16C where the CPU
 * has it, the scalar conversions for NaN) against the scalar ones: every
 * 16-bit pattern widened, in one row and in rows of 1 to 40 and of 4099
 * (the blocks and every tail), every 5th float narrowed in rows of 4099
 * and the first ones in rows of 1 to 40, with and without flush-to-zero;
 * nothing written past a row's end. Every loop of runtime/cpu/f16_rows.c
 * this CPU can run (software, AVX2 F16C, AVX-512 F16C) takes each row in
 * turn, against one reference conversion of the row (one sweep over the
 * floats, not one per loop); kl_cpu_f16_widen and kl_cpu_f16_narrow
 * (kl_f16_rows_best's loop, swept in full as itself) on every widening
 * row and the short narrowing rows. */
enum { ROWS_AUTO = -1, ROWS_PATHS = 4 };

static void rows_widen(int isa, float *w, const uint16_t *h, int64_t n)
{
    if (isa == ROWS_AUTO)
        kl_cpu_f16_widen(w, h, n);
    else
        kl_f16_rows_widen((kl_f16_rows_isa)isa, w, h, n);
}

static void rows_narrow(int isa, uint16_t *h, const float *w, int64_t n)
{
    if (isa == ROWS_AUTO)
        kl_cpu_f16_narrow(h, w, n);
    else
        kl_f16_rows_narrow((kl_f16_rows_isa)isa, h, w, n);
}

static const char *rows_name(int isa)
{
    return isa == ROWS_AUTO ? "kl_cpu_f16_widen/narrow" : kl_f16_rows_name((kl_f16_rows_isa)isa);
}

/* The first mismatch of one path. */
typedef struct {
    int isa;
    long bad;
    uint32_t first;
    const char *what;
} rows_check;

static void rows_bad(rows_check *c, const char *what, uint32_t first)
{
    if (!c->bad++) {
        c->what = what;
        c->first = first;
    }
}

static void check_gemm_f16(int flush)
{
    /* kl_cpu_f16_widen takes the fastest loop the CPU can run. */
    kl_f16_rows_isa want_best = kl_f16_rows_can(KL_F16_ROWS_AVX512) ? KL_F16_ROWS_AVX512
                                : kl_f16_rows_can(KL_F16_ROWS_AVX2) ? KL_F16_ROWS_AVX2
                                                                    : KL_F16_ROWS_SCALAR;
    if (kl_f16_rows_best() != want_best)
        fail_msg("kl_f16_rows_best: %s, but this CPU can run %s", kl_f16_rows_name(kl_f16_rows_best()),
                 kl_f16_rows_name(want_best));
    rows_check paths[ROWS_PATHS];
    int np = 0;
    paths[np++] = (rows_check){.isa = ROWS_AUTO, .what = "widening"};
    kl_f16_rows_isa isas[] = {KL_F16_ROWS_SCALAR, KL_F16_ROWS_AVX2, KL_F16_ROWS_AVX512};
    for (int i = 0; i < 3; i++) {
        if (kl_f16_rows_can(isas[i]))
            paths[np++] = (rows_check){.isa = isas[i], .what = "widening"};
        else
            print_message("skip %s: not on this CPU\n", kl_f16_rows_name(isas[i]));
    }
    unsigned saved = _mm_getcsr();
    if (flush)
        _mm_setcsr(saved | 0x8040);
    enum { CHUNK = 4099 }; /* not a multiple of 8 or 16: the tail too */
    static uint16_t h[65536], got[CHUNK + 1], want[CHUNK];
    static float w[65536 + 1], x[CHUNK], wide[65536];
    for (uint32_t i = 0; i < 65536; i++) {
        h[i] = (uint16_t)i;
        wide[i] = kl_f16_to_f32((uint16_t)i);
    }
    /* One row, then rows of 1..40 and of CHUNK over every pattern. */
    for (int p = 0; p < np; p++) {
        rows_check *c = &paths[p];
        for (int pass = 0; pass < 3 && !c->bad; pass++) {
            for (int64_t i0 = 0, len = 1; i0 < 65536 && !c->bad; i0 += len, len = pass == 1 ? len % 40 + 1 : CHUNK) {
                int64_t n = pass == 0 ? 65536 : (65536 - i0 < len ? 65536 - i0 : len);
                w[i0 + n] = -7.0f; /* a guard past the row's end */
                rows_widen(c->isa, w + i0, h + i0, n);
                if (i0 + n < 65536 && w[i0 + n] != -7.0f)
                    rows_bad(c, "widening (past the row's end)", (uint32_t)(i0 + n));
                for (int64_t i = i0; i < i0 + n; i++)
                    if (memcmp(&wide[i], &w[i], 4))
                        rows_bad(c, "widening", (uint32_t)i);
                if (pass == 0)
                    break;
            }
        }
    }
    for (uint64_t base = 0, row = 0; base < (1ull << 32); base += 5ull * CHUNK, row++) {
        int n = 0;
        int len = row < 1000 ? (int)(row % 40) + 1 : CHUNK; /* short rows first */
        for (uint64_t v = base; n < len && v < (1ull << 32); v += 5, n++) {
            uint32_t u = (uint32_t)v;
            memcpy(&x[n], &u, 4);
        }
        for (int i = 0; i < n; i++)
            want[i] = kl_f32_to_f16(x[i]);
        for (int p = 0; p < np; p++) {
            rows_check *c = &paths[p];
            if (c->bad || (c->isa == ROWS_AUTO && len == CHUNK))
                continue;
            got[n] = 0x1234;
            rows_narrow(c->isa, got, x, n);
            if (got[n] != 0x1234) {
                uint32_t u;
                memcpy(&u, &x[n - 1], 4);
                rows_bad(c, "narrowing (past the row's end)", u);
            }
            if (memcmp(got, want, (size_t)n * sizeof *got))
                for (int i = 0; i < n; i++)
                    if (got[i] != want[i]) {
                        uint32_t u;
                        memcpy(&u, &x[i], 4);
                        rows_bad(c, "narrowing", u);
                    }
        }
        if (len < CHUNK)
            base -= 5ull * CHUNK - 5ull * (uint64_t)n; /* short rows cover the floats from 0 */
    }
    _mm_setcsr(saved);
    int failed = 0;
    for (int p = 0; p < np; p++)
        if (paths[p].bad && ++failed)
            print_error("%s, %s: the GEMM's f16 %s differs from the scalar one, first at 0x%08x\n",
                        rows_name(paths[p].isa), flush ? "FTZ/DAZ" : "IEEE", paths[p].what, paths[p].first);
    if (failed)
        fail_msg("%d of %d f16 row loops differ from the scalar conversions", failed, np);
}

static void test_gemm_f16_ieee(void **state)
{
    (void)state;
    check_gemm_f16(0);
}

static void test_gemm_f16_flush_to_zero(void **state)
{
    (void)state;
    check_gemm_f16(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_ieee),
        cmocka_unit_test(test_kernels_flush_to_zero),
        cmocka_unit_test(test_runtime),
        cmocka_unit_test(test_gemm_f16_ieee),
        cmocka_unit_test(test_gemm_f16_flush_to_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
