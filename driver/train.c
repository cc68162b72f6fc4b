/* The main of a training executable: data, plans, the training loop,
 * progress lines and metrics (flags: train_flags.c; evaluation:
 * train_eval.c). `kiln build` links this with the model's source and its
 * precompiled kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "budget.h"
#include "runtime/checkpoint.h"
#include "runtime/backend_cuda.h"
#include "plan/memplan.h"
#include "compile.h"
#include "ir/train_config.h"
#include "passes/passes.h"

/* ---- the model's inputs ---- */

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

void train_feed(kl_exec *e, const bindings *b, const kl_batch *batch, int64_t sample_bytes)
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

/* Lowers the model again with extra overrides (a different batch). */
static ir_graph *load_with(const kl_source *src, const train_options *o, const char *key, const char *val)
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

/* ---- the training loop ---- */

/* What the loop carries from step to step. */
typedef struct train_loop {
    kl_loader *loader;
    int64_t per_epoch, total; /* optimizer steps in an epoch, in the run */
    int64_t step;             /* optimizer steps done */
    int64_t first_step;       /* at the start: rates count the steps this process ran */
    kl_kargs args;
    /* The first report is the metric shown (internal ones start with _). */
    int metric_count;
    const char *metric_name;
    double t_start;
    /* Time inside steps alone, for the rates; time in evaluation. */
    kl_step_clock clock;
    double eval_s;
    /* The steps since the last progress line: their loss and metric. */
    double win_loss, win_metric;
    int64_t win_steps;
    eval_result er;
    double best;
    int64_t best_epoch;
    bool evaluated_at_end;
} train_loop;

/* The run's length: its epochs, or --steps when that ends it earlier. */
static int count_steps(trainer *t, train_loop *lp)
{
    const kl_train_config *c = &t->cfg;
    lp->per_epoch = kl_loader_batches(lp->loader) / c->accumulate;
    if (lp->per_epoch < 1) {
        kl_error("%s: the training set (%lld samples) is smaller than one step (batch %lld x accumulate %lld)",
                 t->model, (long long)t->train_set.count, (long long)c->batch, (long long)c->accumulate);
        return -1;
    }
    lp->total = c->epochs * lp->per_epoch;
    if (c->steps > 0 && c->steps < lp->total)
        lp->total = c->steps;
    return 0;
}

/* --resume: the params, state and step from the checkpoint. */
static int resume(trainer *t, train_loop *lp)
{
    kl_run_state rs;
    if (kl_checkpoint_load(t->s, t->opt.resume, (uint64_t)lp->total, &rs))
        return -1;
    lp->step = (int64_t)rs.step;
    /* The loss scaler continues where it was, counters included, so
     * that its next change falls on the same step. */
    if (t->cfg.precision == KL_PREC_FP16) {
        t->loss_scale = rs.loss_scale;
        t->clean_steps = rs.clean_steps;
        t->skipped = rs.skipped;
        t->skipped_in_row = rs.skipped_in_row;
    }
    if (!t->opt.quiet)
        printf("resumed from %s at step %lld\n", t->opt.resume, (long long)lp->step);
    return 0;
}

/* One optimizer step: forward and backward over accumulate micro-batches,
 * the update with the last. False when the epoch's data ends first. */
static bool run_step(trainer *t, train_loop *lp, double *lr)
{
    const kl_train_config *c = &t->cfg;
    write_hyper(t, lp->step + 1, lp->total, lr);
    for (int64_t m = 0; m < c->accumulate; m++) {
        double w0 = kl_now();
        const kl_batch *b = kl_loader_next(lp->loader);
        if (t->trace)
            kl_trace_event(t->trace, "next batch", "data", KL_TRACE_DATA, w0, kl_now());
        if (!b)
            return false;
        train_feed(t->train, &t->tb, b, t->train_set.sample_bytes);
        kl_loader_release(lp->loader, b);
        lp->args.step = lp->step * c->accumulate + m;
        unsigned phases = (1u << IR_PHASE_FORWARD) | (1u << IR_PHASE_BACKWARD);
        if (m == c->accumulate - 1)
            phases |= 1u << IR_PHASE_UPDATE;
        kl_exec_run(t->train, phases, &lp->args);
        lp->win_loss += kl_exec_scalar(t->train, t->train->g->loss);
        if (lp->metric_count)
            lp->win_metric += kl_exec_scalar(t->train, t->train->g->reports.v[0].value);
    }
    adjust_loss_scale(t);
    lp->step++;
    return true;
}

