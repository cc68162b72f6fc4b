/* TensorBoard event files' checksums (runtime/tboard.c) against known
 * values: CRC32C of "123456789" (the Castagnoli check value) and of 32
 * zero and 32 0xFF bytes (RFC 3720, B.4), and TFRecord's mask of a CRC.
 * The host metrics (runtime/hostmetrics.c): resident memory grows by the
 * pages a test touches; CPU time agrees with getrusage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <cmocka.h>

#include "runtime/tboard.h"
#include "runtime/hostmetrics.h"

static void test_crc32c_known_values(void **state)
{
    (void)state;
    assert_int_equal(kl_crc32c("123456789", 9), 0xE3069283u);
    unsigned char zeros[32] = {0}, ones[32];
    memset(ones, 0xFF, sizeof ones);
    assert_int_equal(kl_crc32c(zeros, 32), 0x8A9136AAu);
    assert_int_equal(kl_crc32c(ones, 32), 0x62A8AB43u);
    assert_int_equal(kl_crc32c("", 0), 0u);
}

static void test_masked(void **state)
{
    (void)state;
    /* mask(c) = rotate right by 15, plus 0xa282ead8 (TFRecord). */
    uint32_t c = 0xE3069283u, want = ((c >> 15) | (c << 17)) + 0xA282EAD8u;
    assert_int_equal(kl_crc32c_masked("123456789", 9), want);
}

static void test_rss_counts_touched_pages(void **state)
{
    (void)state;
    kl_host_sample a, b;
    size_t n = (size_t)64 << 20;
    char *p = malloc(n);
    assert_non_null(p);
    assert_int_equal(kl_host_sample_now(&a), 0);
    memset(p, 1, n);
    assert_int_equal(kl_host_sample_now(&b), 0);
    int64_t grew = b.rss_bytes - a.rss_bytes;
    /* 64 MiB touched: the resident set grows by that, give or take what
     * the allocator, the test's own pages and a sanitizer's shadow add. */
    if (grew < (int64_t)60 << 20 || grew > (int64_t)80 << 20)
        fail_msg("touching 64 MiB grew the resident set by %lld bytes", (long long)grew);
    volatile char sink = p[n / 2];
    (void)sink;
    free(p);
}

static void test_cpu_time_matches_getrusage(void **state)
{
    (void)state;
    volatile double x = 0;
    for (int i = 0; i < 20000000; i++)
        x += i * 1e-9;
    kl_host_sample s;
    struct rusage ru;
    assert_int_equal(kl_host_sample_now(&s), 0);
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    double r = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
               1e-6 * (double)ru.ru_stime.tv_usec;
    /* Both count the same process's CPU time; getrusage read second. */
    if (s.cpu_s <= 0 || s.cpu_s > r + 0.002 || r - s.cpu_s > 0.05)
        fail_msg("CPU clock %.6f s, getrusage %.6f s", s.cpu_s, r);
    kl_host_sample a = {.wall = 1.0, .cpu_s = 2.0}, b = {.wall = 3.0, .cpu_s = 5.0};
    assert_true(kl_host_cpu_percent(&a, &b) == 150.0);
    assert_true(kl_host_cpu_percent(&a, &a) == 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_known_values),
        cmocka_unit_test(test_masked),
        cmocka_unit_test(test_rss_counts_touched_pages),
        cmocka_unit_test(test_cpu_time_matches_getrusage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
