/* Mixed precision and accumulation:
 *  - bf16 and f16 conversions round to nearest even, against a reference
 *    that finds the nearest representable value by exact comparison, on
 *    edge cases (subnormals, inf, NaN, the largest values, halfway ties)
 *    and on a million random bit patterns; for the runtime's conversions
 *    and for the ones the generated kernels use (compiled from the prelude);
 *  - an fp16 step whose gradients overflow changes nothing (the update is
 *    skipped) and says so through _grads_finite;
 *  - batch B with accumulate N gives the parameters of batch B*N with
 *    accumulate 1 after one step, within fp32 reduction-order error. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "codegen/kir.h"
#include "driver/compile.h"
#include "runtime/exec/session.h"
#include "session_fixture.h"

/* ---- reference conversions ---- */

static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The nearest of the 16-bit patterns to x, ties to the even pattern:
 * binary search over the ordered non-negative finite values. */
static uint16_t nearest(double x, double (*value)(uint16_t), uint16_t max_finite, uint16_t inf)
{
    if (isnan(x))
        return 0; /* checked separately */
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (isinf(a))
        return sign | inf;
    uint16_t lo = 0, hi = max_finite;
    if (a >= value(max_finite)) {
        /* Above the largest finite value: inf once past the halfway point
         * to the next binade step (RNE rounds there to the even pattern,
         * which is inf). */
        double step = value(max_finite) - value(max_finite - 1);
        return sign | (a >= value(max_finite) + step / 2 ? inf : max_finite);
    }
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (value(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - value(lo), dh = value(hi) - a;
    uint16_t r = dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
    return sign | r;
}

static uint16_t ref_bf16(float f) { return nearest(f, bf16_value, 0x7f7f, 0x7f80); }
static uint16_t ref_f16(float f) { return nearest(f, f16_value, 0x7bff, 0x7c00); }

typedef void (*convert_fn)(const float *x, uint16_t *b, uint16_t *h, float *bb, float *hh, int n);

/* The generated kernels' conversions: the C prelude, compiled. */
static convert_fn prelude_converter(void)
{
    kl_buf src = {0};
    kl_buf_puts(&src, kir_c_prelude());
    kl_buf_puts(&src, "void conv(const float *x, uint16_t *b, uint16_t *h, float *bb, float *hh, int n)\n"
                      "{\n"
                      "    for (int i = 0; i < n; i++) {\n"
                      "        b[i] = kl_f32_to_bf16(x[i]); h[i] = kl_f32_to_f16(x[i]);\n"
                      "        bb[i] = kl_bf16_to_f32(b[i]); hh[i] = kl_f16_to_f32(h[i]);\n"
                      "    }\n"
                      "}\n");
    void *lib = kl_cpu_jit(src.s, NULL, true, NULL);
    kl_buf_free(&src);
    assert_non_null(lib);
    return (convert_fn)dlsym(lib, "conv");
}

static void check_one(float x, uint16_t gb, uint16_t gh, float back_b, float back_h)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x)) {
        if (!isnan(bf16_value(gb)) || !isnan(f16_value(gh)) || !isnan(back_b) || !isnan(back_h))
            fail_msg("NaN 0x%08x did not stay NaN", u);
        return;
    }
    if (gb != ref_bf16(x))
        fail_msg("bf16(0x%08x = %.9g) = 0x%04x, expected 0x%04x", u, x, gb, ref_bf16(x));
    if (gh != ref_f16(x))
        fail_msg("f16(0x%08x = %.9g) = 0x%04x, expected 0x%04x", u, x, gh, ref_f16(x));
    if ((double)back_b != bf16_value(gb) || (double)back_h != f16_value(gh))
        fail_msg("widening 0x%04x / 0x%04x back to f32 is wrong", gb, gh);
}