/* The step's time, for the rates and the trace. */
static void time_step(trainer *t, train_loop *lp, double st0)
{
    double st1 = kl_now();
    lp->win_steps++;
    kl_step_clock_add(&lp->clock, st0, st1);
    if (t->trace) {
        char name[48];
        snprintf(name, sizeof name, "step %lld", (long long)lp->step);
        kl_trace_event(t->trace, name, "step", KL_TRACE_STEPS, st0, st1);
    }
}

/* The progress line (and metrics record) over the steps since the last. */
static void log_progress(trainer *t, train_loop *lp, int64_t epoch, double loss_now, double lr)
{
    const kl_train_config *c = &t->cfg;
    double ms, sps;
    kl_step_clock_window(&lp->clock, c->batch * c->accumulate, &ms, &sps);
    double m = lp->win_metric / (double)(lp->win_steps * c->accumulate);
    const char *metric_name = lp->metric_name;
    if (!t->opt.quiet) {
        printf("epoch %lld/%lld  step %6lld/%lld  loss %.4f", (long long)epoch + 1, (long long)c->epochs,
               (long long)lp->step, (long long)lp->total, loss_now);
        if (metric_name)
            printf("  %s %.4f", metric_name, m);
        printf("  lr %.2e", lr);
        if (t->finite_value >= 0)
            printf("  scale %.0f  skipped %lld", t->loss_scale, (long long)t->skipped);
        printf("  %.0f samples/s  %.2f ms/step\n", sps, ms);
        fflush(stdout);
    }
    json_line(t, "{\"type\": \"train\", \"epoch\": %lld, \"step\": %lld, \"loss\": %.6g, \"%s\": %.6g, \"lr\": %.6g, \"loss_scale\": %.9g, \"skipped\": %lld, \"samples_per_s\": %.1f, \"ms_per_step\": %.3f}",
              (long long)epoch + 1, (long long)lp->step, loss_now, metric_name ? metric_name : "metric", m, lr,
              t->loss_scale, (long long)t->skipped, sps, ms);
    lp->win_loss = lp->win_metric = 0;
    lp->win_steps = 0;
}

/* --eval-every: an evaluation between steps. */
static void eval_between_steps(trainer *t, train_loop *lp)
{
    const char *metric_name = lp->metric_name;
    lp->eval_s += train_evaluate(t, &lp->er);
    if (!t->opt.quiet)
        printf("step %lld  eval  loss %.4f  %s %.4f\n", (long long)lp->step, lp->er.loss, metric_name ? metric_name : "",
               lp->er.metric[0]);
    json_line(t, "{\"type\": \"eval\", \"step\": %lld, \"loss\": %.6g, \"%s\": %.6g}", (long long)lp->step, lp->er.loss,
              metric_name ? metric_name : "metric", lp->er.metric[0]);
}

/* An epoch's end (or the run's): evaluation (unless eval_every is 0),
 * its line, the checkpoint. */
static int end_epoch(trainer *t, train_loop *lp, int64_t epoch, double epoch_t0)
{
    const kl_train_config *c = &t->cfg;
    const char *metric_name = lp->metric_name;
    double epoch_s = kl_now() - epoch_t0;
    if (c->eval_every == 0)
        return t->opt.save && save_checkpoint(t, t->opt.save, lp->step) ? -1 : 0;
    double eval_s = train_evaluate(t, &lp->er);
    lp->eval_s += eval_s;
    lp->evaluated_at_end = true;
    if (lp->metric_count && lp->er.metric[0] > lp->best) {
        lp->best = lp->er.metric[0];
        lp->best_epoch = epoch + 1;
    }
    printf("epoch %lld/%lld  eval  loss %.4f", (long long)epoch + 1, (long long)c->epochs, lp->er.loss);
    if (metric_name)
        printf("  %s %.4f", metric_name, lp->er.metric[0]);
    printf("  (%lld samples)  epoch %.1f s, eval %.2f s\n", (long long)lp->er.samples, epoch_s, eval_s);
    fflush(stdout);
    json_line(t, "{\"type\": \"eval\", \"epoch\": %lld, \"step\": %lld, \"loss\": %.6g, \"%s\": %.6g, \"epoch_s\": %.3f}",
              (long long)epoch + 1, (long long)lp->step, lp->er.loss, metric_name ? metric_name : "metric",
              lp->er.metric[0], epoch_s);
    if (t->opt.save && save_checkpoint(t, t->opt.save, lp->step))
        return -1;
    return 0;
}

