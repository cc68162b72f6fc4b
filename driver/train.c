/* The main of a training executable: flags, data, plans, the training
 * loop, evaluation, progress lines and metrics. `kiln build` links this
 * with the model's source and its precompiled kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"
#include "budget.h"
#include "runtime/checkpoint.h"
#include "runtime/outfile.h"
#include "runtime/trace.h"
#include "runtime/data.h"
#include "runtime/session.h"
#include "runtime/backend_cuda.h"
#include "plan/memplan.h"
#include "compile.h"
#include "ir/train_config.h"
#include "passes/passes.h"

static const char usage[] =
    "usage: %s [options]\n"
    "\n"
    "Trains the model this executable was built from (%s). Flags override\n"
    "the model file's train block.\n"
    "\n"
    "  --epochs N         passes over the training set\n"
    "  --steps N          stop after N optimizer steps\n"
    "  --batch N          samples per micro-batch\n"
    "  --accumulate N     micro-batches per optimizer step\n"
    "  --lr X             learning rate\n"
    "  --seed N           seed of initialisation, shuffling and dropout\n"
    "  --threads N        CPU threads (default: OMP_NUM_THREADS when set, else the\n"
    "                     cores that compute in parallel, measured at start)\n"
    "  --data PATH        folder of the IDX files, or synthetic:N\n"
    "  --eval-every N     evaluate every N steps (default: each epoch)\n"
    "  --log-every N      progress line every N steps\n"
    "  --precision P      fp32, bf16 or fp16\n"
    "  --memory-limit B   refuse to start when the planned memory (params, state and\n"
    "                     the arena) exceeds B bytes (or \"2GiB\", \"500MB\")\n"
    "  --device D         auto, cpu or cuda (default auto: the GPU when one is usable)\n"
    "  --no-cuda-graph    launch each step's kernels instead of replaying a CUDA graph\n"
    "  --tf32             fp32 GEMMs on TF32 tensor cores (GPU)\n"
    "  --metrics FILE     write metrics as JSON lines (appended to with --resume)\n"
    "  --save FILE        write a checkpoint at the end (and each epoch)\n"
    "  --save-init FILE   write a checkpoint of the initial values, then train\n"
    "  --resume FILE      continue from a checkpoint\n"
    "  --set KEY=VALUE    any other train setting\n"
    "  --profile          time every kernel and GEMM; print a table at the end\n"
    "  --trace FILE       write a timeline of every step, kernel, GEMM, data wait\n"
    "                     and evaluation (Chrome trace format; open in Perfetto)\n"
    "  --quiet            no progress lines, only the summary\n"
    "  -h, --help         this help\n"
    "\n"
    "The executable holds the kernels of its train block's settings. Flags that\n"
    "change the plan (--batch, --accumulate, --precision, --memory-limit, --data\n"
    "with another test-set size, --set optimizer=... and other --set keys) need\n"
    "other kernels, which it compiles at start with a C compiler: $CC (else cc),\n"
    "cached in $XDG_CACHE_HOME/kiln/cpu (else ~/.cache/kiln/cpu). Without a\n"
    "compiler, put the settings in the train block and kiln build again.\n"
    "\n"
    "KILN_MEMPLAN=0 in the environment turns memory planning off (every buffer\n"
    "its own memory), for comparisons.\n";

typedef struct options {
    const char *kv[128];
    int nkv;
    char *owned[64];
    int nowned;
    int threads;
    const char *device, *metrics, *save, *save_init, *resume;
    int64_t force_overflow; /* a test hook: poison this step's loss scale */
    bool quiet, profile, no_cuda_graph, tf32;
    const char *trace_path;
} options;

static int add_kv(options *o, const char *k, const char *v)
{
    if (o->nkv + 3 > (int)KL_ARRAY_LEN(o->kv)) {
        kl_error("too many flags");
        return -1;
    }
    o->kv[o->nkv++] = k;
    o->kv[o->nkv++] = v;
    o->kv[o->nkv] = NULL;
    return 0;
}

static char *own(options *o, char *s)
{
    if (o->nowned < (int)KL_ARRAY_LEN(o->owned))
        o->owned[o->nowned++] = s;
    return s;
}

/* The flags that set a train key. */
static const struct { const char *flag, *key; } mapped[] = {
    {"--epochs", "epochs"}, {"--steps", "steps"}, {"--batch", "batch"}, {"--accumulate", "accumulate"},
    {"--lr", "lr"}, {"--seed", "seed"}, {"--eval-every", "eval_every"}, {"--log-every", "log_every"},
    {"--precision", "precision"}, {"--memory-limit", "memory_limit"},
};

/* The flags given that may change the kernels from those built into the
 * executable (for the CPU backend's notice and error when it must compile
 * them), as typed: "--batch 64, --set optimizer=sgd(lr = 0.1)"; NULL when
 * none. Train keys that only the run's loop or the kernels' arguments read
 * never change them. */
