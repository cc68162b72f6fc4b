/* The generated kernels against an independent reference.
 *
 *   reference_check MODEL.kl [--batch N] [--set KEY=VALUE]...
 *
 * Runs one optimizer step (forward and backward for each of the train
 * block's micro-batches, then the update) of the model through the
 * generated C kernels on the CPU backend, once with the fused plan and
 * once with the unfused one, and through the naive f64 evaluator of
 * tests/reference/ref_eval.c, from the same initial params and state and
 * the same random inputs (seeded: floats in [-1, 1), u8 in [0, 256),
 * other integers in [0, classes), or in [0, N) from a "# range NAME N"
 * line of the model). It compares every value a kernel writes to memory
 * (forward values, the loss, reports, gradients: the plan keeps them all
 * readable), after every micro-batch, and after the update every
 * persistent value (params, optimizer state, running statistics):
 *
 *   max |kernel - reference| / max(max |reference|, 1e-6) <= bound
 *
 * per value, except that an element of a sum (sum, mean, sum_to, add,
 * matmul) is measured against the size of its terms where that is larger
 * (ref_mass: a gradient that is zero in exact arithmetic is f32 rounding
 * noise of its terms, which its own size cannot bound);
 * the bound by its dtype: 1e-9 for f64 (the gradient models),
 * 1e-4 for f32, exact for integers. A gradient model computed in part in
 * f32 states its looser bound ("# tol: X", as for gradcheck); a bf16 or
 * fp16 plan (--set precision=...) bounds every float value by 3e-2 or
 * 5e-3, as one value rounded to 16 bits differently moves all after it.
 * Reference values are rounded to their dtype as they are stored, so the
 * f32 bound covers the kernels' other order of summation, not a drift
 * of the whole graph.
 *
 * The reference's update starts from the kernels' gradients and
 * accumulators, compared before: Adam's first step is about lr sign(g),
 * and a gradient that is zero up to rounding would flip its element's
 * update at random. A gradient model marked "# eval" runs its evaluation
 * graph's forward (as gradcheck does). Dropout draws a random mask: the
 * reference reads the mask the kernels drew (checking that it is 0/1) and
 * applies y = x mask / (1 - p) and its gradient itself.
 *
 * CUDA: tests/cuda/kernel_check.c compares every emulated CUDA kernel with
 * the CPU backend's on random inputs, so the CUDA kernels are checked
 * against this reference transitively, through the CPU kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "passes/passes.h"
#include "reference/ref_eval.h"
#include "runtime/exec/session.h"

/* Integer inputs: [0, N) from "# range NAME N" in the model file, or 0. */
static int64_t range_of(const kl_source *src, const char *name)
{
    char pat[96];
    snprintf(pat, sizeof pat, "# range %s ", name);
    const char *p = strstr(src->text, pat);
    return p ? strtoll(p + strlen(pat), NULL, 10) : 0;
}

static ir_graph *compile(const kl_source *src, const char *const *kv, bool fuse)
{
    ir_graph *g = kl_compile_load(src, kv);
    if (!g)
        exit(1);
    /* "# eval": the evaluation graph's forward (batch norm with running
     * statistics, no dropout), differentiated, as gradcheck runs it */
    if (strstr(src->text, "\n# eval"))
        pass_eval_mode(g, NULL);
    kl_compile_opts co = {.mode = KL_MODE_TRAIN, .verify = true, .no_fusion = !fuse, .stop_after = "passes"};
    kl_compiled *c = kl_compile_graph(g, &co);
    if (!c)
        exit(1);
    return kl_compiled_take_graph(c);
}

/* Whether a kernel or library call writes v to memory: a result of a node
 * outside any fusion group, or one read outside its group, or an output
 * (the rule the kernel builders store by). Constants are folded. */
static bool materialized(const ir_graph *g, int v)
{
    const ir_value *val = ir_val(g, v);
    if (val->def < 0)
        return false;
    const ir_node *n = ir_nd(g, val->def);
    if (n->dead || n->op == IR_OP_CONST)
        return false;
    if (n->group < 0 || ir_is_output(g, v))
        return true;
    for (int u = 0; u < val->uses.n; u++)
        if (ir_nd(g, val->uses.v[u].node)->group != n->group)
            return true;
    return false;
}

static double *host_values(const ir_type *t, const void *raw)
{
    int64_t n = ir_type_numel(t);
    double *x = kl_xmalloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        x[i] = kl_load_as(t->dtype, raw, i);
    return x;
}