/* The run's last line and summary record. */
static void print_summary(trainer *t, const train_loop *lp)
{
    const kl_train_config *c = &t->cfg;
    const char *metric_name = lp->metric_name;
    double secs = kl_now() - lp->t_start;
    /* The rates count the steps this process ran (a resumed run starts
     * past 0; one resumed at its end runs none) over their own time:
     * evaluation, start-up and checkpoints are not in it. */
    const kl_step_clock *k = &lp->clock;
    int64_t per_step = c->batch * c->accumulate;
    double ms, sps, timed_ms, timed_sps;
    kl_step_clock_run(k, per_step, &ms, &sps);
    kl_step_clock_timed(k, per_step, &timed_ms, &timed_sps);
    printf("done: %lld steps", (long long)lp->step);
    if (lp->first_step)
        printf(" (%lld in this run)", (long long)k->run_steps);
    printf(" in %.1f s: steps %.1f s (%.2f ms/step, %.0f samples/s, data wait %.2f s), evaluation %.1f s", secs,
           k->run_s, ms, sps, kl_loader_wait_seconds(lp->loader), lp->eval_s);
    if (metric_name && lp->er.samples)
        printf("; final %s %.4f, best %.4f (epoch %lld)", metric_name, lp->er.metric[0], lp->best,
               (long long)lp->best_epoch);
    printf("\n");
    kl_buf j = {0};
    kl_buf_printf(&j, "{\"type\": \"summary\", \"steps\": %lld, \"run_steps\": %lld, \"seconds\": %.3f, \"step_seconds\": %.3f, \"eval_seconds\": %.3f, \"ms_per_step\": %.3f, \"samples_per_s\": %.1f, \"timed_steps\": %lld, \"timed_ms_per_step\": %.3f, \"timed_samples_per_s\": %.1f",
                  (long long)lp->step, (long long)k->run_steps, secs, k->run_s, lp->eval_s, ms, sps,
                  (long long)(k->run_steps - k->warm_steps), timed_ms, timed_sps);
    if (lp->er.samples)
        kl_buf_printf(&j, ", \"final_%s\": %.6g, \"best_%s\": %.6g", metric_name ? metric_name : "metric",
                      lp->er.metric[0], metric_name ? metric_name : "metric", lp->best);
    kl_buf_puts(&j, "}");
    char *js = kl_buf_take(&j);
    json_line(t, "%s", js);
    free(js);
}

/* The loop: epochs of steps, each step logged every log_every and checked
 * for divergence, an evaluation every eval_every steps and at each
 * epoch's end, then the summary and the final checkpoint. */