static char *kernel_flags(const options *o)
{
    static const char *const neutral[] = {"epochs", "steps", "seed", "eval_every", "log_every", "threads", "lr"};
    kl_buf b = {0};
    for (int i = 0; i + 1 < o->nkv; i += 2) {
        const char *k = o->kv[i], *v = o->kv[i + 1], *flag = NULL;
        bool skip = false;
        for (size_t n = 0; n < KL_ARRAY_LEN(neutral) && !skip; n++)
            skip = !strcmp(k, neutral[n]);
        if (skip)
            continue;
        for (size_t m = 0; m < KL_ARRAY_LEN(mapped) && !flag; m++)
            if (!strcmp(k, mapped[m].key))
                flag = mapped[m].flag;
        if (!strcmp(k, "data"))
            flag = "--data";
        if (b.len)
            kl_buf_puts(&b, ", ");
        if (flag)
            kl_buf_printf(&b, "%s %s", flag, v);
        else
            kl_buf_printf(&b, "--set %s=%s", k, v);
    }
    return b.len ? kl_buf_take(&b) : NULL;
}

static int parse_flags(int argc, char **argv, options *o, const char *model)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        bool done = false;
        for (size_t m = 0; m < KL_ARRAY_LEN(mapped) && !done; m++) {
            if (strcmp(a, mapped[m].flag))
                continue;
            if (!has) {
                kl_error("%s needs a value", a);
                return -1;
            }
            if (add_kv(o, mapped[m].key, argv[++i]))
                return -1;
            done = true;
        }
        if (done)
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf(usage, argv[0], model);
            exit(0);
        } else if (!strcmp(a, "--threads") && has) {
            char *end;
            long t = strtol(argv[++i], &end, 10);
            if (*end || t < 0 || t > 4096) {
                kl_error("--threads needs a count, got '%s'", argv[i]);
                return -1;
            }
            o->threads = (int)t;
            if (add_kv(o, "threads", argv[i]))
                return -1;
        } else if (!strcmp(a, "--data") && has) {
            if (add_kv(o, "data", argv[++i]))
                return -1;
        } else if (!strcmp(a, "--device") && has) {
            o->device = argv[++i];
        } else if (!strcmp(a, "--metrics") && has) {
            o->metrics = argv[++i];
        } else if (!strcmp(a, "--save") && has) {
            o->save = argv[++i];
        } else if (!strcmp(a, "--force-overflow") && has) {
            o->force_overflow = strtoll(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--save-init") && has) {
            o->save_init = argv[++i];
        } else if (!strcmp(a, "--resume") && has) {
            o->resume = argv[++i];
        } else if (!strcmp(a, "--set") && has) {
            const char *kv = argv[++i], *eq = strchr(kv, '=');
            if (!eq || eq == kv) {
                kl_error("--set needs KEY=VALUE, got '%s'", kv);
                return -1;
            }
            if (add_kv(o, own(o, kl_xstrndup(kv, (size_t)(eq - kv))), eq + 1))
                return -1;
        } else if (!strcmp(a, "--no-cuda-graph")) {
            o->no_cuda_graph = true;
        } else if (!strcmp(a, "--tf32")) {
            o->tf32 = true;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = true;
        } else if (!strcmp(a, "--profile")) {
            o->profile = true;
        } else if (!strcmp(a, "--trace") && has) {
            o->trace_path = argv[++i];
        } else {
            kl_error("unknown option or missing value: %s (see --help)", a);
            return -1;
        }
    }
    return 0;
}

/* ---- the model's inputs ---- */

typedef struct bindings {
    int features, labels; /* input values, or -1 */
    int loss;
    int ce_classes;       /* classes of the first cross_entropy, or 0 */
} bindings;

static int bind_inputs(const ir_graph *g, const kl_dataset *d, bindings *b, const char *model)
{
    b->features = b->labels = -1;
    b->loss = g->loss;
    b->ce_classes = 0;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_INPUT)
            continue;
        const ir_type *t = &v->type;
        int64_t per = t->rank ? ir_type_numel(t) / t->dim[0] : 1;
        if (t->rank == 1 && (t->dtype == IR_I32 || t->dtype == IR_I64) && b->labels < 0)
            b->labels = v->id;
        else if (per == d->sample_bytes && (t->dtype == IR_U8 || ir_dtype_is_float(t->dtype)) && b->features < 0)
            b->features = v->id;
        else {
            char *ts = ir_type_str(t);
            kl_error("%s: input '%s' (%s) matches nothing the dataset %s provides (%lld bytes per sample and a label)",
                     model, v->name, ts, d->name, (long long)d->sample_bytes);
            free(ts);
            return -1;
        }
    }
    if (b->features < 0 || b->labels < 0) {
        kl_error("%s: the model needs an input for the samples (%lld values each) and one for the labels (i32[batch])",
                 model, (long long)d->sample_bytes);
        return -1;
    }
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->op == IR_OP_CROSS_ENTROPY && !n->dead) {
            b->ce_classes = (int)ir_val(g, n->in.v[0])->type.dim[1];
            break;
        }
    }
    return 0;
}

