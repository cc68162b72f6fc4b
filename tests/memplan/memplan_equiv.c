/* Memory planning changes where values live, never what is computed: the
 * same model trains bit for bit the same
 *
 *   memplan_equiv MODEL [--recompute SPEC] [--steps N] [--set KEY=VALUE]...
 *
 * runs N optimizer steps (default 3) of two plans side by side from the
 * same initial values and inputs, then one evaluation batch, and requires
 * every loss and report (after every micro-batch) and every persistent
 * value (params, optimizer and other state) to be equal bit for bit:
 *
 *   default          the planned plan against the unplanned one (every
 *                    buffer its own memory, no in-place results);
 *   --recompute SPEC the plan with recompute = SPEC against the one with
 *                    recompute = none (both planned); their arena sizes are
 *                    printed, and SPEC's must be smaller.
 *
 * The train block's accumulate is honoured (forward and backward per
 * micro-batch, the update with the last, as the executable runs them). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "ir/train_config.h"
#include "runtime/exec/session.h"
#include "unit/session_fixture.h"

typedef struct side {
    kl_session *s;
    kl_exec *train, *eval;
} side;

static kl_exec *make(kl_session *s, const char *path, const char *const *kv, kl_mode mode, bool unplanned)
{
    kl_plan_opts o = {.unplanned = unplanned};
    kl_compile_opts co = {.kv = kv, .mode = mode, .verify = true, .plan = &o};
    kl_compiled *c = kl_compile_file(path, &co);
    if (!c)
        exit(1);
    kl_exec *e = kl_compiled_exec(s, c, NULL);
    if (!e)
        exit(1);
    return e;
}

/* Deterministic inputs for micro-batch t: pixels and labels in range. */
static void feed(kl_exec *e, uint64_t t)
{
    const ir_graph *g = e->g;
    uint64_t s = 0x9e3779b97f4a7c15ull * (t + 1);
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_INPUT)
            continue;
        int64_t n = ir_type_numel(&v->type);
        void *h = kl_xcalloc((size_t)ir_type_bytes(&v->type), 1);
        for (int64_t k = 0; k < n; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double x = ir_dtype_is_float(v->type.dtype) ? (double)(s >> 11) / 9007199254740992.0
                       : v->type.dtype == IR_U8            ? (double)((s >> 33) % 256)
                                                           : (double)((s >> 33) % 10);
            kl_store_as(v->type.dtype, h, k, x);
        }
        kl_exec_write(e, v->id, h, (size_t)ir_type_bytes(&v->type));
        free(h);
    }
}

static void set_hyper(kl_session *s, int t, int64_t accumulate)
{
    float h[4] = {1e-3f, 1 - powf(0.9f, (float)t), 1 - powf(0.999f, (float)t), 1.0f / (float)accumulate};
    kl_persist *p = kl_session_find(s, "optimizer.hyper");
    if (p)
        s->be->ops->copy_in(s->be, p->ptr, h, sizeof h);
}

static int compare_scalar(const char *what, kl_exec *a, kl_exec *b, int v, int step)
{
    double x = kl_exec_scalar(a, v), y = kl_exec_scalar(b, v);
    if (memcmp(&x, &y, sizeof x) == 0 || (x != x && y != y))
        return 0;
    printf("FAIL: step %d: %s %.17g against %.17g\n", step, what, x, y);
    return 1;
}