static int run_training(trainer *t)
{
    const kl_train_config *c = &t->cfg;
    train_loop lp = {.best = -1, .args = {0, (uint64_t)c->seed}};
    lp.loader = kl_loader_new(&t->train_set, c->batch, true, true, (uint64_t)c->seed, 4);
    int rc = -1;
    if (count_steps(t, &lp) || (t->opt.resume && resume(t, &lp)))
        goto out;
    lp.first_step = lp.step;
    lp.t_start = kl_now();
    lp.metric_count = t->train->g->reports.n && t->train->g->reports.v[0].name[0] != '_';
    lp.metric_name = lp.metric_count ? t->train->g->reports.v[0].name : NULL;
    for (int64_t epoch = lp.step / lp.per_epoch; epoch < c->epochs && lp.step < lp.total; epoch++) {
        kl_loader_start(lp.loader, epoch);
        /* Skip what a resumed run already did in this epoch. */
        for (int64_t skip = (lp.step - epoch * lp.per_epoch) * c->accumulate; skip > 0; skip--)
            kl_loader_release(lp.loader, kl_loader_next(lp.loader));
        double epoch_t0 = kl_now();
        while (lp.step < lp.total) {
            double lr = 0, st0 = kl_now();
            if (!run_step(t, &lp, &lr))
                break;
            if (c->max_skipped_steps > 0 && t->skipped_in_row > c->max_skipped_steps) {
                kl_error("step %lld: the last %lld steps were all skipped for non-finite gradients (loss scale now %g); "
                         "training diverged (try a lower --lr; max_skipped_steps = %lld)",
                         (long long)lp.step, (long long)t->skipped_in_row, t->loss_scale, (long long)c->max_skipped_steps);
                goto out;
            }
            time_step(t, &lp, st0);
            double loss_now = lp.win_loss / (double)(lp.win_steps * c->accumulate);
            if (!isfinite(loss_now)) {
                kl_error("step %lld: the loss is %g; training diverged (try a lower --lr)", (long long)lp.step, loss_now);
                goto out;
            }
            if (lp.step % c->log_every == 0 || lp.step == lp.total)
                log_progress(t, &lp, epoch, loss_now, lr);
            if (c->eval_every > 0 && lp.step % c->eval_every == 0)
                eval_between_steps(t, &lp);
        }
        if (end_epoch(t, &lp, epoch, epoch_t0))
            goto out;
    }
    if (!lp.evaluated_at_end && c->eval_every != 0) {
        lp.eval_s += train_evaluate(t, &lp.er);
        if (lp.metric_count)
            lp.best = lp.er.metric[0];
    }
    print_summary(t, &lp);
    rc = t->opt.save && save_checkpoint(t, t->opt.save, lp.step) ? -1 : 0;
out:
    kl_loader_free(lp.loader);
    return rc;
}

/* The training plan (g, which it takes), then the evaluation plans: the
 * largest evaluation batch that fits in the training plan's arena, and
 * one for the test set's remainder. */
static int make_plans(trainer *t, const kl_source *src, ir_graph *g, int64_t *eb_out)
{
    const char *model_name = t->model;
    t->train = make_exec(t, src, g, KL_MODE_TRAIN, NULL);
    if (!t->train || bind_inputs(t->train->g, &t->train_set, &t->tb, model_name))
        return -1;
    for (int i = 0; i < t->train->g->reports.n; i++)
        if (!strcmp(t->train->g->reports.v[i].name, "_grads_finite"))
            t->finite_value = t->train->g->reports.v[i].value;
    /* Evaluation shares the training plan's arena: its batch is the
     * largest that fits there. */
    kl_replan rp = {src, t->opt.kv};
    int64_t eb = kl_eval_batch_within(&rp, t->test_set.count, t->cfg.batch, kl_eval_batch(t->test_set.count, t->cfg.batch),
                                      t->train->plan->arena_bytes);
    *eb_out = eb;
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)eb);
    t->eval = make_exec(t, src, load_with(src, &t->opt, "batch", num), KL_MODE_EVAL, t->train);
    if (!t->eval || bind_inputs(t->eval->g, &t->test_set, &t->eb, model_name))
        return -1;
    if (t->test_set.count % eb) {
        snprintf(num, sizeof num, "%lld", (long long)(t->test_set.count % eb));
        t->eval_tail = make_exec(t, src, load_with(src, &t->opt, "batch", num), KL_MODE_EVAL, t->train);
        if (!t->eval_tail || bind_inputs(t->eval_tail->g, &t->test_set, &t->etb, model_name))
            return -1;
    }
    int32_t max_label = t->train_set.max_label > t->test_set.max_label ? t->train_set.max_label : t->test_set.max_label;
    if (t->tb.ce_classes && max_label >= t->tb.ce_classes) {
        kl_error("%s: label %d is out of range for the model's %d classes", t->cfg.data_path ? t->cfg.data_path : "data",
                 max_label, t->tb.ce_classes);
        return -1;
    }
    return 0;
}