/* Copies a batch into the exec's inputs, converting features to the
 * input's dtype and padding a short batch by repeating its samples. */
static void feed(kl_exec *e, const bindings *b, const kl_batch *batch, int64_t sample_bytes)
{
    const ir_type *ft = &ir_val(e->g, b->features)->type, *lt = &ir_val(e->g, b->labels)->type;
    int64_t n = ft->dim[0];
    size_t fbytes = (size_t)ir_type_bytes(ft), lbytes = (size_t)ir_type_bytes(lt);
    void *fh = kl_xmalloc(fbytes), *lh = kl_xmalloc(lbytes);
    for (int64_t i = 0; i < n; i++) {
        int64_t src = i % batch->size;
        const uint8_t *px = batch->features + src * sample_bytes;
        if (ft->dtype == IR_U8)
            memcpy((uint8_t *)fh + i * sample_bytes, px, (size_t)sample_bytes);
        else
            for (int64_t j = 0; j < sample_bytes; j++)
                kl_store_as(ft->dtype, fh, i * sample_bytes + j, px[j]);
        kl_store_as(lt->dtype, lh, i, batch->labels[src]);
    }
    kl_exec_write(e, b->features, fh, fbytes);
    kl_exec_write(e, b->labels, lh, lbytes);
    free(fh);
    free(lh);
}

/* ---- the learning-rate schedule ---- */

double kl_schedule_lr(const kl_train_config *c, double base, int64_t t, int64_t total)
{
    double lr = base, min = c->sched.min_lr;
    int64_t w = c->sched.warmup;
    switch (c->sched.kind) {
    case KL_SCHED_CONSTANT:
        return lr;
    case KL_SCHED_STEP:
        return lr * pow(c->sched.gamma, (double)((t - 1) / (c->sched.every > 0 ? c->sched.every : 1)));
    case KL_SCHED_COSINE: {
        double p = total > 1 ? (double)(t - 1) / (double)(total - 1) : 1.0;
        return min + (lr - min) * 0.5 * (1 + cos(M_PI * (p > 1 ? 1 : p)));
    }
    case KL_SCHED_WARMUP_COSINE: {
        if (t <= w)
            return lr * (double)t / (double)w;
        double p = total - w > 1 ? (double)(t - w - 1) / (double)(total - w - 1) : 1.0;
        return min + (lr - min) * 0.5 * (1 + cos(M_PI * (p > 1 ? 1 : p)));
    }
    case KL_SCHED_LINEAR: {
        if (w > 0 && t <= w)
            return lr * (double)t / (double)w;
        double p = total - w > 1 ? (double)(t - w - 1) / (double)(total - w - 1) : 1.0;
        return lr + (min - lr) * (p > 1 ? 1 : p);
    }
    }
    return lr;
}

/* ---- training ---- */

typedef struct trainer {
    kl_train_config cfg;
    kl_trace *trace;
    /* fp16 loss scaling: the scale, clean steps since the last change,
     * skipped steps (in all and in a row), and the check's value in the
     * training graph. */
    double loss_scale;
    int64_t clean_steps, skipped, skipped_in_row;
    int finite_value;
    options opt;
    const char *model;
    kl_session *s;
    kl_exec *train, *eval, *eval_tail;
    bindings tb, eb, etb;
    kl_dataset train_set, test_set;
    kl_outfile metrics; /* metrics.f is NULL without --metrics */
    double scaled_lr;
} trainer;

static void write_hyper(trainer *t, int64_t step, int64_t total, double *lr_out)
{
    kl_persist *h = kl_session_find(t->s, "optimizer.hyper");
    double lr = kl_schedule_lr(&t->cfg, t->scaled_lr, step, total);
    /* The gradient multiplier undoes the loss scale and averages the
     * micro-batches. */
    float v[4] = {(float)lr, (float)(1 - pow(t->cfg.opt.beta1, (double)step)),
                  (float)(1 - pow(t->cfg.opt.beta2, (double)step)),
                  (float)(1.0 / (t->loss_scale * (double)t->cfg.accumulate))};
    if (h)
        t->s->be->ops->copy_in(t->s->be, h->ptr, v, sizeof v);
    kl_persist *ls = kl_session_find(t->s, "loss_scale");
    /* --force-overflow N: step N's gradients become inf, as an fp16
     * overflow would make them (the tests check the step is skipped). */
    float sv = step == t->opt.force_overflow ? (float)(1.0 / 0.0) : (float)t->loss_scale;
    if (ls)
        t->s->be->ops->copy_in(t->s->be, ls->ptr, &sv, sizeof sv);
    *lr_out = lr;
}

/* After an optimizer step with fp16: back off on overflow (the step was
 * skipped), grow after a run of clean steps. */
