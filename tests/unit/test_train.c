/* Optimizer steps against hand-computed values, gradient clipping, the
 * learning-rate schedules, parameter initialisation statistics, the
 * training rates over a window (synthetic times) and the physical-core
 * count of the thread rule (a fake sysfs and /proc/cpuinfo). */
#define _GNU_SOURCE /* nftw */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "driver/compile.h"
#include "ir/train_config.h"
#include "runtime/exec/session.h"
#include "session_fixture.h"
#include "driver/train.h"

/* A model whose gradient is c + w for w (3 values starting at 0.5). */
static const char *model_fmt =
    "model m {\n"
    "  input c : f64[3]\n"
    "  param w : f64[3] init = constant(value = 0.5)\n"
    "  loss = sum(w * c) + 0.5 * sum(w * w)\n"
    "}\n"
    "train { optimizer = %s %s }\n";

typedef fixture_run run;

static void start(run *r, const char *optimizer, const char *extra)
{
    char *text = kl_xasprintf(model_fmt, optimizer, extra);
    kl_compile_opts cc = {.mode = KL_MODE_TRAIN, .verify = true};
    kl_compiled *cm = fixture_compile_text("test.kl", text, &cc);
    free(text);
    assert_non_null(cm);
    ir_graph *g = cm->g;
    fixture_start(r, cm, 1);
    assert_non_null(r->e);
    double c[3] = {1, -2, 3};
    kl_exec_write(r->e, ir_find_value(g, "c"), c, sizeof c);
}

static void step(run *r, double lr, double b1, double b2, int t)
{
    float h[4] = {(float)lr, (float)(1 - pow(b1, t)), (float)(1 - pow(b2, t)), 1.0f};
    kl_persist *p = kl_session_find(r->s, "optimizer.hyper");
    assert_non_null(p);
    memcpy(p->ptr, h, sizeof h);
    kl_kargs a = {t, 1};
    kl_exec_run(r->e, KL_ALL_PHASES, &a);
}

static void weights(run *r, double *w)
{
    memcpy(w, kl_session_find(r->s, "w")->ptr, 3 * sizeof(double));
}

static void finish(run *r)
{
    fixture_finish(r);
}

static void assert_close(const double *got, const double *want, double tol)
{
    for (int i = 0; i < 3; i++)
        if (fabs(got[i] - want[i]) > tol * fmax(1, fabs(want[i])))
            fail_msg("w[%d] = %.12g, expected %.12g", i, got[i], want[i]);
}

static const double C[3] = {1, -2, 3};

/* lr as the kernels see it: stored as f32 in the hyper buffer. */
static double f32(double x)
{
    return (double)(float)x;
}

static void test_sgd_momentum_nesterov(void **state)
{
    (void)state;
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        run r;
        start(&r, nesterov ? "sgd(lr = 0.1, momentum = 0.9, nesterov = 1, weight_decay = 0.01)"
                           : "sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.01)", "");
        double w[3] = {0.5, 0.5, 0.5}, m[3] = {0}, got[3];
        for (int t = 1; t <= 3; t++) {
            step(&r, 0.1, 0.9, 0.999, t);
            for (int i = 0; i < 3; i++) {
                double g = C[i] + w[i] + 0.01 * w[i];
                m[i] = 0.9 * m[i] + g;
                double d = nesterov ? g + 0.9 * m[i] : m[i];
                w[i] -= f32(0.1) * d;
            }
        }
        weights(&r, got);
        assert_close(got, w, 1e-9);
        finish(&r);
    }
}

static void test_sgd_plain(void **state)
{
    (void)state;
    run r;
    start(&r, "sgd(lr = 0.05)", "");
    double w[3] = {0.5, 0.5, 0.5}, got[3];
    for (int t = 1; t <= 4; t++) {
        step(&r, 0.05, 0.9, 0.999, t);
        for (int i = 0; i < 3; i++)
            w[i] -= f32(0.05) * (C[i] + w[i]);
    }
    weights(&r, got);
    assert_close(got, w, 1e-9);
    finish(&r);
}