static void test_conversions(void **state)
{
    (void)state;
    static const uint32_t edges[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, /* zeros, inf, NaN */
        0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff, /* the largest floats: bf16 rounding to inf or not */
        0x00000001, 0x80000001, 0x007fffff, 0x00800000, 0x00400000, /* f32 subnormals and the smallest normal */
        0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x47800000, /* around f16's max (65504) and overflow */
        0x38800000, 0x387fffff, 0x33800000, 0x33000000, 0x33000001, 0x32ffffff, /* f16 normal/subnormal/zero limits */
        0x3f808000, 0x3f818000, 0x3f800001, 0x3f80ffff, /* bf16 ties to even, either way */
        0x3f801000, 0x3f803000, 0x3f800fff, /* f16 ties */
        0x3eaaaaab, 0xc2c80000, 0x40490fdb,
    };
    int n = (int)KL_ARRAY_LEN(edges) + 1000000;
    float *x = kl_xmalloc(sizeof(float) * (size_t)n);
    uint64_t s = 7;
    for (int i = 0; i < n; i++) {
        uint32_t u;
        if (i < (int)KL_ARRAY_LEN(edges)) {
            u = edges[i];
        } else {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            u = (uint32_t)(s >> 32);
            /* Half the samples in f16's range, where rounding is busiest. */
            if (i % 2)
                u = (u & 0x80000000u) | (0x33000000u + (u % (0x47800000u - 0x33000000u)));
        }
        memcpy(&x[i], &u, 4);
    }
    uint16_t *b = kl_xmalloc(2 * (size_t)n), *h = kl_xmalloc(2 * (size_t)n);
    float *bb = kl_xmalloc(4 * (size_t)n), *hh = kl_xmalloc(4 * (size_t)n);
    /* The runtime's conversions. */
    for (int i = 0; i < n; i++) {
        uint16_t gb = kl_f32_to_bf16(x[i]), gh = kl_f32_to_f16(x[i]);
        check_one(x[i], gb, gh, kl_bf16_to_f32(gb), kl_f16_to_f32(gh));
    }
    /* The generated kernels' conversions. */
    convert_fn conv = prelude_converter();
    assert_non_null(conv);
    conv(x, b, h, bb, hh, n);
    for (int i = 0; i < n; i++)
        check_one(x[i], b[i], h[i], bb[i], hh[i]);
    /* Every f16 and bf16 pattern widens exactly and narrows back to itself. */
    for (uint32_t p = 0; p < 65536; p++) {
        uint16_t q = (uint16_t)p;
        if (!isnan(f16_value(q)))
            assert_int_equal(kl_f32_to_f16(kl_f16_to_f32(q)), q);
        if (!isnan(bf16_value(q)))
            assert_int_equal(kl_f32_to_bf16(kl_bf16_to_f32(q)), q);
    }
    free(x);
    free(b);
    free(h);
    free(bb);
    free(hh);
}

/* ---- training steps ---- */

typedef fixture_run run;

static void start(run *r, const char *text, const char *const *kv)
{
    kl_compile_opts cc = {.kv = kv, .mode = KL_MODE_TRAIN, .verify = true};
    kl_compiled *c = fixture_compile_text("test.kl", text, &cc);
    assert_non_null(c);
    fixture_start(r, c, 5);
    assert_non_null(r->e);
}

static void finish(run *r)
{
    fixture_finish(r);
}

static void set_f32(run *r, const char *name, const float *v, size_t n)
{
    kl_persist *p = kl_session_find(r->s, name);
    assert_non_null(p);
    r->be->ops->copy_in(r->be, p->ptr, v, n * sizeof(float));
}

static const char *mlp =
    "model m {\n"
    "  input x : f32[batch, 6]\n"
    "  input y : i32[batch]\n"
    "  param w1 : [6, 8] init = normal(std = 0.5)\n"
    "  param b1 : [8] init = normal(std = 0.1)\n"
    "  param w2 : [8, 3] init = normal(std = 0.5)\n"
    "  loss = cross_entropy(relu(x @ w1 + b1) @ w2, y)\n"
    "}\n";

