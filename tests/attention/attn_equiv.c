/* The fused attention op equals attention written as matmul + softmax +
 * matmul: two model files declaring the same params (same names, shapes,
 * inits, so one session seed gives both the same values) run forward and
 * backward once on the CPU with one thread; the loss and every param's
 * gradient must agree within a relative error of 1e-5 (of the gradient's
 * largest magnitude).
 *
 *   attn_equiv FUSED.kl COMPOSED.kl
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "runtime/exec/session.h"

#define BOUND 1e-5

/* Compiled with every gradient kept, so it can be read after the run;
 * src must outlive the graph (its locations point into it). */
static kl_exec *make(kl_session *s, const char *path, kl_source *src)
{
    if (kl_source_read(src, path))
        exit(1);
    ir_graph *g = kl_compile_load(src, NULL);
    if (!g)
        exit(1);
    kl_compile_opts cc = {.mode = KL_MODE_TRAIN, .verify = true, .stop_after = "passes"};
    kl_compiled *c = kl_compile_graph(g, &cc);
    if (!c)
        exit(1);
    g = kl_compiled_take_graph(c);
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
        exit(1);
    kl_kargs a = {0, 1};
    kl_exec_run(e, (1u << IR_PHASE_FORWARD) | (1u << IR_PHASE_BACKWARD), &a);
    return e;
}

static double *read_value(kl_exec *e, int v)
{
    const ir_type *t = &ir_val(e->g, v)->type;
    size_t bytes = (size_t)ir_type_bytes(t);
    void *h = kl_xmalloc(bytes);
    kl_exec_read(e, v, h, bytes);
    double *x = kl_xmalloc(sizeof(double) * (size_t)(ir_type_numel(t) + 1));
    for (int64_t k = 0; k < ir_type_numel(t); k++)
        x[k] = kl_load_as(t->dtype, h, k);
    free(h);
    return x;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: attn_equiv FUSED.kl COMPOSED.kl\n");
        return 2;
    }
    kl_cpu_options co = {.threads = 1, .quiet = true};
    kl_backend *be = kl_cpu_backend_new(&co);
    kl_session *sa = kl_session_new(be, 42), *sb = kl_session_new(be, 42);
    kl_source src[2];
    kl_exec *fused = make(sa, argv[1], &src[0]), *composed = make(sb, argv[2], &src[1]);
    int failures = 0;
    double la = kl_exec_scalar(fused, fused->g->loss), lb = kl_exec_scalar(composed, composed->g->loss);
    double worst = fabs(la - lb) / fmax(1e-6, fabs(lb));
    printf("loss fused %.9g, composed %.9g (relative error %.2g)\n", la, lb, worst);
    failures += !(worst <= BOUND);
    const ir_graph *gb = composed->g, *ga = fused->g;
    for (int i = 0; i < gb->grads.n; i++) {
        const ir_value *p = ir_val(gb, gb->grads.v[i].param);
        int j = 0;
        while (j < ga->grads.n && strcmp(ir_val(ga, ga->grads.v[j].param)->name, p->name))
            j++;
        if (j == ga->grads.n) {
            printf("FAIL: the fused model has no gradient of %s\n", p->name);
            failures++;
            continue;
        }
        double *x = read_value(fused, ga->grads.v[j].grad), *y = read_value(composed, gb->grads.v[i].grad);
        double maxabs = 0, maxdiff = 0;
        for (int64_t k = 0; k < ir_type_numel(&p->type); k++) {
            maxabs = fmax(maxabs, fabs(y[k]));
            maxdiff = fmax(maxdiff, fabs(x[k] - y[k]));
        }
        double err = maxdiff / fmax(maxabs, 1e-6);
        printf("grad %s: max |fused - composed| %.3g, max |composed| %.3g, relative %.3g\n", p->name, maxdiff, maxabs, err);
        if (!(err <= BOUND) || maxabs == 0) {
            printf("FAIL: the gradient of %s differs (bound %.0e)\n", p->name, BOUND);
            failures++;
        }
        worst = fmax(worst, err);
        free(x);
        free(y);
    }
    printf("%s vs %s: %d gradients compared, worst relative error %.3g (bound %.0e)\n", argv[1], argv[2], gb->grads.n, worst, BOUND);
    kl_exec_free(fused);
    kl_exec_free(composed);
    kl_session_free(sa);
    kl_session_free(sb);
    be->ops->destroy(be);
    kl_source_free(&src[0]);
    kl_source_free(&src[1]);
    return failures ? 1 : 0;
}