static void adam_reference(double *w, int steps, double lr, double wd, bool decoupled)
{
    double m[3] = {0}, v[3] = {0}, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    for (int t = 1; t <= steps; t++) {
        for (int i = 0; i < 3; i++) {
            double g = C[i] + w[i];
            if (!decoupled)
                g += wd * w[i];
            m[i] = b1 * m[i] + (1 - b1) * g;
            v[i] = b2 * v[i] + (1 - b2) * g * g;
            double mh = m[i] / (double)(float)(1 - pow(b1, t)), vh = v[i] / (double)(float)(1 - pow(b2, t));
            double u = mh / (sqrt(vh) + eps);
            if (decoupled)
                u += wd * w[i];
            w[i] -= f32(lr) * u;
        }
    }
}

static void test_adam_and_adamw(void **state)
{
    (void)state;
    for (int decoupled = 0; decoupled < 2; decoupled++) {
        run r;
        start(&r, decoupled ? "adamw(lr = 0.01, weight_decay = 0.1)" : "adam(lr = 0.01, weight_decay = 0.1)", "");
        for (int t = 1; t <= 5; t++)
            step(&r, 0.01, 0.9, 0.999, t);
        double w[3] = {0.5, 0.5, 0.5}, got[3];
        adam_reference(w, 5, 0.01, 0.1, decoupled);
        weights(&r, got);
        assert_close(got, w, 1e-6);
        finish(&r);
    }
}

static void test_clipping(void **state)
{
    (void)state;
    run r;
    start(&r, "sgd(lr = 0.1)", "clip = 0.5");
    step(&r, 0.1, 0.9, 0.999, 1);
    double w[3] = {0.5, 0.5, 0.5}, g[3], norm = 0, got[3];
    for (int i = 0; i < 3; i++) {
        g[i] = C[i] + w[i];
        norm += g[i] * g[i];
    }
    /* The clip scale is computed in f32 on the device. */
    double scale = fmin(1.0, 0.5 / (sqrt(norm) + 1e-6));
    for (int i = 0; i < 3; i++)
        w[i] -= f32(0.1) * g[i] * scale;
    weights(&r, got);
    assert_close(got, w, 1e-6);
    finish(&r);
}

/* Flags as a command line gives them: call values, --lr after --set
 * optimizer, --data DIR as a path, shard refused. */
static void test_flag_values(void **state)
{
    (void)state;
    FILE *devnull = fopen("/dev/null", "w");
    kl_diag_set_stream(devnull);
    ir_attrs a = {0};
    const char *kv[] = {"lr", "0.5", "optimizer", "sgd(0.2, momentum = 0.9)", "loss_scale", "static(8)",
                        "data", "data", NULL};
    assert_int_equal(kl_train_set_all(&a, kv), 0);
    kl_train_config c;
    kl_train_read(&a, &c);
    assert_int_equal(c.opt.kind, KL_OPT_SGD);
    assert_true(c.opt.lr == 0.5);
    assert_true(c.opt.momentum == 0.9);
    assert_false(c.loss_scale.dynamic);
    assert_true(c.loss_scale.init == 8);
    assert_string_equal(c.data_format, "idx");
    assert_string_equal(c.data_path, "data");
    kl_train_config_free(&c);
    assert_int_equal(kl_train_set(&a, "shard", "zero4"), -1);
    assert_int_equal(kl_train_set(&a, "shard", "zero3"), 0);
    assert_int_equal(kl_train_set(&a, "shard", "zero2"), 0);
    assert_int_equal(kl_train_set(&a, "shard", "zero1"), 0);
    assert_int_equal(kl_train_set(&a, "shard", "none"), 0);
    assert_int_equal(kl_train_set(&a, "optimizer", "sgd(lr=)"), -1);
    assert_int_equal(kl_train_set(&a, "optimizer", "sgd(lr=0.1) x"), -1);
    ir_attrs_free(&a);
    kl_diag_set_stream(NULL);
    fclose(devnull);
}

static void schedule_config(kl_train_config *c, const char *sched)
{
    ir_attrs a = {0};
    assert_int_equal(kl_train_set(&a, "schedule", sched), 0);
    kl_train_read(&a, c);
    ir_attrs_free(&a);
}