static void feed(run *r, int64_t first, int64_t n)
{
    float x[64 * 6];
    int32_t y[64];
    for (int64_t i = 0; i < n; i++) {
        for (int k = 0; k < 6; k++)
            x[i * 6 + k] = (float)sin(0.7 * (double)(first + i) + k);
        y[i] = (int32_t)((first + i) % 3);
    }
    const ir_graph *g = r->e->g;
    kl_exec_write(r->e, ir_find_value(g, "x"), x, (size_t)(n * 6) * sizeof(float));
    kl_exec_write(r->e, ir_find_value(g, "y"), y, (size_t)n * sizeof(int32_t));
}

static void read_params(run *r, float *out)
{
    const char *names[] = {"w1", "b1", "w2"};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        kl_persist *p = kl_session_find(r->s, names[i]);
        size_t n = (size_t)ir_type_numel(&p->type);
        r->be->ops->copy_out(r->be, out + off, p->ptr, n * sizeof(float));
        off += n;
    }
}

#define NPARAMS (48 + 8 + 24)

static void test_fp16_overflow_skips_the_update(void **state)
{
    (void)state;
    const char *kv[] = {"batch", "16", "precision", "fp16", "optimizer", "adamw", NULL};
    run r;
    start(&r, mlp, kv);
    float before[NPARAMS], after[NPARAMS];
    read_params(&r, before);
    float hyper[4] = {0.01f, 0.1f, 0.001f, 1.0f / 65536};
    set_f32(&r, "optimizer.hyper", hyper, 4);
    float inf = INFINITY;
    set_f32(&r, "loss_scale", &inf, 1);
    feed(&r, 0, 16);
    kl_kargs a = {0, 1};
    kl_exec_run(r.e, KL_ALL_PHASES, &a);
    const ir_graph *g = r.e->g;
    int finite = -1;
    for (int i = 0; i < g->reports.n; i++)
        if (!strcmp(g->reports.v[i].name, "_grads_finite"))
            finite = g->reports.v[i].value;
    assert_true(finite >= 0);
    assert_true(kl_exec_scalar(r.e, finite) == 0.0);
    read_params(&r, after);
    assert_memory_equal(before, after, sizeof before);
    /* A normal scale: the step applies. */
    float scale = 65536;
    set_f32(&r, "loss_scale", &scale, 1);
    kl_exec_run(r.e, KL_ALL_PHASES, &a);
    assert_true(kl_exec_scalar(r.e, finite) == 1.0);
    read_params(&r, after);
    assert_true(memcmp(before, after, sizeof before) != 0);
    finish(&r);
}

static void test_accumulation_matches_a_big_batch(void **state)
{
    (void)state;
    const char *big_kv[] = {"batch", "32", "optimizer", "sgd", "lr", "0.1", NULL};
    const char *small_kv[] = {"batch", "8", "accumulate", "4", "optimizer", "sgd", "lr", "0.1", NULL};
    run big, small;
    start(&big, mlp, big_kv);
    start(&small, mlp, small_kv);
    float hyper_big[4] = {0.1f, 1, 1, 1.0f}, hyper_small[4] = {0.1f, 1, 1, 0.25f};
    set_f32(&big, "optimizer.hyper", hyper_big, 4);
    set_f32(&small, "optimizer.hyper", hyper_small, 4);
    feed(&big, 0, 32);
    kl_kargs a = {0, 1};
    kl_exec_run(big.e, KL_ALL_PHASES, &a);
    double loss_small = 0;
    for (int m = 0; m < 4; m++) {
        feed(&small, 8 * m, 8);
        kl_kargs am = {m, 1};
        unsigned phases = (1u << IR_PHASE_FORWARD) | (1u << IR_PHASE_BACKWARD);
        if (m == 3)
            phases |= 1u << IR_PHASE_UPDATE;
        kl_exec_run(small.e, phases, &am);
        loss_small += kl_exec_scalar(small.e, small.e->g->loss) / 4;
    }
    double loss_big = kl_exec_scalar(big.e, big.e->g->loss);
    assert_true(fabs(loss_big - loss_small) <= 1e-6 * fabs(loss_big));
    float pb[NPARAMS], ps[NPARAMS], p0[NPARAMS];
    read_params(&big, pb);
    read_params(&small, ps);
    /* The bound: fp32 sums of 32 terms in another order, relative to the
     * parameters' magnitude. */
    double worst = 0, scale = 0;
    for (int i = 0; i < NPARAMS; i++) {
        worst = fmax(worst, fabs((double)pb[i] - ps[i]));
        scale = fmax(scale, fabs((double)pb[i]));
    }
    if (!(worst <= 1e-6 * scale))
        fail_msg("parameters differ by %g (largest magnitude %g)", worst, scale);
    /* And the step did something. */
    run fresh;
    start(&fresh, mlp, big_kv);
    read_params(&fresh, p0);
    assert_true(memcmp(p0, pb, sizeof p0) != 0);
    finish(&fresh);
    finish(&big);
    finish(&small);
}