/* The memory plan: one arena for training and evaluation (which has one
 * of its own only when it does not fit there), with the params and state,
 * against --memory-limit. */
static int check_peak(trainer *t, int64_t *peak_out)
{
    int64_t peak = kl_persistent_bytes(t->train->g) + t->train->plan->arena_bytes;
    if (!t->eval->arena_shared)
        peak += t->eval->plan->arena_bytes;
    if (t->eval_tail && !t->eval_tail->arena_shared)
        peak += t->eval_tail->plan->arena_bytes;
    *peak_out = peak;
    if (t->cfg.memory_limit > 0 && peak > t->cfg.memory_limit) {
        kl_error("%s: training and evaluation need %.2f MB, over the memory limit of %.2f MB (the evaluation plan does "
                 "not fit in the training arena)\n---> try a smaller --batch", t->model, (double)peak / 1e6,
                 (double)t->cfg.memory_limit / 1e6);
        return -1;
    }
    return 0;
}

/* --batch auto (driver/budget.h): the micro-batch from the memory plan
 * and the accumulation that keeps the effective batch, then the graph
 * loaded again with both. The limit: --memory-limit (or the train key),
 * else the GPU's free memory. Says what it chose and why. */
static int choose_batch(trainer *t, const kl_source *src, const kl_backend *be, ir_graph **g)
{
    int64_t limit = t->cfg.memory_limit;
    const char *from = "--memory-limit";
    if (limit <= 0 && be->ops->free_bytes) {
        limit = be->ops->free_bytes((kl_backend *)be);
        from = "the GPU's free memory";
    }
    if (limit <= 0) {
        kl_error("--batch auto needs a memory budget on the CPU\n---> add --memory-limit B (e.g. 2GiB)");
        return -1;
    }
    int64_t effective = kl_size_mul(t->cfg.batch, t->cfg.accumulate);
    kl_replan rp = {src, t->opt.kv};
    kl_auto_batch_result r;
    if (kl_auto_batch(&rp, effective, limit, &r))
        return -1;
    char bs[32], as[32];
    snprintf(bs, sizeof bs, "%lld", (long long)r.batch);
    snprintf(as, sizeof as, "%lld", (long long)r.accumulate);
    if (train_add_setting(&t->opt, "batch", bs) || train_add_setting(&t->opt, "accumulate", as))
        return -1;
    if (!t->opt.quiet) {
        printf("batch auto: micro-batch %lld x accumulate %lld = effective batch %lld", (long long)r.batch,
               (long long)r.accumulate, (long long)(r.batch * r.accumulate));
        if (r.batch * r.accumulate != effective)
            printf(" (asked: %lld, not a multiple of %lld)", (long long)effective, (long long)r.batch);
        printf("; its training plan needs %.2f MB of %.2f MB (%s)", (double)r.bytes / 1e6, (double)limit / 1e6, from);
        if (r.next_batch)
            printf(", micro-batch %lld would need %.2f MB", (long long)r.next_batch, (double)r.next_bytes / 1e6);
        else
            printf(", the whole effective batch in one micro-batch");
        printf(" (%d plans, nothing run)\n", r.plans);
    }
    ir_graph_free(*g);
    *g = load_with(src, &t->opt, NULL, NULL);
    if (!*g)
        return -1;
    kl_train_read(&(*g)->train, &t->cfg);
    return 0;
}