static void adjust_loss_scale(trainer *t)
{
    if (t->finite_value < 0)
        return;
    bool finite = kl_exec_scalar(t->train, t->finite_value) != 0;
    const kl_train_config *c = &t->cfg;
    if (!finite) {
        t->skipped++;
        t->skipped_in_row++;
        t->clean_steps = 0;
        if (c->loss_scale.dynamic)
            t->loss_scale *= c->loss_scale.backoff;
        return;
    }
    t->skipped_in_row = 0;
    if (c->loss_scale.dynamic && ++t->clean_steps >= c->loss_scale.interval) {
        t->loss_scale *= c->loss_scale.growth;
        t->clean_steps = 0;
    }
}

typedef struct eval_result {
    double loss, metric[8];
    int64_t samples;
} eval_result;

static void evaluate_plans(trainer *t, eval_result *r);

static void evaluate(trainer *t, eval_result *r)
{
    double t0 = kl_now();
    evaluate_plans(t, r);
    kl_trace_event(t->trace, "evaluation", "eval", KL_TRACE_STEPS, t0, kl_now());
}

static void evaluate_plans(trainer *t, eval_result *r)
{
    memset(r, 0, sizeof *r);
    const kl_dataset *d = &t->test_set;
    int64_t eb = ir_val(t->eval->g, t->eb.features)->type.dim[0];
    int64_t full = d->count / eb;
    kl_loader *l = kl_loader_new(d, eb, false, false, 0, 4);
    kl_loader_start(l, 0);
    const kl_batch *b;
    kl_kargs args = {0, (uint64_t)t->cfg.seed};
    while ((b = kl_loader_next(l))) {
        bool tail = b->index >= full;
        kl_exec *e = tail && t->eval_tail ? t->eval_tail : t->eval;
        bindings *bb = tail && t->eval_tail ? &t->etb : &t->eb;
        feed(e, bb, b, d->sample_bytes);
        kl_exec_run(e, KL_ALL_PHASES, &args);
        r->loss += kl_exec_scalar(e, e->g->loss) * (double)b->size;
        for (int i = 0; i < e->g->reports.n && i < 8; i++)
            r->metric[i] += kl_exec_scalar(e, e->g->reports.v[i].value) * (double)b->size;
        r->samples += b->size;
        kl_loader_release(l, b);
    }
    kl_loader_free(l);
    if (r->samples) {
        r->loss /= (double)r->samples;
        for (int i = 0; i < 8; i++)
            r->metric[i] /= (double)r->samples;
    }
}

/* Lowers the model again with extra overrides (a different batch). */
static ir_graph *load_with(const kl_source *src, const options *o, const char *key, const char *val)
{
    const char *kv[132];
    int n = 0;
    for (int i = 0; i < o->nkv; i++)
        kv[n++] = o->kv[i];
    if (key) {
        kv[n++] = key;
        kv[n++] = val;
    }
    kv[n] = NULL;
    return kl_compile_load(src, n ? kv : NULL);
}

/* The pipeline and the exec of g; a training plan is checked against the
 * memory limit before it allocates anything; an evaluation plan runs in
 * the training plan's arena (host) when it fits there. */
static kl_exec *make_exec(trainer *t, const kl_source *src, ir_graph *g, kl_mode mode, kl_exec *host)
{
    kl_compile_opts co = {.mode = mode};
    kl_replan rp = {src, t->opt.kv};
    kl_compiled *c = kl_compile_graph(g, &co);
    if (!c || (mode == KL_MODE_TRAIN && kl_check_budget(&rp, &t->cfg, c->plan, t->cfg.memory_limit))) {
        kl_compiled_free(c);
        return NULL;
    }
    return kl_compiled_exec(t->s, c, host);
}

static int load_data(trainer *t)
{
    if (!strcmp(t->cfg.data_format, "synthetic")) {
        if (kl_synthetic(t->cfg.synthetic_samples, (uint64_t)t->cfg.seed, &t->train_set) ||
            kl_synthetic(t->cfg.synthetic_samples / 6 + 1, (uint64_t)t->cfg.seed + 7, &t->test_set))
            return -1;
        return 0;
    }
    if (kl_idx_load(t->cfg.data_path, "train", &t->train_set) || kl_idx_load(t->cfg.data_path, "t10k", &t->test_set))
        return -1;
    if (t->train_set.sample_bytes != t->test_set.sample_bytes) {
        kl_error("%s: training and test samples differ in size", t->cfg.data_path);
        return -1;
    }
    return 0;
}

/* The evaluation batch: the largest divisor of the test set up to
 * max(batch, 500), so evaluation needs one plan; a remainder plan when
 * no divisor is reasonably large. */
int64_t kl_eval_batch(int64_t count, int64_t batch)
{
    int64_t cap = batch > 500 ? batch : 500;
    if (cap > count)
        cap = count;
    for (int64_t d = cap; d >= 1; d--)
        if (count % d == 0 && d >= batch / 2)
            return d;
    return batch < count ? batch : count;
}

static void json_line(trainer *t, const char *fmt, ...) KL_PRINTF(2, 3);
static void json_line(trainer *t, const char *fmt, ...)
{
    if (!t->metrics.f)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(t->metrics.f, fmt, ap);
    va_end(ap);
    fputc('\n', t->metrics.f);
    fflush(t->metrics.f);
    kl_outfile_note(&t->metrics);
}