/* Every output of a run, bit for bit. */
static int compare_outputs(kl_exec *a, kl_exec *b, int step)
{
    int bad = compare_scalar("loss", a, b, a->g->loss, step);
    for (int i = 0; i < a->g->reports.n; i++)
        bad += compare_scalar(a->g->reports.v[i].name, a, b, a->g->reports.v[i].value, step);
    return bad;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *recompute = NULL;
    int steps = 3;
    const char *kv[80];
    int nkv = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--recompute") && i + 1 < argc) {
            recompute = argv[++i];
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc && nkv + 4 < (int)KL_ARRAY_LEN(kv)) {
            char *s = argv[++i], *eq = strchr(s, '=');
            if (!eq)
                return 2;
            *eq = 0;
            kv[nkv++] = s;
            kv[nkv++] = eq + 1;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "usage: memplan_equiv MODEL [--recompute SPEC] [--steps N] [--set KEY=VALUE]...\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: memplan_equiv MODEL [--recompute SPEC] [--steps N] [--set KEY=VALUE]...\n");
        return 2;
    }
    /* Side a: planned (with recompute = SPEC); side b: the reference. */
    const char *kva[84], *kvb[84];
    int na = 0, nb = 0;
    for (int i = 0; i < nkv; i++)
        kva[na++] = kvb[nb++] = kv[i];
    if (recompute) {
        kva[na++] = "recompute";
        kva[na++] = recompute;
        kvb[nb++] = "recompute";
        kvb[nb++] = "none";
    }
    kva[na] = kvb[nb] = NULL;
    kl_backend *be = fixture_cpu_backend();
    side a = {kl_session_new(be, 7), NULL, NULL}, b = {kl_session_new(be, 7), NULL, NULL};
    a.train = make(a.s, path, kva, KL_MODE_TRAIN, false);
    b.train = make(b.s, path, kvb, KL_MODE_TRAIN, !recompute);
    a.eval = make(a.s, path, kva, KL_MODE_EVAL, false);
    b.eval = make(b.s, path, kvb, KL_MODE_EVAL, !recompute);
    kl_train_config cfg;
    kl_train_read(&a.train->g->train, &cfg);
    int64_t accumulate = cfg.accumulate;
    kl_train_config_free(&cfg);
    int bad = 0;
    for (int t = 1; t <= steps; t++) {
        set_hyper(a.s, t, accumulate);
        set_hyper(b.s, t, accumulate);
        for (int64_t m = 0; m < accumulate; m++) {
            feed(a.train, (uint64_t)((t - 1) * accumulate + m));
            feed(b.train, (uint64_t)((t - 1) * accumulate + m));
            unsigned phases = (1u << IR_PHASE_FORWARD) | (1u << IR_PHASE_BACKWARD);
            if (m == accumulate - 1)
                phases |= 1u << IR_PHASE_UPDATE;
            kl_kargs args = {(t - 1) * accumulate + m, 7};
            kl_exec_run(a.train, phases, &args);
            kl_exec_run(b.train, phases, &args);
            bad += compare_outputs(a.train, b.train, t);
        }
    }
    feed(a.eval, 1000);
    feed(b.eval, 1000);
    kl_kargs eargs = {0, 7};
    kl_exec_run(a.eval, KL_ALL_PHASES, &eargs);
    kl_exec_run(b.eval, KL_ALL_PHASES, &eargs);
    bad += compare_outputs(a.eval, b.eval, steps + 1);
    int compared = 0;
    for (int i = 0; i < b.s->persist.n; i++) {
        kl_persist *pb = &b.s->persist.v[i], *pa = kl_session_find(a.s, pb->name);
        if (!pa) {
            printf("FAIL: %s is missing from the planned session\n", pb->name);
            bad++;
            continue;
        }
        size_t bytes = (size_t)ir_type_bytes(&pb->type);
        void *x = kl_xmalloc(bytes), *y = kl_xmalloc(bytes);
        be->ops->copy_out(be, x, pa->ptr, bytes);
        be->ops->copy_out(be, y, pb->ptr, bytes);
        if (memcmp(x, y, bytes)) {
            printf("FAIL: %s differs after %d steps\n", pb->name, steps);
            bad++;
        }
        compared++;
        free(x);
        free(y);
    }
    printf("%s%s%s: %d steps x %lld micro-batches and one evaluation batch; %d persistent values %s; "
           "arena %lld against %lld bytes (%s)\n",
           path, recompute ? " recompute = " : "", recompute ? recompute : "", steps, (long long)accumulate, compared,
           bad ? "compared, some differ" : "bit for bit equal", (long long)a.train->plan->arena_bytes,
           (long long)b.train->plan->arena_bytes, recompute ? "recompute none" : "unplanned");
    if (recompute && a.train->plan->arena_bytes >= b.train->plan->arena_bytes) {
        printf("FAIL: recompute = %s does not shrink the arena\n", recompute);
        bad++;
    }
    kl_exec_free(a.train);
    kl_exec_free(a.eval);
    kl_exec_free(b.train);
    kl_exec_free(b.eval);
    kl_session_free(a.s);
    kl_session_free(b.s);
    be->ops->destroy(be);
    return bad ? 1 : 0;
}