/* f64 is explicit: a bf16 plan leaves f64 convolutions and matmuls, and
 * their gradients, in f64 (it once gave their gradient GEMMs an f32
 * result, which the f64 GEMM overran). One step of such a model in bf16
 * gives exactly the fp32 plan's parameters. */
static const char *f64_cnn =
    "model m {\n"
    "  input label : i32[batch]\n"
    "  param x : f64[4, 2, 6, 6] init = normal(std = 1)\n"
    "  param k : f64[5, 2, 3, 3] init = normal(std = 0.5)\n"
    "  param w : f64[180, 3] init = normal(std = 0.1)\n"
    "  loss = cross_entropy(flatten(relu(conv2d(x, k, pad = 1))) @ w, label)\n"
    "}\n";

static void f64_step(const char *precision, double *out, size_t n)
{
    const char *kv[] = {"batch", "4", "precision", precision, "optimizer", "sgd", "lr", "0.1", NULL};
    run r;
    start(&r, f64_cnn, kv);
    const ir_graph *g = r.e->g;
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *nd = ir_nd(g, i);
        if (nd->dead || (nd->op != IR_OP_MATMUL && ir_ops[nd->op].kclass != IR_KC_CONV))
            continue;
        if (ir_val(g, nd->in.v[0])->type.dtype == IR_F64)
            assert_int_equal(ir_val(g, nd->out.v[0])->type.dtype, IR_F64);
    }
    int32_t label[4] = {0, 1, 2, 1};
    kl_exec_write(r.e, ir_find_value(g, "label"), label, sizeof label);
    kl_kargs a = {0, 1};
    kl_exec_run(r.e, KL_ALL_PHASES, &a);
    const char *names[] = {"x", "k", "w"};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        kl_persist *p = kl_session_find(r.s, names[i]);
        size_t m = (size_t)ir_type_numel(&p->type);
        assert_true(off + m <= n);
        r.be->ops->copy_out(r.be, out + off, p->ptr, m * sizeof(double));
        off += m;
    }
    finish(&r);
}

static void test_f64_stays_f64_under_bf16(void **state)
{
    (void)state;
    enum { N = 4 * 2 * 36 + 5 * 18 + 180 * 3 };
    static double fp32[N], bf16[N];
    f64_step("fp32", fp32, N);
    f64_step("bf16", bf16, N);
    assert_memory_equal(fp32, bf16, sizeof fp32);
}

/* A call marked fp32 (precision = fp32, or its def in keep_fp32) runs in
 * fp32 forward and backward: a model whose every call is marked trains
 * under bf16 exactly as in fp32, and has no bf16 value and no
 * low-precision copy of a param. (The backward GEMMs once ran in bf16 on
 * a cast-down gradient and the params' bf16 copies.) */