static int save_checkpoint(trainer *t, const char *path, int64_t step)
{
    kl_run_state rs = {(uint64_t)step, t->clean_steps, t->skipped, t->skipped_in_row, t->loss_scale};
    return kl_checkpoint_save(t->s, path, &rs);
}

static int run_training(trainer *t, const kl_source *src)
{
    kl_train_config *c = &t->cfg;
    int64_t B = c->batch;
    kl_loader *loader = kl_loader_new(&t->train_set, B, true, true, (uint64_t)c->seed, 4);
    int64_t per_epoch = kl_loader_batches(loader) / c->accumulate;
    if (per_epoch < 1) {
        kl_error("%s: the training set (%lld samples) is smaller than one step (batch %lld x accumulate %lld)",
                 t->model, (long long)t->train_set.count, (long long)B, (long long)c->accumulate);
        kl_loader_free(loader);
        return -1;
    }
    int64_t total = c->epochs * per_epoch;
    if (c->steps > 0 && c->steps < total)
        total = c->steps;
    int64_t step = 0;
    if (t->opt.resume) {
        kl_run_state rs;
        if (kl_checkpoint_load(t->s, t->opt.resume, (uint64_t)total, &rs)) {
            kl_loader_free(loader);
            return -1;
        }
        step = (int64_t)rs.step;
        /* The loss scaler continues where it was, counters included, so
         * that its next change falls on the same step. */
        if (t->cfg.precision == KL_PREC_FP16) {
            t->loss_scale = rs.loss_scale;
            t->clean_steps = rs.clean_steps;
            t->skipped = rs.skipped;
            t->skipped_in_row = rs.skipped_in_row;
        }
        if (!t->opt.quiet)
            printf("resumed from %s at step %lld\n", t->opt.resume, (long long)step);
    }
    (void)src;
    /* Rates count the steps this process ran, not those resumed from. */
    const int64_t first_step = step;
    double t_start = kl_now(), best = -1;
    /* Time in training steps alone (no evaluation), and in the first ten
     * (warm-up: caches, page faults), for a clean throughput figure. */
    double step_time = 0, warm_time = 0;
    int64_t warm_steps = 0;
    int64_t best_epoch = 0, log_every = c->log_every;
    double win_loss = 0, win_metric = 0, win_t0 = kl_now();
    int64_t win_steps = 0;
    /* The first report is the metric shown (internal ones start with _). */
    int metric_count = t->train->g->reports.n && t->train->g->reports.v[0].name[0] != '_';
    const char *metric_name = metric_count ? t->train->g->reports.v[0].name : NULL;
    kl_kargs args = {0, (uint64_t)c->seed};
    int rc = 0;
    eval_result er = {0};
    bool evaluated_at_end = false;
    for (int64_t epoch = step / per_epoch; epoch < c->epochs && step < total; epoch++) {
        kl_loader_start(loader, epoch);
        /* Skip what a resumed run already did in this epoch. */
        for (int64_t skip = (step - epoch * per_epoch) * c->accumulate; skip > 0; skip--)
            kl_loader_release(loader, kl_loader_next(loader));
        double epoch_t0 = kl_now();
        while (step < total) {
            const kl_batch *b = NULL;
            double lr = 0, st0 = kl_now();
            char name[48];
            write_hyper(t, step + 1, total, &lr);
            bool ended = false;
            for (int64_t m = 0; m < c->accumulate; m++) {
                double w0 = kl_now();
                b = kl_loader_next(loader);
                if (t->trace)
                    kl_trace_event(t->trace, "next batch", "data", KL_TRACE_DATA, w0, kl_now());
                if (!b) {
                    ended = true;
                    break;
                }
                feed(t->train, &t->tb, b, t->train_set.sample_bytes);
                kl_loader_release(loader, b);
                args.step = step * c->accumulate + m;
                unsigned phases = (1u << IR_PHASE_FORWARD) | (1u << IR_PHASE_BACKWARD);
                if (m == c->accumulate - 1)
                    phases |= 1u << IR_PHASE_UPDATE;
                kl_exec_run(t->train, phases, &args);
                win_loss += kl_exec_scalar(t->train, t->train->g->loss);
                if (metric_count)
                    win_metric += kl_exec_scalar(t->train, t->train->g->reports.v[0].value);
            }
            if (ended)
                break;
            adjust_loss_scale(t);
            step++;
            if (c->max_skipped_steps > 0 && t->skipped_in_row > c->max_skipped_steps) {
                kl_error("step %lld: the last %lld steps were all skipped for non-finite gradients (loss scale now %g); "
                         "training diverged (try a lower --lr; max_skipped_steps = %lld)",
                         (long long)step, (long long)t->skipped_in_row, t->loss_scale, (long long)c->max_skipped_steps);
                rc = -1;
                goto out;
            }
            win_steps++;
            step_time += kl_now() - st0;
            if (t->trace) {
                snprintf(name, sizeof name, "step %lld", (long long)step);
                kl_trace_event(t->trace, name, "step", KL_TRACE_STEPS, st0, kl_now());
            }
            if (warm_steps < 10) {
                warm_steps++;
                warm_time = step_time;
            }
            double loss_now = win_loss / (double)(win_steps * c->accumulate);
            if (!isfinite(loss_now)) {
                kl_error("step %lld: the loss is %g; training diverged (try a lower --lr)", (long long)step, loss_now);
                rc = -1;
                goto out;
            }
            if (step % log_every == 0 || step == total) {
                double dt = kl_now() - win_t0;
                double ms = 1000.0 * dt / (double)win_steps;
                double sps = (double)(win_steps * B * c->accumulate) / dt;
                double m = win_metric / (double)(win_steps * c->accumulate);
                if (!t->opt.quiet) {
                    printf("epoch %lld/%lld  step %6lld/%lld  loss %.4f", (long long)epoch + 1, (long long)c->epochs,
                           (long long)step, (long long)total, loss_now);
                    if (metric_name)
                        printf("  %s %.4f", metric_name, m);
                    printf("  lr %.2e", lr);
                    if (t->finite_value >= 0)
                        printf("  scale %.0f  skipped %lld", t->loss_scale, (long long)t->skipped);
                    printf("  %.0f samples/s  %.2f ms/step\n", sps, ms);
                    fflush(stdout);
                }
                json_line(t, "{\"type\": \"train\", \"epoch\": %lld, \"step\": %lld, \"loss\": %.6g, \"%s\": %.6g, \"lr\": %.6g, \"loss_scale\": %.9g, \"skipped\": %lld, \"samples_per_s\": %.1f, \"ms_per_step\": %.3f}",
                          (long long)epoch + 1, (long long)step, loss_now, metric_name ? metric_name : "metric", m, lr,
                          t->loss_scale, (long long)t->skipped, sps, ms);
                win_loss = win_metric = 0;
                win_steps = 0;
                win_t0 = kl_now();
            }
            if (c->eval_every > 0 && step % c->eval_every == 0) {
                evaluate(t, &er);
                if (!t->opt.quiet)
                    printf("step %lld  eval  loss %.4f  %s %.4f\n", (long long)step, er.loss, metric_name ? metric_name : "", er.metric[0]);
                json_line(t, "{\"type\": \"eval\", \"step\": %lld, \"loss\": %.6g, \"%s\": %.6g}", (long long)step, er.loss,
                          metric_name ? metric_name : "metric", er.metric[0]);
                win_t0 = kl_now();
            }
        }
        double epoch_s = kl_now() - epoch_t0;
        double et0 = kl_now();
        evaluate(t, &er);
        evaluated_at_end = true;
        double eval_s = kl_now() - et0;
        if (metric_count && er.metric[0] > best) {
            best = er.metric[0];
            best_epoch = epoch + 1;
        }
        printf("epoch %lld/%lld  eval  loss %.4f", (long long)epoch + 1, (long long)c->epochs, er.loss);
        if (metric_name)
            printf("  %s %.4f", metric_name, er.metric[0]);
        printf("  (%lld samples)  epoch %.1f s, eval %.2f s\n", (long long)er.samples, epoch_s, eval_s);
        fflush(stdout);
        json_line(t, "{\"type\": \"eval\", \"epoch\": %lld, \"step\": %lld, \"loss\": %.6g, \"%s\": %.6g, \"epoch_s\": %.3f}",
                  (long long)epoch + 1, (long long)step, er.loss, metric_name ? metric_name : "metric", er.metric[0], epoch_s);
        win_t0 = kl_now();
        if (t->opt.save && save_checkpoint(t, t->opt.save, step)) {
            rc = -1;
            goto out;
        }
    }
    if (!evaluated_at_end) {
        evaluate(t, &er);
        if (metric_count)
            best = er.metric[0];
    }
    {
        double secs = kl_now() - t_start;
        int64_t ran = step - first_step;
        printf("done: %lld steps in %.1f s (%.2f ms/step, %.0f samples/s, data wait %.2f s)", (long long)step, secs,
               ran ? 1000.0 * secs / (double)ran : 0.0, secs > 0 ? (double)(ran * B * c->accumulate) / secs : 0.0,
               kl_loader_wait_seconds(loader));
        if (metric_name)
            printf("; final %s %.4f, best %.4f (epoch %lld)", metric_name, er.metric[0], best, (long long)best_epoch);
        printf("\n");
        /* Steps this run took (a resumed run starts past 0; a finished
         * one takes none), less the warm-up ones. */
        int64_t timed = ran - warm_steps;
        double timed_s = step_time - warm_time;
        double timed_sps = timed > 0 && timed_s > 0 ? (double)(timed * B * c->accumulate) / timed_s : 0;
        json_line(t, "{\"type\": \"summary\", \"steps\": %lld, \"seconds\": %.3f, \"step_seconds\": %.3f, \"timed_steps\": %lld, \"timed_samples_per_s\": %.1f, \"final_%s\": %.6g, \"best_%s\": %.6g}",
                  (long long)step, secs, step_time, (long long)timed, timed_sps, metric_name ? metric_name : "metric",
                  er.metric[0], metric_name ? metric_name : "metric", best);
    }
    if (t->opt.save && save_checkpoint(t, t->opt.save, step))
        rc = -1;
out:
    kl_loader_free(loader);
    return rc;
}