/* The start-up lines: the model, the batch and learning rate, memory. */
static void print_start(const trainer *t, const kl_backend *be, int64_t eb, int64_t peak)
{
    const kl_train_config *c = &t->cfg;
    int64_t params = 0;
    for (int i = 0; i < t->train->g->decls.n; i++) {
        const ir_value *v = ir_val(t->train->g, t->train->g->decls.v[i]);
        if (v->kind == IR_VAL_PARAM)
            params += ir_type_numel(&v->type);
    }
    const char *gemm = kl_cpu_gemm_choice(be);
    printf("%s: %lld params, %s, %s%s%s, %lld train / %lld test samples\n", t->train->g->name, (long long)params,
           kl_precision_name(c->precision), be->desc, gemm ? ", " : "", gemm ? gemm : "", (long long)t->train_set.count,
           (long long)t->test_set.count);
    int64_t eff = c->batch * c->accumulate, base = c->base_batch ? c->base_batch : c->batch;
    printf("effective batch %lld (batch %lld x accumulate %lld); lr %.4g", (long long)eff, (long long)c->batch,
           (long long)c->accumulate, t->scaled_lr);
    if (c->lr_scaling != KL_LRS_NONE)
        printf(" (%s scaling of %.4g from base batch %lld)", c->lr_scaling == KL_LRS_LINEAR ? "linear" : "sqrt",
               c->opt.lr, (long long)base);
    if (c->sched.warmup > 0)
        printf(", warmup %lld steps", (long long)c->sched.warmup);
    printf("\n");
    char *mem = pass_memory_summary(t->train->g);
    printf("memory: %s\n", mem);
    free(mem);
    char *plan = plan_summary(t->train->plan);
    printf("memory plan: %s; evaluation batch %lld %s; peak %.2f MB with params and state", plan, (long long)eb,
           t->eval->arena_shared ? "in the same arena" : "in an arena of its own", (double)peak / 1e6);
    if (c->memory_limit > 0)
        printf(" (limit %.2f MB)", (double)c->memory_limit / 1e6);
    printf("\n");
    free(plan);
}

/* The GPU when one is usable (or asked for), else the CPU with a notice;
 * NULL when --device cuda finds no GPU (reported). */
static kl_backend *open_backend(const train_options *o, const kl_cpu_options *co)
{
    bool cpu = o->device && !strcmp(o->device, "cpu"), cuda = o->device && !strcmp(o->device, "cuda");
    if (!cpu) {
        char why[600];
        kl_cuda_options cuo = {.tf32 = o->tf32, .quiet = o->quiet};
        kl_backend *be = kl_cuda_backend_new(&cuo, why, sizeof why);
        if (be && o->bf16_gemm) {
            kl_error("--bf16-gemm chooses the CPU backend's bf16 GEMMs; this run is on the GPU\n---> add --device cpu");
            be->ops->destroy(be);
            return NULL;
        }
        if (be)
            return be;
        if (cuda) {
            kl_error("--device cuda: %s", why);
            return NULL;
        }
        if (!o->quiet)
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
    if (train_parse_flags(argc, argv, &t.opt, model_name))
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
    char *jit_reason = train_kernel_flags(&t.opt);
    kl_cpu_options co = {.threads = t.opt.threads ? t.opt.threads : (int)t.cfg.threads,
                         .threads_from = t.opt.threads ? "--threads" : "the train block's threads",
                         .builtins = builtins,
                         .quiet = t.opt.quiet,
                         .jit_reason = jit_reason,
                         .bf16_gemm = t.opt.bf16_gemm};
    kl_backend *be = open_backend(&t.opt, &co);
    free(jit_reason);
    if (!be)
        goto done;
    t.s = kl_session_new(be, (uint64_t)t.cfg.seed);
    t.s->no_graphs = t.opt.no_cuda_graph;
    if (t.opt.batch_auto && choose_batch(&t, &src, be, &g))
        goto done;
    t.scaled_lr = kl_train_scaled_lr(&t.cfg, 1);
    t.loss_scale = t.cfg.precision == KL_PREC_FP16 ? t.cfg.loss_scale.init : 1.0;
    t.finite_value = -1;

    /* The training plan, then the evaluation plans (same params). */
    int64_t eb, peak;
    int made = make_plans(&t, &src, g, &eb);
    g = NULL;
    if (made || check_peak(&t, &peak))
        goto done;
    if (!t.opt.quiet)
        print_start(&t, be, eb, peak);
    if (t.opt.save_init && save_checkpoint(&t, t.opt.save_init, 0))
        goto done;
    if (t.opt.profile)
        kl_exec_profile(t.train);
    if (t.opt.trace_path) {
        if (!(t.trace = kl_trace_open(t.opt.trace_path)))
            goto done;
        kl_exec_trace(t.train, t.trace);
    }
    rc = run_training(&t) ? 1 : 0;
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
