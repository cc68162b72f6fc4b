/* Finite-difference gradient check of a model file, in double precision.
 *
 *   gradcheck CASE.kl
 *
 * The case is a model in f64 whose loss is a scalar of its params (usually
 * sum(y * r) with r random, so every element of y counts). The generated
 * kernels compute the gradient of every param through the real pipeline
 * and backend; the check compares each with a central difference
 *
 *   (L(p + h) - L(p - h)) / 2h,   h = 1e-6 (or "# h: X" in the case)
 *
 * and fails when |analytic - numeric| / max(1, |analytic|, |numeric|)
 * exceeds the bound (1e-6, or "# tol: X" in the case). Integer inputs get
 * random values in [0, N) from "# range NAME N". At most 48 elements of
 * each param are checked, spread over the tensor. "# eval" differentiates
 * the evaluation graph (batch norm with running statistics, no dropout). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "passes/passes.h"
#include "runtime/exec/session.h"

static double directive(const kl_source *src, const char *key, double dflt)
{
    char pat[64];
    snprintf(pat, sizeof pat, "# %s:", key);
    const char *p = strstr(src->text, pat);
    return p ? strtod(p + strlen(pat), NULL) : dflt;
}

static int64_t range_of(const kl_source *src, const char *name)
{
    char pat[96];
    snprintf(pat, sizeof pat, "# range %s ", name);
    const char *p = strstr(src->text, pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : 2;
}

/* Forward and backward: a fused kernel may compute forward and backward
 * values together (the loss and its gradient). */
static double run_loss(kl_exec *e)
{
    kl_kargs a = {0, 1};
    kl_exec_run(e, (1u << IR_PHASE_FORWARD) | (1u << IR_PHASE_BACKWARD), &a);
    return kl_exec_scalar(e, e->g->loss);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gradcheck CASE.kl\n");
        return 2;
    }
    kl_source src;
    if (kl_source_read(&src, argv[1]))
        return 1;
    double h = directive(&src, "h", 1e-6), tol = directive(&src, "tol", 1e-6);
    ir_graph *g = kl_compile_load(&src, NULL);
    if (!g)
        return 1;
    if (strstr(src.text, "\n# eval"))
        pass_eval_mode(g, NULL);
    kl_compile_opts cc = {.mode = KL_MODE_TRAIN, .verify = true, .stop_after = "passes"};
    kl_compiled *c = kl_compile_graph(g, &cc);
    if (!c)
        return 1;
    g = kl_compiled_take_graph(c);
    kl_cpu_options co = {.threads = 1, .quiet = true};
    kl_backend *be = kl_cpu_backend_new(&co);
    kl_session *s = kl_session_new(be, 42);
    /* The gradients are read after the run: the plan keeps them. */
    int *keep = kl_xcalloc((size_t)g->grads.n + 1, sizeof *keep);
    for (int i = 0; i < g->grads.n; i++)
        keep[i] = g->grads.v[i].grad;
    kl_plan_opts popts = {.keep = keep, .nkeep = g->grads.n};
    cc.stop_after = NULL;
    cc.plan = &popts;
    c = kl_compile_graph(g, &cc);
    free(keep);
    kl_exec *e = c ? kl_compiled_exec(s, c, NULL) : NULL;
    if (!e)
        return 1;
    /* Integer inputs: random values in their declared range. */
    uint64_t rng = 12345;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_INPUT)
            continue;
        int64_t n = ir_type_numel(&v->type), range = range_of(&src, v->name);
        void *host = kl_xcalloc((size_t)ir_type_bytes(&v->type), 1);
        for (int64_t k = 0; k < n; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            double x = ir_dtype_is_float(v->type.dtype) ? (double)(rng >> 11) / 9007199254740992.0 * 2 - 1
                                                          : (double)((rng >> 33) % (uint64_t)range);
            kl_store_as(v->type.dtype, host, k, x);
        }
        kl_exec_write(e, v->id, host, (size_t)ir_type_bytes(&v->type));
        free(host);
    }
    run_loss(e);
    /* Every analytic gradient, before any perturbation. */
    void **grads = kl_xcalloc((size_t)g->grads.n + 1, sizeof(void *));
    for (int gi = 0; gi < g->grads.n; gi++) {
        const ir_value *d = ir_val(g, g->grads.v[gi].grad);
        grads[gi] = kl_xmalloc((size_t)ir_type_bytes(&d->type));
        kl_exec_read(e, d->id, grads[gi], (size_t)ir_type_bytes(&d->type));
    }
    double worst = 0;
    int checked = 0, failed = 0;
    for (int gi = 0; gi < g->grads.n; gi++) {
        const ir_value *p = ir_val(g, g->grads.v[gi].param);
        const ir_value *d = ir_val(g, g->grads.v[gi].grad);
        int64_t n = ir_type_numel(&p->type);
        size_t pbytes = (size_t)ir_type_bytes(&p->type);
        void *grad = grads[gi], *val = kl_xmalloc(pbytes);
        kl_persist *ps = kl_session_find(s, p->name);
        be->ops->copy_out(be, val, ps->ptr, pbytes);
        int64_t step = n > 48 ? n / 48 : 1;
        for (int64_t k = 0; k < n; k += step) {
            double x = kl_load_as(p->type.dtype, val, k);
            kl_store_as(p->type.dtype, val, k, x + h);
            be->ops->copy_in(be, ps->ptr, val, pbytes);
            double lp = run_loss(e);
            kl_store_as(p->type.dtype, val, k, x - h);
            be->ops->copy_in(be, ps->ptr, val, pbytes);
            double lm = run_loss(e);
            kl_store_as(p->type.dtype, val, k, x);
            be->ops->copy_in(be, ps->ptr, val, pbytes);
            double num = (lp - lm) / (2 * h), ana = kl_load_as(d->type.dtype, grad, k);
            double scale = fmax(1.0, fmax(fabs(num), fabs(ana)));
            double err = fabs(num - ana) / scale;
            if (!(err <= tol)) {
                if (failed < 10)
                    printf("FAIL %s[%lld]: analytic %.12g, numeric %.12g, error %.3g > %.3g\n", p->name, (long long)k,
                           ana, num, err, tol);
                failed++;
            }
            if (err > worst || err != err)
                worst = err;
            checked++;
        }
        free(grad);
        free(val);
    }
    free(grads);
    printf("%s: %d gradient elements of %d params checked, worst relative error %.3g (bound %.3g)\n", argv[1], checked,
           g->grads.n, worst, tol);
    kl_exec_free(e);
    kl_session_free(s);
    be->ops->destroy(be);
    kl_source_free(&src);
    if (!checked) {
        printf("FAIL: nothing was checked\n");
        return 1;
    }
    return failed ? 1 : 0;
}