/* The GPU when one is usable (or asked for), else the CPU with a notice;
 * NULL when --device cuda finds no GPU (reported). */
static kl_backend *open_backend(const options *o, const kl_cpu_options *co)
{
    bool cpu = o->device && !strcmp(o->device, "cpu"), cuda = o->device && !strcmp(o->device, "cuda");
    if (!cpu) {
        char why[600];
        kl_cuda_options cuo = {.tf32 = o->tf32, .quiet = o->quiet};
        kl_backend *be = kl_cuda_backend_new(&cuo, why, sizeof why);
        if (be)
            return be;
        if (cuda) {
            kl_error("--device cuda: %s", why);
            return NULL;
        }
        fprintf(stderr, "kiln: no usable GPU (%s); training on the CPU\n", why);
    }
    return kl_cpu_backend_new(co);
}

int kl_train_main(int argc, char **argv, const char *model_name, const char *model_src,
                  const kl_builtin_kernel *builtins)
{
    trainer t = {.model = model_name};
    int rc = 1;
    kl_source src;
    kl_source_from_string(&src, model_name, model_src);
    ir_graph *g = NULL;
    if (parse_flags(argc, argv, &t.opt, model_name))
        goto done;
    if (t.opt.device && strcmp(t.opt.device, "cpu") && strcmp(t.opt.device, "auto") && strcmp(t.opt.device, "cuda")) {
        kl_error("--device must be auto, cpu or cuda");
        goto done;
    }
    /* Every file the run will write, checked before any work, so that a
     * typo in a path does not cost an epoch of training. */
    if ((t.opt.save && kl_outfile_check(t.opt.save, "--save")) ||
        (t.opt.save_init && kl_outfile_check(t.opt.save_init, "--save-init")) ||
        (t.opt.metrics && kl_outfile_check(t.opt.metrics, "--metrics")) ||
        (t.opt.trace_path && kl_outfile_check(t.opt.trace_path, "--trace")))
        goto done;
    g = load_with(&src, &t.opt, NULL, NULL);
    if (!g)
        goto done;
    kl_train_read(&g->train, &t.cfg);
    if (load_data(&t))
        goto done;
    /* One optimizer step takes batch x accumulate samples: a set smaller
     * than that is refused before anything is compiled or allocated. */
    int64_t step_samples = kl_size_mul(t.cfg.batch, t.cfg.accumulate);
    if (step_samples < 0 || step_samples > t.train_set.count) {
        kl_error("%s: the training set (%lld samples) is smaller than one step (batch %lld x accumulate %lld)\n"
                 "---> try --batch %lld --accumulate 1",
                 model_name, (long long)t.train_set.count, (long long)t.cfg.batch, (long long)t.cfg.accumulate,
                 (long long)(t.cfg.batch < t.train_set.count ? t.cfg.batch : t.train_set.count));
        goto done;
    }
    if (t.opt.metrics && kl_outfile_open_log(&t.metrics, t.opt.metrics, t.opt.resume != NULL))
        goto done;
    char *jit_reason = kernel_flags(&t.opt);
    kl_cpu_options co = {.threads = t.opt.threads ? t.opt.threads : (int)t.cfg.threads,
                         .builtins = builtins,
                         .quiet = t.opt.quiet,
                         .jit_reason = jit_reason};
    kl_backend *be = open_backend(&t.opt, &co);
    free(jit_reason);
    if (!be)
        goto done;
    t.s = kl_session_new(be, (uint64_t)t.cfg.seed);
    t.s->no_graphs = t.opt.no_cuda_graph;
    t.scaled_lr = kl_train_scaled_lr(&t.cfg, 1);
    t.loss_scale = t.cfg.precision == KL_PREC_FP16 ? t.cfg.loss_scale.init : 1.0;
    t.finite_value = -1;

    /* The training plan, then the evaluation plans (same params). */
    t.train = make_exec(&t, &src, g, KL_MODE_TRAIN, NULL);
    g = NULL;
    if (!t.train || bind_inputs(t.train->g, &t.train_set, &t.tb, model_name))
        goto done;
    for (int i = 0; i < t.train->g->reports.n; i++)
        if (!strcmp(t.train->g->reports.v[i].name, "_grads_finite"))
            t.finite_value = t.train->g->reports.v[i].value;
    /* Evaluation shares the training plan's arena: its batch is the
     * largest that fits there. */
    kl_replan rp = {&src, t.opt.kv};
    int64_t eb = kl_eval_batch_within(&rp, t.test_set.count, t.cfg.batch, kl_eval_batch(t.test_set.count, t.cfg.batch),
                                      t.train->plan->arena_bytes);
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)eb);
    t.eval = make_exec(&t, &src, load_with(&src, &t.opt, "batch", num), KL_MODE_EVAL, t.train);
    if (!t.eval || bind_inputs(t.eval->g, &t.test_set, &t.eb, model_name))
        goto done;
    if (t.test_set.count % eb) {
        snprintf(num, sizeof num, "%lld", (long long)(t.test_set.count % eb));
        t.eval_tail = make_exec(&t, &src, load_with(&src, &t.opt, "batch", num), KL_MODE_EVAL, t.train);
        if (!t.eval_tail || bind_inputs(t.eval_tail->g, &t.test_set, &t.etb, model_name))
            goto done;
    }
    int32_t max_label = t.train_set.max_label > t.test_set.max_label ? t.train_set.max_label : t.test_set.max_label;
    if (t.tb.ce_classes && max_label >= t.tb.ce_classes) {
        kl_error("%s: label %d is out of range for the model's %d classes", t.cfg.data_path ? t.cfg.data_path : "data",
                 max_label, t.tb.ce_classes);
        goto done;
    }
    int64_t params = 0;
    for (int i = 0; i < t.train->g->decls.n; i++) {
        const ir_value *v = ir_val(t.train->g, t.train->g->decls.v[i]);
        if (v->kind == IR_VAL_PARAM)
            params += ir_type_numel(&v->type);
    }
    /* The memory plan: one arena for training and evaluation (which has
     * one of its own only when it does not fit there). */
    int64_t peak = kl_persistent_bytes(t.train->g) + t.train->plan->arena_bytes;
    if (!t.eval->arena_shared)
        peak += t.eval->plan->arena_bytes;
    if (t.eval_tail && !t.eval_tail->arena_shared)
        peak += t.eval_tail->plan->arena_bytes;
    if (t.cfg.memory_limit > 0 && peak > t.cfg.memory_limit) {
        kl_error("%s: training and evaluation need %.2f MB, over the memory limit of %.2f MB (the evaluation plan does "
                 "not fit in the training arena)\n---> try a smaller --batch", model_name, (double)peak / 1e6,
                 (double)t.cfg.memory_limit / 1e6);
        goto done;
    }
    if (!t.opt.quiet) {
        printf("%s: %lld params, %s, %s, %lld train / %lld test samples\n", t.train->g->name, (long long)params,
               kl_precision_name(t.cfg.precision), be->desc, (long long)t.train_set.count, (long long)t.test_set.count);
        int64_t eff = t.cfg.batch * t.cfg.accumulate, base = t.cfg.base_batch ? t.cfg.base_batch : t.cfg.batch;
        printf("effective batch %lld (batch %lld x accumulate %lld); lr %.4g", (long long)eff, (long long)t.cfg.batch,
               (long long)t.cfg.accumulate, t.scaled_lr);
        if (t.cfg.lr_scaling != KL_LRS_NONE)
            printf(" (%s scaling of %.4g from base batch %lld)", t.cfg.lr_scaling == KL_LRS_LINEAR ? "linear" : "sqrt",
                   t.cfg.opt.lr, (long long)base);
        if (t.cfg.sched.warmup > 0)
            printf(", warmup %lld steps", (long long)t.cfg.sched.warmup);
        printf("\n");
        char *mem = pass_memory_summary(t.train->g);
        printf("memory: %s\n", mem);
        free(mem);
        char *plan = plan_summary(t.train->plan);
        printf("memory plan: %s; evaluation batch %lld %s; peak %.2f MB with params and state", plan, (long long)eb,
               t.eval->arena_shared ? "in the same arena" : "in an arena of its own", (double)peak / 1e6);
        if (t.cfg.memory_limit > 0)
            printf(" (limit %.2f MB)", (double)t.cfg.memory_limit / 1e6);
        printf("\n");
        free(plan);
    }
    if (t.opt.save_init && save_checkpoint(&t, t.opt.save_init, 0))
        goto done;
    if (t.opt.profile)
        kl_exec_profile(t.train);
    if (t.opt.trace_path) {
        if (!(t.trace = kl_trace_open(t.opt.trace_path)))
            goto done;
        kl_exec_trace(t.train, t.trace);
    }
    rc = run_training(&t, &src) ? 1 : 0;
    if (t.opt.profile) {
        printf("\nprofile of the training step:\n");
        kl_exec_print_profile(t.train, stdout, 30);
    }
done:
    ir_graph_free(g);
    kl_exec_free(t.train);
    kl_exec_free(t.eval);
    kl_exec_free(t.eval_tail);
    if (t.s) {
        kl_backend *b = t.s->be;
        kl_session_free(t.s);
        b->ops->destroy(b);
    }
    if (kl_trace_close(t.trace))
        rc = 1;
    kl_dataset_free(&t.train_set);
    kl_dataset_free(&t.test_set);
    kl_train_config_free(&t.cfg);
    if (t.metrics.f && kl_outfile_close_log(&t.metrics))
        rc = 1;
    for (int i = 0; i < t.opt.nowned; i++)
        free(t.opt.owned[i]);
    kl_source_free(&src);
    return rc;
}