static const char *kept_mlp_fmt =
    "def dense(x: f32[n, k], units) {\n"
    "  param w : [k, units] init = normal(std = 0.5)\n"
    "  param b : [units] init = normal(std = 0.1)\n"
    "  return x @ w + b\n"
    "}\n"
    "model m {\n"
    "  input x : f32[batch, 6]\n"
    "  input y : i32[batch]\n"
    "  loss = cross_entropy(dense(relu(dense(x, 8%s)), 3%s), y)\n"
    "}\n";

static void kept_step(const char *text, const char *precision, const char *keep, float *out)
{
    const char *kv[] = {"batch", "16", "precision", precision, "optimizer", "sgd", "lr", "0.5",
                        keep ? "keep_fp32" : NULL, keep, NULL};
    run r;
    start(&r, text, kv);
    const ir_graph *g = r.e->g;
    for (int i = 0; i < g->values.n; i++) {
        const ir_value *v = ir_val(g, i);
        if (v->type.dtype == IR_BF16)
            fail_msg("%s: value %s is bf16", precision, v->name ? v->name : "(unnamed)");
    }
    float hyper[4] = {0.5f, 1, 1, 1};
    set_f32(&r, "optimizer.hyper", hyper, 4);
    feed(&r, 0, 16);
    kl_kargs a = {0, 1};
    kl_exec_run(r.e, KL_ALL_PHASES, &a);
    const char *names[] = {"dense.1.w", "dense.1.b", "dense.2.w", "dense.2.b"};
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        kl_persist *p = kl_session_find(r.s, names[i]);
        assert_non_null(p);
        size_t n = (size_t)ir_type_numel(&p->type);
        r.be->ops->copy_out(r.be, out + off, p->ptr, n * sizeof(float));
        off += n;
    }
    finish(&r);
}

static void test_kept_calls_train_in_fp32(void **state)
{
    (void)state;
    enum { N = 6 * 8 + 8 + 8 * 3 + 3 };
    float ref[N], got[N];
    char *marked = kl_xasprintf(kept_mlp_fmt, ", precision = fp32", ", precision = fp32");
    char *plain = kl_xasprintf(kept_mlp_fmt, "", "");
    kept_step(plain, "fp32", NULL, ref);
    kept_step(marked, "bf16", NULL, got);
    assert_memory_equal(ref, got, sizeof ref);
    kept_step(plain, "bf16", "[dense]", got);
    assert_memory_equal(ref, got, sizeof ref);
    free(marked);
    free(plain);
}

/* The gradient of max over an axis is split evenly among tied maxima (as
 * JAX and torch.amax do): for the row [3, 7, 7, 1] and w = 1, the loss
 * mean(max(image * w)) has gradient [0, 3.5, 3.5, 0], summing to 7; the
 * full gradient to every tie gave [0, 7, 7, 0]. One SGD step at lr 1, in
 * fp32 and in bf16 (where rounding makes ties common). */
static const char *max_ties =
    "model m {\n"
    "  input image : u8[batch, 1, 4]\n"
    "  param w : [4] init = ones\n"
    "  loss = mean(max(f32(image) * w, axis = 2))\n"
    "}\n";

static void test_max_splits_the_gradient_among_ties(void **state)
{
    (void)state;
    const char *precisions[] = {"fp32", "bf16"};
    for (int p = 0; p < 2; p++) {
        const char *kv[] = {"batch", "1", "precision", precisions[p], "optimizer", "sgd", "lr", "1", NULL};
        run r;
        start(&r, max_ties, kv);
        float hyper[4] = {1, 1, 1, 1};
        set_f32(&r, "optimizer.hyper", hyper, 4);
        uint8_t image[4] = {3, 7, 7, 1};
        kl_exec_write(r.e, ir_find_value(r.e->g, "image"), image, sizeof image);
        kl_kargs a = {0, 1};
        kl_exec_run(r.e, KL_ALL_PHASES, &a);
        float w[4];
        r.be->ops->copy_out(r.be, w, kl_session_find(r.s, "w")->ptr, sizeof w);
        const float want[4] = {1, -2.5f, -2.5f, 1};
        for (int i = 0; i < 4; i++)
            if (w[i] != want[i])
                fail_msg("%s: w[%d] = %g after one step, expected %g", precisions[p], i, (double)w[i], (double)want[i]);
        finish(&r);
    }
}

