/* Fused and unfused plans compute the same training: the same model, seed
 * and inputs run three SGD steps both ways; every step's loss and every
 * persistent value afterwards must agree within a relative error of 1e-5
 * (of the tensor's largest magnitude). The fused kernels evaluate the same
 * expressions, but sums may run in another order, so they are not
 * bitwise equal.
 *
 *   fusion_equiv MODEL.kl [BATCH [PRECISION]]
 *
 * PRECISION (fp32, bf16, fp16) overrides the train block's; in 16 bits
 * the bound is the format's rounding (KILN_EQUIV_BOUND, default 1e-5,
 * overrides it): a fused kernel keeps an intermediate in f32 that the
 * unfused plan stores in 16 bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "runtime/exec/session.h"
#include "unit/session_fixture.h"

#define BOUND 1e-5

static kl_exec *make(kl_session *s, const char *path, const char *batch, const char *precision, bool fuse)
{
    const char *kv[] = {"batch", batch, "optimizer", "sgd", "lr", "0.05", precision ? "precision" : NULL, precision, NULL};
    kl_compile_opts co = {.kv = kv, .mode = KL_MODE_TRAIN, .verify = true, .no_fusion = !fuse};
    kl_compiled *c = kl_compile_file(path, &co);
    if (!c)
        exit(1);
    kl_exec *e = kl_compiled_exec(s, c, NULL);
    if (!e)
        exit(1);
    return e;
}

static void feed(kl_exec *e, uint64_t seed)
{
    const ir_graph *g = e->g;
    uint64_t s = seed;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_INPUT)
            continue;
        int64_t n = ir_type_numel(&v->type);
        void *h = kl_xcalloc((size_t)ir_type_bytes(&v->type), 1);
        for (int64_t k = 0; k < n; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            kl_store_as(v->type.dtype, h, k, v->type.dtype == IR_U8 ? (double)((s >> 33) % 256) : (double)((s >> 33) % 10));
        }
        kl_exec_write(e, v->id, h, (size_t)ir_type_bytes(&v->type));
        free(h);
    }
}

static void set_hyper(kl_session *s, int t)
{
    float h[4] = {0.05f, 1 - powf(0.9f, (float)t), 1 - powf(0.999f, (float)t), 1.0f};
    kl_persist *p = kl_session_find(s, "optimizer.hyper");
    s->be->ops->copy_in(s->be, p->ptr, h, sizeof h);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fusion_equiv MODEL.kl [BATCH]\n");
        return 2;
    }
    const char *batch = argc > 2 ? argv[2] : "8", *precision = argc > 3 ? argv[3] : NULL;
    const char *bound_env = getenv("KILN_EQUIV_BOUND");
    double bound = bound_env ? strtod(bound_env, NULL) : BOUND;
    kl_backend *be = fixture_cpu_backend();
    kl_session *sa = kl_session_new(be, 3), *sb = kl_session_new(be, 3);
    kl_exec *fused = make(sa, argv[1], batch, precision, true), *plain = make(sb, argv[1], batch, precision, false);
    int failures = 0;
    double worst = 0;
    for (int t = 1; t <= 3; t++) {
        feed(fused, (uint64_t)t);
        feed(plain, (uint64_t)t);
        set_hyper(sa, t);
        set_hyper(sb, t);
        kl_kargs a = {t, 3};
        kl_exec_run(fused, KL_ALL_PHASES, &a);
        kl_exec_run(plain, KL_ALL_PHASES, &a);
        double la = kl_exec_scalar(fused, fused->g->loss), lb = kl_exec_scalar(plain, plain->g->loss);
        double err = fabs(la - lb) / fmax(1e-6, fabs(lb));
        printf("step %d: loss fused %.9g, unfused %.9g (relative error %.2g)\n", t, la, lb, err);
        if (!(err <= bound))
            failures++;
    }
    for (int i = 0; i < sb->persist.n; i++) {
        kl_persist *pb = &sb->persist.v[i], *pa = kl_session_find(sa, pb->name);
        if (!pa) {
            printf("FAIL: %s missing from the fused plan\n", pb->name);
            failures++;
            continue;
        }
        int64_t n = ir_type_numel(&pb->type);
        size_t bytes = (size_t)ir_type_bytes(&pb->type);
        void *x = kl_xmalloc(bytes), *y = kl_xmalloc(bytes);
        be->ops->copy_out(be, x, pa->ptr, bytes);
        be->ops->copy_out(be, y, pb->ptr, bytes);
        double maxabs = 0, maxdiff = 0;
        for (int64_t k = 0; k < n; k++) {
            double u = kl_load_as(pb->type.dtype, x, k), v = kl_load_as(pb->type.dtype, y, k);
            maxabs = fmax(maxabs, fabs(v));
            maxdiff = fmax(maxdiff, fabs(u - v));
        }
        double err = maxdiff / fmax(maxabs, 1e-6);
        if (err > worst)
            worst = err;
        if (!(err <= bound)) {
            printf("FAIL: %s differs by %.3g relative (bound %.0e)\n", pb->name, err, bound);
            failures++;
        }
        free(x);
        free(y);
    }
    printf("%s: %d persistent values compared after 3 steps, worst relative error %.3g; fused plan %d kernels, unfused %d\n",
           argv[1], sb->persist.n, worst, fused->plan->kernels.n, plain->plan->kernels.n);
    kl_exec_free(fused);
    kl_exec_free(plain);
    kl_session_free(sa);
    kl_session_free(sb);
    be->ops->destroy(be);
    return failures ? 1 : 0;
}