static double *read_value(kl_exec *e, int v)
{
    const ir_type *t = &ir_val(e->g, v)->type;
    void *raw = kl_xmalloc((size_t)ir_type_bytes(t) + 1);
    kl_exec_read(e, v, raw, (size_t)ir_type_bytes(t));
    double *x = host_values(t, raw);
    free(raw);
    return x;
}

static double *read_persist(kl_session *s, const kl_persist *p)
{
    void *raw = kl_xmalloc((size_t)ir_type_bytes(&p->type) + 1);
    s->be->ops->copy_out(s->be, raw, p->ptr, (size_t)ir_type_bytes(&p->type));
    double *x = host_values(&p->type, raw);
    free(raw);
    return x;
}

static double bound_of(ir_dtype dt, double tol)
{
    double b = dt == IR_F64 ? 1e-9 : dt == IR_F32 ? 1e-4 : dt == IR_F16 ? 5e-3 : dt == IR_BF16 ? 3e-2 : 0;
    return ir_dtype_is_float(dt) ? fmax(b, tol) : b;
}

typedef struct tally {
    int compared, failed;
    double worst;
    const char *plan;
    const ir_graph *g;
    double tol; /* "# tol: X" of a gradient model computed in part in f32 */
} tally;

static const char *kind_name(ir_value_kind k)
{
    return k == IR_VAL_INPUT ? "input" : k == IR_VAL_PARAM ? "param" : "state";
}

/* max_i |got_i - want_i| / max(maxabs, scale_i, 1e-6) (scale NULL:
 * none); *at the worst element. */
static double rel_error(int64_t n, const double *got, const double *want, const double *scale, int64_t *at)
{
    double maxabs = 0, err = 0;
    for (int64_t i = 0; i < n; i++)
        maxabs = fmax(maxabs, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]), e = d != d ? INFINITY : d / fmax(fmax(maxabs, scale ? scale[i] : 0), 1e-6);
        if (e > err) {
            err = e;
            *at = i;
        }
    }
    return err;
}

/* Compares a value; prints the first offending element on failure. A
 * sum's value r (NULL: none) gives the size of its terms (ref_mass),
 * which bounds an element that cancels to about zero. */
static void compare(tally *t, ref_eval *r, const ir_value *v, const char *when, const double *got, const double *want)
{
    if (!want) {
        t->compared++;
        if (t->failed++ < 20)
            printf("FAIL %s plan: %%%s %s: the reference has no value\n", t->plan, v->name, when);
        return;
    }
    int64_t n = ir_type_numel(&v->type), at = 0;
    double err = rel_error(n, got, want, NULL, &at), bound = bound_of(v->type.dtype, t->tol);
    double *mass = err > bound && r && v->def >= 0 ? ref_mass(r, ir_nd(t->g, v->def)) : NULL;
    if (mass) {
        err = rel_error(n, got, want, mass, &at);
        free(mass);
    }
    t->compared++;
    if (err > t->worst)
        t->worst = err;
    if (err <= bound)
        return;
    const char *op = v->def >= 0 ? ir_op_name(ir_nd(t->g, v->def)->op) : kind_name(v->kind);
    if (t->failed++ < 20)
        printf("FAIL %s plan: %%%s (%s) %s, element %lld: kernels %.10g, reference %.10g; relative error %.3g > %.0e\n",
               t->plan, v->name, op, when, (long long)at, got[at], want[at], err, bound);
}

/* Compares the kept values of the forward and backward phases (up to
 * BACKWARD) or of the update phase (UPDATE). */
static void compare_kept(tally *t, kl_exec *e, ref_eval *r, const int *keep, int nkeep, ir_phase upto)
{
    const ir_graph *g = e->g;
    for (int k = 0; k < nkeep; k++) {
        int v = keep[k], buf = e->plan->value_buf[v];
        ir_phase ph = ir_nd(g, ir_val(g, v)->def)->phase;
        if ((upto == IR_PHASE_UPDATE) != (ph == IR_PHASE_UPDATE))
            continue;
        /* A view of a persistent value (a reshaped param) shows it after
         * the update: compared with the persistent values. */
        if (buf < 0 || e->plan->buffers.v[plan_real_buffer(e->plan, buf)].region == KL_REGION_PERSISTENT)
            continue;
        double *got = read_value(e, v);
        /* (The update's operands have changed since: no terms there.) */
        compare(t, ph == IR_PHASE_UPDATE ? NULL : r, ir_val(g, v),
                ph == IR_PHASE_UPDATE ? "in the update" : "after forward and backward", got, r->v[v]);
        free(got);
    }
}