static void test_schedules(void **state)
{
    (void)state;
    kl_train_config c;
    schedule_config(&c, "constant");
    assert_true(kl_schedule_lr(&c, 0.1, 50, 100) == 0.1);
    kl_train_config_free(&c);

    ir_attrs a = {0};
    assert_int_equal(kl_train_set(&a, "schedule", "cosine"), 0);
    kl_train_read(&a, &c);
    assert_true(fabs(kl_schedule_lr(&c, 1.0, 1, 101) - 1.0) < 1e-12);
    assert_true(fabs(kl_schedule_lr(&c, 1.0, 51, 101) - 0.5) < 1e-12);
    assert_true(fabs(kl_schedule_lr(&c, 1.0, 101, 101) - 0.0) < 1e-12);
    kl_train_config_free(&c);
    ir_attrs_free(&a);

    /* warmup_cosine(warmup = 10): linear to the peak, then a half cosine. */
    c = (kl_train_config){0};
    c.sched.kind = KL_SCHED_WARMUP_COSINE;
    c.sched.warmup = 10;
    assert_true(fabs(kl_schedule_lr(&c, 2.0, 5, 110) - 1.0) < 1e-12);
    assert_true(fabs(kl_schedule_lr(&c, 2.0, 10, 110) - 2.0) < 1e-12);
    assert_true(fabs(kl_schedule_lr(&c, 2.0, 11, 110) - 2.0) < 1e-12);
    assert_true(fabs(kl_schedule_lr(&c, 2.0, 110, 110) - 0.0) < 1e-12);

    /* step(every = 10, gamma = 0.5) */
    c.sched.kind = KL_SCHED_STEP;
    c.sched.every = 10;
    c.sched.gamma = 0.5;
    assert_true(fabs(kl_schedule_lr(&c, 1.0, 10, 100) - 1.0) < 1e-12);
    assert_true(fabs(kl_schedule_lr(&c, 1.0, 11, 100) - 0.5) < 1e-12);
    assert_true(fabs(kl_schedule_lr(&c, 1.0, 25, 100) - 0.25) < 1e-12);

    /* linear(warmup = 0, end_lr = 0.1) */
    c.sched.kind = KL_SCHED_LINEAR;
    c.sched.warmup = 0;
    c.sched.min_lr = 0.1;
    assert_true(fabs(kl_schedule_lr(&c, 1.1, 1, 11) - 1.1) < 1e-12);
    assert_true(fabs(kl_schedule_lr(&c, 1.1, 11, 11) - 0.1) < 1e-12);
    assert_true(fabs(kl_schedule_lr(&c, 1.1, 6, 11) - 0.6) < 1e-12);
}

/* kaiming(gain) is normal with std gain / sqrt(fan_in); xavier is uniform
 * in +-gain sqrt(6 / (fan_in + fan_out)). Checked on 256x512 samples. */
static void test_initialisers(void **state)
{
    (void)state;
    ir_value v = {.name = "w", .type = {IR_F64, 2, {256, 512}}};
    ir_attr_val call = {.kind = IR_ATTR_CALL, .s = "kaiming"};
    ir_attrs args = {0};
    ir_attrs_set_float(&args, "gain", M_SQRT2);
    call.args = &args;
    ir_attrs_set(&v.attrs, "init", (ir_attr_val){0});
    v.attrs.v[0].val = call;
    double *x = kl_xmalloc(sizeof(double) * 256 * 512);
    kl_init_values(&v, 7, x);
    double sum = 0, sq = 0;
    for (int i = 0; i < 256 * 512; i++)
        sum += x[i], sq += x[i] * x[i];
    double mean = sum / (256 * 512), std = sqrt(sq / (256 * 512) - mean * mean);
    assert_true(fabs(mean) < 0.003);
    assert_true(fabs(std - M_SQRT2 / 16) / (M_SQRT2 / 16) < 0.01);
    /* Same seed and name, same values; another seed, other values. */
    double *y = kl_xmalloc(sizeof(double) * 256 * 512);
    kl_init_values(&v, 7, y);
    assert_memory_equal(x, y, sizeof(double) * 256 * 512);
    kl_init_values(&v, 8, y);
    assert_true(memcmp(x, y, sizeof(double) * 256 * 512) != 0);
    v.attrs.v[0].val.s = "xavier";
    ir_attrs_set_float(&args, "gain", 1.0);
    kl_init_values(&v, 7, x);
    double bound = sqrt(6.0 / (256 + 512)), lo = 1, hi = -1;
    for (int i = 0; i < 256 * 512; i++)
        lo = fmin(lo, x[i]), hi = fmax(hi, x[i]);
    assert_true(lo >= -bound && hi <= bound && lo < -0.99 * bound && hi > 0.99 * bound);
    free(x);
    free(y);
    ir_attrs_free(&args);
    free(v.attrs.v[0].key);
    free(v.attrs.v);
}

