/* TensorBoard event files' checksums (runtime/observe/tboard.c) against known
 * values: CRC32C of "123456789" (the Castagnoli check value) and of 32
 * zero and 32 0xFF bytes (RFC 3720, B.4), and TFRecord's mask of a CRC.
 * The host metrics (runtime/observe/hostmetrics.c): resident memory grows by the
 * pages a test touches; CPU time agrees with getrusage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <cmocka.h>

#include "runtime/observe/tboard.h"
#include "runtime/observe/hostmetrics.h"
#include "runtime/observe/monitor.h"
#include "runtime/observe/bottleneck.h"
#include "driver/compile.h"
#include <unistd.h>

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

/* The monitor thread: samples arrive in time order with the host's
 * readings; asked for a GPU's readings where NVML is missing, it says so
 * and samples the host alone. */
static void test_monitor(void **state)
{
    (void)state;
    bool nvml = access("/dev/nvidiactl", F_OK) == 0;
    kl_monitor *s = kl_monitor_start(0.01, nvml ? -1 : 0, true);
    assert_non_null(s);
    assert_false(kl_monitor_has_gpu(s));
    kl_monitor_reading all[8];
    int n = 0;
    /* Waits for samples (up to a minute on a loaded machine). */
    for (int tries = 0; n < 3 && tries < 6000; tries++) {
        kl_monitor_reading *v;
        int k = kl_monitor_drain(s, &v);
        for (int i = 0; i < k && n < 8; i++)
            all[n++] = v[i];
        free(v);
        if (n < 3)
            usleep(10000);
    }
    kl_monitor_stop(s);
    assert_true(n >= 3);
    kl_monitor_stats st = {0};
    for (int i = 0; i < n; i++) {
        assert_true(all[i].rss_bytes > 0);
        assert_true(all[i].cpu_percent >= 0);
        assert_false(all[i].gpu);
        if (i)
            assert_true(all[i].t > all[i - 1].t);
        kl_monitor_stats_add(&st, &all[i]);
    }
    assert_int_equal(st.n, n);
    assert_int_equal(st.ngpu, 0);
    assert_true(st.rss_peak >= all[0].rss_bytes);
    assert_true(kl_host_rss_peak() >= st.rss_peak);
    kl_monitor_stop(NULL);
}

/* The bottleneck summary's arithmetic and verdicts on made-up steps. */
static kl_bottleneck made_up(double gemm_ms, double elem_ms, double wait_ms, double step_ms)
{
    kl_bottleneck b = {.peak_gbs = 20, .peak_gflops = 100, .data_known = true};
    /* Two steps' worth, as added over a run. */
    b.seconds[KL_CAT_GEMM] = 2 * gemm_ms / 1e3;
    b.flops[KL_CAT_GEMM] = 2 * 50e9 * gemm_ms / 1e3;    /* 50 GFLOP/s: half the peak */
    b.seconds[KL_CAT_ELEMENTWISE] = 2 * elem_ms / 1e3;
    b.bytes[KL_CAT_ELEMENTWISE] = 2 * 5e9 * elem_ms / 1e3; /* 5 GB/s: a quarter */
    b.launches = 2 * 30;
    kl_bottleneck_finish(&b, 2, step_ms / 1e3, wait_ms / 1e3);
    return b;
}

static void test_bottleneck_verdicts(void **state)
{
    (void)state;
    char v[400];
    kl_bottleneck b = made_up(6, 2, 0, 10);
    assert_true(fabs(b.seconds[KL_CAT_GEMM] - 6e-3) < 1e-12);
    assert_true(fabs(b.seconds[KL_CAT_HOST] - 2e-3) < 1e-12);
    assert_true(fabs(b.launches - 30) < 1e-12);
    assert_string_equal(kl_bottleneck_verdict(&b, v, sizeof v),
                        "compute-bound on GEMMs: 60% of the step, at 50% of the measured GEMM peak");
    b = made_up(1, 6, 0, 8);
    assert_string_equal(kl_bottleneck_verdict(&b, v, sizeof v),
                        "memory-bound in fused elementwise: 75% of the step, at 25% of the measured copy bandwidth");
    b = made_up(3, 1, 4, 10);
    assert_string_equal(kl_bottleneck_verdict(&b, v, sizeof v),
                        "input-bound: 40% of the step waits for data (more loader threads, faster storage, or a simpler "
                        "input pipeline)");
    b = made_up(1, 1, 0, 10);
    assert_string_equal(kl_bottleneck_verdict(&b, v, sizeof v),
                        "launch-bound: 80% of the step is host overhead around 30 kernel launches and GEMM calls "
                        "(fewer, larger kernels: a larger batch, more fusion, CUDA graphs)");
    /* Kernels timed alone can add up to more than the step: no negative
     * overhead. */
    b = made_up(8, 4, 0, 10);
    assert_true(b.seconds[KL_CAT_HOST] == 0);
    /* Without a GEMM peak, no roofline share is claimed. */
    b = made_up(6, 2, 0, 10);
    b.peak_gflops = 0;
    assert_string_equal(kl_bottleneck_verdict(&b, v, sizeof v), "compute-bound on GEMMs: 60% of the step");
}

/* Categories of a real plan: every GEMM step is GEMM/conv, the AdamW
 * update is the optimizer's, the loss group a reduction. */
static void test_step_categories(void **state)
{
    (void)state;
    kl_compile_opts co = {.mode = KL_MODE_TRAIN};
    kl_compiled *c = kl_compile_file(KILN_SOURCE_DIR "/examples/mlp.kl", &co);
    assert_non_null(c);
    int count[KL_CAT_N] = {0};
    for (int i = 0; i < c->plan->steps.n; i++) {
        const kl_step *s = &c->plan->steps.v[i];
        kl_category k = kl_step_category(c->plan, s);
        count[k]++;
        if (s->kind == KL_STEP_GEMM)
            assert_int_equal(k, KL_CAT_GEMM);
    }
    assert_int_equal(count[KL_CAT_GEMM], 8);
    assert_true(count[KL_CAT_OPTIMIZER] >= 1);
    assert_true(count[KL_CAT_REDUCTION] >= 1);
    assert_true(count[KL_CAT_ELEMENTWISE] >= 1);
    assert_int_equal(count[KL_CAT_COLLECTIVE], 0);
    kl_compiled_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_known_values),
        cmocka_unit_test(test_masked),
        cmocka_unit_test(test_rss_counts_touched_pages),
        cmocka_unit_test(test_cpu_time_matches_getrusage),
        cmocka_unit_test(test_monitor),
        cmocka_unit_test(test_bottleneck_verdicts),
        cmocka_unit_test(test_step_categories),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