/* Random inputs for micro-batch m, the same to both sides. */
static void feed(kl_exec *e, ref_eval *r, const kl_source *src, uint64_t m)
{
    const ir_graph *g = e->g;
    kl_exec_random_inputs(e, 5 + m);
    uint64_t rng = 77 + m;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_INPUT)
            continue;
        int64_t range = range_of(src, v->name), n = ir_type_numel(&v->type);
        if (range > 0 && !ir_dtype_is_float(v->type.dtype)) {
            void *raw = kl_xcalloc((size_t)ir_type_bytes(&v->type), 1);
            for (int64_t k = 0; k < n; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                kl_store_as(v->type.dtype, raw, k, (double)((rng >> 33) % (uint64_t)range));
            }
            kl_exec_write(e, v->id, raw, (size_t)ir_type_bytes(&v->type));
            free(raw);
        }
        double *x = read_value(e, v->id);
        ref_set(r, v->id, x);
        free(x);
    }
}

/* Dropout's masks: the reference applies the ones the kernels drew. */
static void give_masks(kl_exec *e, ref_eval *r)
{
    const ir_graph *g = e->g;
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (!n->dead && n->op == IR_OP_DROPOUT) {
            if (!materialized(g, n->out.v[1]))
                kl_panic("dropout's mask %%%s is not in memory", ir_val(g, n->out.v[1])->name);
            double *m = read_value(e, n->out.v[1]);
            ref_set(r, n->out.v[1], m);
            free(m);
        }
    }
}

/* The update runs on the kernels' gradients (compared before): Adam's
 * first step is about lr sign(g), so a gradient that is zero up to
 * rounding would otherwise flip its element's update at random. Every
 * operand an update-phase node reads but no update writes, computed
 * before the update (gradients, accumulated gradients), is handed over;
 * a persistent one (an accumulator) is compared first. */
static void hand_over_update_operands(tally *t, kl_exec *e, ref_eval *r)
{
    const ir_graph *g = e->g;
    bool *done = kl_xcalloc((size_t)g->values.n + 1, 1);
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        for (int k = 0; !n->dead && n->phase == IR_PHASE_UPDATE && k < n->in.n; k++)
            if (ir_op_mutates(n->op, k))
                done[n->in.v[k]] = true;
    }
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        for (int k = 0; !n->dead && n->phase == IR_PHASE_UPDATE && k < n->in.n; k++) {
            int v = n->in.v[k];
            const ir_value *val = ir_val(g, v);
            if (done[v] || (val->def >= 0 && ir_nd(g, val->def)->phase == IR_PHASE_UPDATE))
                continue;
            done[v] = true;
            double *x;
            if (ir_is_persistent(val)) {
                x = read_persist(e->s, kl_session_find(e->s, val->name));
                compare(t, r, val, "before the update", x, r->v[v]);
            } else if (materialized(g, v)) {
                x = read_value(e, v);
            } else {
                continue;
            }
            ref_set(r, v, x);
            free(x);
        }
    }
    free(done);
}