/* The rates over a window that spans an epoch's end: steps of 10 ms,
 * with a 5 s evaluation after step 4 (synthetic times). The window's time
 * is its steps' time, whatever happened between them. */
static void test_step_clock(void **state)
{
    (void)state;
    kl_step_clock c = {0};
    double now = 100.0, ms, sps;
    for (int i = 1; i <= 12; i++) {
        kl_step_clock_add(&c, now, now + 0.010);
        now += 0.010;
        if (i == 4)
            now += 5.0; /* evaluation: in no step */
        if (i == 5 || i == 10 || i == 12) {
            kl_step_clock_window(&c, 64, &ms, &sps);
            assert_true(fabs(ms - 10.0) < 1e-9);
            assert_true(fabs(sps - 6400.0) < 1e-6);
        }
    }
    assert_int_equal(c.window_steps, 0);
    /* An empty window: zeroes, not a division by zero. */
    kl_step_clock_window(&c, 64, &ms, &sps);
    assert_true(ms == 0 && sps == 0);
    /* The run: 12 steps, 0.12 s; timed: the 2 after the 10 warm-up steps. */
    assert_int_equal(c.run_steps, 12);
    kl_step_clock_run(&c, 64, &ms, &sps);
    assert_true(fabs(ms - 10.0) < 1e-9 && fabs(sps - 6400.0) < 1e-6);
    c.warm_s = 0.01 * KL_WARM_STEPS - 0.005; /* the warm-up steps took 5 ms less */
    kl_step_clock_timed(&c, 64, &ms, &sps);
    assert_true(fabs(ms - (0.12 - c.warm_s) / 2 * 1e3) < 1e-9);
    /* A resumed run that ran no step: zeroes. */
    kl_step_clock none = {0};
    kl_step_clock_run(&none, 64, &ms, &sps);
    assert_true(ms == 0 && sps == 0);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* rm -rf, without a shell. */
static void remove_tree(const char *path)
{
    assert_int_equal(nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

static void put(const char *root, const char *rel, const char *text)
{
    char *path = kl_xasprintf("%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    free(path);
}

/* The physical cores from a fake sysfs (2 packages, 2 cores each, 2
 * hyperthreads per core: 8 CPUs, 4 cores), and from a fake /proc/cpuinfo
 * when sysfs has no topology. */
static void test_physical_cores(void **state)
{
    (void)state;
    char root[] = "/tmp/kiln-cores-XXXXXX";
    assert_non_null(mkdtemp(root));
    assert_int_equal(kl_cpu_physical_cores(root, false), 0);
    char cpuinfo[2048] = "";
    for (int cpu = 0; cpu < 8; cpu++) {
        int pkg = cpu / 4, core = cpu % 2;
        char rel[128], v[16];
        snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        snprintf(v, sizeof v, "%d\n", pkg);
        put(root, rel, v);
        snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        snprintf(v, sizeof v, "%d\n", core);
        put(root, rel, v);
        size_t n = strlen(cpuinfo);
        snprintf(cpuinfo + n, sizeof cpuinfo - n,
                 "processor\t: %d\nmodel name\t: Fake\nphysical id\t: %d\nsiblings\t: 4\ncore id\t\t: %d\n\n", cpu, pkg,
                 core);
    }
    put(root, "sys/devices/system/cpu/online", "0-7\n"); /* not a cpuN folder: ignored */
    assert_int_equal(kl_cpu_physical_cores(root, false), 4);
    /* No topology in sysfs: /proc/cpuinfo says the same. */
    char *sys = kl_xasprintf("%s/sys", root);
    remove_tree(sys);
    free(sys);
    put(root, "proc/cpuinfo", cpuinfo);
    assert_int_equal(kl_cpu_physical_cores(root, false), 4);
    /* A cpuinfo without core ids (some VMs): nothing to go by. */
    put(root, "proc/cpuinfo", "processor\t: 0\n\nprocessor\t: 1\n");
    assert_int_equal(kl_cpu_physical_cores(root, false), 0);
    remove_tree(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_sgd_momentum_nesterov),
        cmocka_unit_test(test_adam_and_adamw),
        cmocka_unit_test(test_clipping),
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_flag_values),
        cmocka_unit_test(test_initialisers),
        cmocka_unit_test(test_step_clock),
        cmocka_unit_test(test_physical_cores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
