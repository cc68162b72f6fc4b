/* The executor's graph path, checked on the CPU: a backend that records
 * launches and GEMMs between capture_begin and capture_end and replays
 * them (with the arguments set_args gave last) stands in for CUDA graphs.
 * Training with graphs must equal training without, bit for bit: the
 * warm-up runs, the one recording per phase mask, the replays, and the
 * step argument a replay reads (the model has dropout, whose mask changes
 * every step).
 *
 *   graph_replay MODEL.kl STEPS */
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "runtime/session.h"

typedef struct rec_op {
    const kl_plan *plan;
    int kernel;            /* -1: a GEMM */
    void *const *bufs;
    kl_gemm g;
    void *a, *b, *c;
} rec_op;

typedef struct rec_graph {
    KL_VEC(rec_op) ops;
} rec_graph;

typedef struct rec_backend {
    kl_backend base;
    kl_backend *cpu;
    kl_kargs args;
    rec_graph *recording;
    int captures, replays, set_args;
} rec_backend;

static rec_backend *rb(kl_backend *be) { return (rec_backend *)be; }
static void *rec_alloc(kl_backend *be, size_t n) { return rb(be)->cpu->ops->alloc(rb(be)->cpu, n); }
static void rec_free(kl_backend *be, void *p) { rb(be)->cpu->ops->free(rb(be)->cpu, p); }
static void rec_copy_in(kl_backend *be, void *d, const void *s, size_t n)
{
    kl_check(!rb(be)->recording);
    rb(be)->cpu->ops->copy_in(rb(be)->cpu, d, s, n);
}
static void rec_copy_out(kl_backend *be, void *d, const void *s, size_t n)
{
    kl_check(!rb(be)->recording);
    rb(be)->cpu->ops->copy_out(rb(be)->cpu, d, s, n);
}
static void rec_zero(kl_backend *be, void *d, size_t n) { rb(be)->cpu->ops->fill_zero(rb(be)->cpu, d, n); }
static int rec_prepare(kl_backend *be, const kl_plan *p) { return rb(be)->cpu->ops->prepare(rb(be)->cpu, p); }
static void rec_sync(kl_backend *be) { (void)be; }

static void rec_launch(kl_backend *be, const kl_plan *p, int k, void *const *bufs, const kl_kargs *a)
{
    rec_backend *r = rb(be);
    if (r->recording) {
        rec_op op = {p, k, bufs, {0}, NULL, NULL, NULL};
        kl_vec_push(r->recording->ops, op);
        return;
    }
    /* Like the CUDA backend: kernels see the arguments set last. */
    kl_check(a->step == r->args.step && a->seed == r->args.seed);
    r->cpu->ops->launch(r->cpu, p, k, bufs, &r->args);
}

static void rec_gemm(kl_backend *be, const kl_gemm *g, void *a, void *b, void *c)
{
    rec_backend *r = rb(be);
    if (r->recording) {
        rec_op op = {NULL, -1, NULL, *g, a, b, c};
        kl_vec_push(r->recording->ops, op);
        return;
    }
    r->cpu->ops->gemm(r->cpu, g, a, b, c);
}

static void rec_set_args(kl_backend *be, const kl_kargs *a)
{
    rb(be)->args = *a;
    rb(be)->set_args++;
}

static int rec_capture_begin(kl_backend *be)
{
    kl_check(!rb(be)->recording);
    rb(be)->recording = kl_xcalloc(1, sizeof(rec_graph));
    rb(be)->captures++;
    return 0;
}

static void *rec_capture_end(kl_backend *be)
{
    rec_graph *g = rb(be)->recording;
    rb(be)->recording = NULL;
    return g;
}

static void rec_graph_launch(kl_backend *be, void *graph)
{
    rec_backend *r = rb(be);
    rec_graph *g = graph;
    r->replays++;
    for (int i = 0; i < g->ops.n; i++) {
        rec_op *op = &g->ops.v[i];
        if (op->kernel >= 0)
            r->cpu->ops->launch(r->cpu, op->plan, op->kernel, op->bufs, &r->args);
        else
            r->cpu->ops->gemm(r->cpu, &op->g, op->a, op->b, op->c);
    }
}

static void rec_graph_free(kl_backend *be, void *graph)
{
    (void)be;
    rec_graph *g = graph;
    kl_vec_free(g->ops);
    free(g);
}

static void rec_destroy(kl_backend *be) { free(be); }