static void run_plan(const kl_source *src, const char *const *kv, bool fuse, tally *t)
{
    t->plan = fuse ? "fused" : "unfused";
    ir_graph *g = compile(src, kv, fuse);
    t->g = g;
    /* Mixed precision: a value rounded to 16 bits on one side and not
     * quite on the other (it lay near a rounding boundary) moves every
     * later value by up to that format's step, whatever their dtype. */
    const char *prec = ir_attr_str(&g->train, "precision", "fp32");
    if (!strcmp(prec, "bf16"))
        t->tol = fmax(t->tol, bound_of(IR_BF16, 0));
    else if (!strcmp(prec, "fp16"))
        t->tol = fmax(t->tol, bound_of(IR_F16, 0));
    /* Keep every value a kernel writes, so all of them can be read after
     * the run. */
    int *keep = kl_xmalloc(sizeof(int) * (size_t)(g->values.n + 1)), nkeep = 0;
    for (int v = 0; v < g->values.n; v++)
        if (materialized(g, v))
            keep[nkeep++] = v;
    kl_cpu_options co = {.threads = 1, .quiet = true};
    kl_backend *be = kl_cpu_backend_new(&co);
    kl_session *s = kl_session_new(be, 11);
    kl_plan_opts popts = {.keep = keep, .nkeep = nkeep};
    kl_compile_opts cc = {.mode = KL_MODE_TRAIN, .verify = true, .no_fusion = !fuse, .plan = &popts};
    kl_compiled *c = kl_compile_graph(g, &cc);
    kl_exec *e = c ? kl_compiled_exec(s, c, NULL) : NULL;
    if (!e)
        exit(1);
    ref_eval *r = ref_new(g);

    /* The same starting point: initial params and state, and the step's
     * hyper-parameters (learning rate, bias corrections of step 1, the
     * gradient multiplier 1 / micro-batches). */
    int64_t micro = ir_attr_int(&g->train, "accumulate", 1);
    float hyper[4] = {1e-3f, 1 - 0.9f, 1 - 0.999f, 1.0f / (float)micro};
    kl_persist *hp = kl_session_find(s, "optimizer.hyper");
    if (hp)
        be->ops->copy_in(be, hp->ptr, hyper, sizeof hyper);
    for (int i = 0; i < s->persist.n; i++) {
        int v = ir_find_value(g, s->persist.v[i].name);
        if (v >= 0) {
            double *x = read_persist(s, &s->persist.v[i]);
            ref_set(r, v, x);
            free(x);
        }
    }
    /* One optimizer step: forward and backward per micro-batch, each on
     * its own inputs, the update after the last. */
    for (int64_t m = 0; m < micro; m++) {
        feed(e, r, src, (uint64_t)m);
        unsigned phases = (1u << IR_PHASE_FORWARD) | (1u << IR_PHASE_BACKWARD);
        kl_kargs args = {m, 11};
        kl_exec_run(e, m == micro - 1 ? KL_ALL_PHASES : phases, &args);
        give_masks(e, r);
        r->step = m;
        ref_run(r, phases);
        compare_kept(t, e, r, keep, nkeep, IR_PHASE_BACKWARD);
    }
    hand_over_update_operands(t, e, r);
    ref_run(r, 1u << IR_PHASE_UPDATE);
    compare_kept(t, e, r, keep, nkeep, IR_PHASE_UPDATE);
    for (int i = 0; i < s->persist.n; i++) {
        int v = ir_find_value(g, s->persist.v[i].name);
        if (v < 0)
            continue;
        double *got = read_persist(s, &s->persist.v[i]);
        compare(t, NULL, ir_val(g, v), "after the update", got, r->v[v]);
        free(got);
    }
    printf("%s plan: %d values compared (%d kept), worst relative error %.3g\n", t->plan, t->compared, nkeep, t->worst);
    free(keep);
    ref_free(r);
    kl_exec_free(e);
    kl_session_free(s);
    be->ops->destroy(be);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *kv[42];
    int nkv = 0;
    bool usage = false;
    for (int i = 1; i < argc && !usage; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc && nkv < 40) {
            kv[nkv++] = "batch";
            kv[nkv++] = argv[++i];
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc && nkv < 40 && strchr(argv[i + 1], '=')) {
            char *s = argv[++i], *eq = strchr(s, '=');
            *eq = 0;
            kv[nkv++] = s;
            kv[nkv++] = eq + 1;
        } else if (!path && argv[i][0] != '-') {
            path = argv[i];
        } else {
            usage = true;
        }
    }
    kv[nkv] = NULL;
    if (!path || usage) {
        fprintf(stderr, "usage: reference_check MODEL.kl [--batch N] [--set KEY=VALUE]...\n");
        return 2;
    }
    kl_source src;
    if (kl_source_read(&src, path))
        return 1;
    const char *tol = strstr(src.text, "# tol:");
    tally fused = {0}, plain = {0};
    fused.tol = plain.tol = tol ? strtod(tol + 6, NULL) : 0;
    run_plan(&src, nkv ? kv : NULL, true, &fused);
    run_plan(&src, nkv ? kv : NULL, false, &plain);
    kl_source_free(&src);
    int failed = fused.failed + plain.failed;
    printf("%s: %s against the f64 reference (fused %d values, unfused %d; worst relative error %.3g)\n", path,
           failed ? "FAIL" : "ok", fused.compared, plain.compared, fmax(fused.worst, plain.worst));
    if (!fused.compared || !plain.compared) {
        printf("FAIL: nothing was compared\n");
        return 1;
    }
    return failed ? 1 : 0;
}