/* NaN propagates as in PyTorch (and the CUDA printer, ctest
 * cuda.emulate.nan_inf): maximum/minimum keep a NaN of either operand,
 * relu keeps NaN, max over an axis is NaN where the row holds one. Known
 * values through the CPU backend, unfused so each value has a buffer. */
static const char *nan_model =
    "model m {\n"
    "  input x : f32[batch, 4]\n"
    "  input y : f32[batch, 4]\n"
    "  param w : [4] init = ones\n"
    "  mx = maximum(x * w, y)\n"
    "  mn = minimum(y, x * w)\n"
    "  r = relu(x * w)\n"
    "  m = max(x * w, axis = 1)\n"
    "  loss = mean(mx) + mean(mn) + mean(r) + mean(m)\n"
    "}\n"
    "train { batch = 2 }\n";

static void expect_same(const char *what, const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++)
        if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i]))))
            fail_msg("%s[%d] = %g, expected %g", what, i, (double)got[i], (double)want[i]);
}

/* A kept-values run of a model: compiled unfused on the CPU backend with
 * one thread, the values named in names[0..n) readable after a run (their
 * ids in keep). The caller writes inputs, runs and frees with free_kept. */
typedef struct kept_run {
    kl_backend *be;
    kl_session *s;
    kl_exec *e;
    ir_graph *g;
} kept_run;

static kept_run run_keeping(const char *file, const char *text, const char *const *names, int n, int *keep)
{
    kl_compile_opts cc = {.mode = KL_MODE_TRAIN, .verify = true, .no_fusion = true, .stop_after = "passes"};
    kl_compiled *c = fixture_compile_text(file, text, &cc);
    assert_non_null(c);
    ir_graph *g = kl_compiled_take_graph(c);
    for (int i = 0; i < n; i++) {
        keep[i] = ir_find_value(g, names[i]);
        assert_true(keep[i] >= 0);
    }
    kept_run r = {.be = fixture_cpu_backend(), .g = g};
    r.s = kl_session_new(r.be, 1);
    kl_plan_opts popts = {.keep = keep, .nkeep = n};
    cc.stop_after = NULL;
    cc.plan = &popts;
    c = kl_compile_graph(g, &cc);
    assert_non_null(c);
    r.e = kl_compiled_exec(r.s, c, NULL);
    assert_non_null(r.e);
    return r;
}

static void free_kept(kept_run *r)
{
    kl_exec_free(r->e);
    kl_session_free(r->s);
    r->be->ops->destroy(r->be);
}

static void test_nan_propagates(void **state)
{
    (void)state;
    const char *names[] = {"mx", "mn", "r", "m"};
    int keep[4];
    kept_run r = run_keeping("nan.kl", nan_model, names, 4, keep);
    kl_exec *e = r.e;
    ir_graph *g = r.g;
    const float x[8] = {1, NAN, -INFINITY, 2, 3, 4, 5, 6};
    const float y[8] = {NAN, 0, 0, INFINITY, 0, 0, 0, 0};
    kl_exec_write(e, ir_find_value(g, "x"), x, sizeof x);
    kl_exec_write(e, ir_find_value(g, "y"), y, sizeof y);
    kl_kargs a = {0, 1};
    kl_exec_run(e, 1u << IR_PHASE_FORWARD, &a);
    float got[8];
    const float want_mx[8] = {NAN, NAN, 0, INFINITY, 3, 4, 5, 6};
    const float want_mn[8] = {NAN, NAN, -INFINITY, 2, 0, 0, 0, 0};
    const float want_r[8] = {1, NAN, 0, 2, 3, 4, 5, 6};
    const float want_m[2] = {NAN, 6};
    kl_exec_read(e, keep[0], got, sizeof got);
    expect_same("maximum", got, want_mx, 8);
    kl_exec_read(e, keep[1], got, sizeof got);
    expect_same("minimum", got, want_mn, 8);
    kl_exec_read(e, keep[2], got, sizeof got);
    expect_same("relu", got, want_r, 8);
    kl_exec_read(e, keep[3], got, 2 * sizeof(float));
    expect_same("max", got, want_m, 2);
    free_kept(&r);
}