static const kl_backend_ops rec_ops = {
    .name = "recording",
    .alloc = rec_alloc, .free = rec_free, .copy_in = rec_copy_in, .copy_out = rec_copy_out,
    .fill_zero = rec_zero, .prepare = rec_prepare, .launch = rec_launch, .gemm = rec_gemm,
    .sync = rec_sync, .destroy = rec_destroy, .set_args = rec_set_args,
    .capture_begin = rec_capture_begin, .capture_end = rec_capture_end,
    .graph_launch = rec_graph_launch, .graph_free = rec_graph_free,
};

static kl_exec *make(kl_session *s, const char *path)
{
    kl_compile_opts co = {.mode = KL_MODE_TRAIN, .verify = true};
    kl_compiled *c = kl_compile_file(path, &co);
    if (!c)
        exit(1);
    kl_exec *e = kl_compiled_exec(s, c, NULL);
    if (!e)
        exit(1);
    return e;
}

static void feed(kl_exec *e, int step)
{
    uint64_t s = (uint64_t)step * 7919;
    for (int i = 0; i < e->g->decls.n; i++) {
        const ir_value *v = ir_val(e->g, e->g->decls.v[i]);
        if (v->kind != IR_VAL_INPUT)
            continue;
        int64_t n = ir_type_numel(&v->type);
        void *h = kl_xcalloc((size_t)ir_type_bytes(&v->type) + 1, 1);
        for (int64_t k = 0; k < n; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            kl_store_as(v->type.dtype, h, k, v->type.dtype == IR_U8 ? (double)((s >> 33) % 256) : (double)((s >> 33) % 10));
        }
        kl_exec_write(e, v->id, h, (size_t)ir_type_bytes(&v->type));
        free(h);
    }
    kl_persist *hp = kl_session_find(e->s, "optimizer.hyper");
    float hyper[4] = {0.05f, 1.0f, 1.0f, 1.0f};
    if (hp)
        e->s->be->ops->copy_in(e->s->be, hp->ptr, hyper, sizeof hyper);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: graph_replay MODEL.kl STEPS\n");
        return 2;
    }
    int steps = atoi(argv[2]);
    kl_cpu_options co = {.threads = 1, .quiet = true};
    kl_backend *cpu = kl_cpu_backend_new(&co);
    rec_backend *rec = kl_xcalloc(1, sizeof *rec);
    rec->base.ops = &rec_ops;
    rec->cpu = cpu;
    kl_session *plain = kl_session_new(cpu, 5), *graphs = kl_session_new(&rec->base, 5);
    kl_exec *a = make(plain, argv[1]), *b = make(graphs, argv[1]);
    double last_loss = 0;
    for (int t = 1; t <= steps; t++) {
        kl_kargs args = {t, 5};
        feed(a, t);
        feed(b, t);
        kl_exec_run(a, KL_ALL_PHASES, &args);
        kl_exec_run(b, KL_ALL_PHASES, &args);
        double la = kl_exec_scalar(a, a->g->loss), lb = kl_exec_scalar(b, b->g->loss);
        if (la != lb) {
            printf("FAIL: step %d: loss %.9g with graphs, %.9g without\n", t, lb, la);
            return 1;
        }
        last_loss = la;
    }
    int failures = 0;
    for (int i = 0; i < plain->persist.n; i++) {
        kl_persist *p = &plain->persist.v[i], *q = kl_session_find(graphs, p->name);
        size_t n = (size_t)ir_type_bytes(&p->type);
        if (!q || memcmp(p->ptr, q->ptr, n)) {
            printf("FAIL: %s differs with graphs\n", p->name);
            failures++;
        }
    }
    int want_replays = steps > KL_GRAPH_WARMUP ? steps - KL_GRAPH_WARMUP : 0;
    if (rec->captures != (steps > KL_GRAPH_WARMUP) || rec->replays != want_replays || rec->set_args != steps) {
        printf("FAIL: %d recordings, %d replays, %d set_args for %d steps (want %d, %d, %d)\n", rec->captures,
               rec->replays, rec->set_args, steps, steps > KL_GRAPH_WARMUP, want_replays, steps);
        failures++;
    }
    printf("%d steps: %d recording, %d replays; %d persistent values equal bit for bit with and without graphs (last loss %.6g)\n",
           steps, rec->captures, rec->replays, plain->persist.n, last_loss);
    kl_exec_free(a);
    kl_exec_free(b);
    kl_session_free(plain);
    kl_session_free(graphs);
    rec->base.ops->destroy(&rec->base);
    cpu->ops->destroy(cpu);
    return failures ? 1 : 0;
}