/* Float to integer is defined for every input, the same on the GPU
 * (cuda.emulate.nan_inf): toward zero, NaN -> 0, beyond i64's range
 * saturating; i32 and u8 keep the low bits of that i64. Before kl_ftoi,
 * C's conversion was undefined here (x86 gave INT64_MIN for NaN and both
 * infinities). Unfused, so that the kept casts are stored. */
static const char *cast_model =
    "model m {\n"
    "  input x : f32[batch, 16]\n"
    "  param w : [16] init = ones\n"
    "  a = i64(x * w)\n"
    "  b = i32(x * w)\n"
    "  c = u8(x * w)\n"
    "  loss = mean(x * w) + mean(f32(a) + f32(b) + f32(c)) * 0\n"
    "}\n"
    "train { batch = 1 }\n";

static void test_float_to_int_is_defined(void **state)
{
    (void)state;
    const float x[16] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 3e9f, -3e9f, -2.75f,
                         2.75f, 0.5f, 9.3e18f, -9.3e18f, 255.9f, 256.5f, -1.5f, 0};
    const int64_t want_a[16] = {0, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, 3000000000LL, -3000000000LL, -2,
                                2, 0, INT64_MAX, INT64_MIN, 255, 256, -1, 0};
    const int32_t want_b[16] = {0, -1, 0, -1, 0, -1294967296, 1294967296, -2, 2, 0, -1, 0, 255, 256, -1, 0};
    const uint8_t want_c[16] = {0, 255, 0, 255, 0, 0, 0, 254, 2, 0, 255, 0, 255, 0, 255, 0};
    const char *names[] = {"a", "b", "c"};
    int keep[3];
    kept_run r = run_keeping("cast.kl", cast_model, names, 3, keep);
    kl_exec *e = r.e;
    ir_graph *g = r.g;
    kl_exec_write(e, ir_find_value(g, "x"), x, sizeof x);
    kl_kargs ka = {0, 1};
    kl_exec_run(e, 1u << IR_PHASE_FORWARD, &ka);
    int64_t a[16];
    int32_t b[16];
    uint8_t u[16];
    kl_exec_read(e, keep[0], a, sizeof a);
    kl_exec_read(e, keep[1], b, sizeof b);
    kl_exec_read(e, keep[2], u, sizeof u);
    for (int i = 0; i < 16; i++) {
        if (a[i] != want_a[i] || b[i] != want_b[i] || u[i] != want_c[i])
            fail_msg("x = %g gave i64 %lld, i32 %d, u8 %d; expected %lld, %d, %d", (double)x[i], (long long)a[i], b[i],
                     u[i], (long long)want_a[i], want_b[i], want_c[i]);
    }
    free_kept(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversions),
        cmocka_unit_test(test_fp16_overflow_skips_the_update),
        cmocka_unit_test(test_accumulation_matches_a_big_batch),
        cmocka_unit_test(test_f64_stays_f64_under_bf16),
        cmocka_unit_test(test_max_splits_the_gradient_among_ties),
        cmocka_unit_test(test_kept_calls_train_in_fp32),
        cmocka_unit_test(test_nan_propagates),
        cmocka_unit_test(test_float_to_int_is_defined),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
