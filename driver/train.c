/* The main of a training executable and its training loop: steps,
 * evaluations, checkpoints (flags: train_flags.c; data and the model's
 * inputs: train_data.c; backend, plans and start-up lines:
 * train_setup.c; progress lines, metrics, TensorBoard, the monitor and
 * the summary: train_observe.c; evaluation: train_eval.c). `kiln build` links this with
 * the model's source and its precompiled kernels. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "train_loop.h"
#include "model_summary.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/exec/backend_cuda.h"
#include "runtime/observe/nvtx.h"
#include "runtime/observe/tboard.h"
#include "ir/train_config.h"

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

static void write_hyper(trainer *t, int64_t step, double *lr_out)
{
    kl_persist *h = kl_session_find(t->s, "optimizer.hyper");
    double lr = kl_schedule_lr(&t->cfg, t->scaled_lr, step, t->schedule_span);
    /* The gradient multiplier undoes the loss scale and averages the
     * micro-batches and the ranks (whose gradients are summed). */
    float v[4] = {(float)lr, (float)(1 - pow(t->cfg.opt.beta1, (double)step)),
                  (float)(1 - pow(t->cfg.opt.beta2, (double)step)),
                  (float)(1.0 / (t->loss_scale * (double)t->cfg.accumulate * (double)t->world))};
    if (h)
        t->s->be->ops->copy_in(t->s->be, h->ptr, v, sizeof v);
    kl_persist *ls = kl_session_find(t->s, "loss_scale");
    /* --force-overflow N: step N's gradients become inf, as an fp16
     * overflow would make them (the tests check the step is skipped). */
    float sv = step == t->opt.force_overflow && t->opt.force_overflow_stage < 0 ? (float)(1.0 / 0.0) : (float)t->loss_scale;
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

/* --save-every: SAVE.step-N, then the older ones of this run's series
 * beyond --keep go (first: the step this run began at). */
static int save_periodic(trainer *t, int64_t step, int64_t first)
{
    /* Every rank: batch norm's statistics are averaged across ranks (a
     * collective) before a checkpoint; rank 0 alone writes it. */
    train_ranks_settle(t);
    if (!t->opt.save)
        return 0;
    char *path = train_periodic_path(t->opt.save, step);
    int rc = train_save_checkpoint(t, path, step);
    free(path);
    if (!rc)
        train_prune_checkpoints(&t->opt, first, step);
    return rc;
}

/* ---- the training loop ---- */

/* The run's length: its epochs, or --steps when that ends it earlier. */
static int count_steps(trainer *t, train_loop *lp)
{
    const kl_train_config *c = &t->cfg;
    lp->per_epoch = kl_loader_batches(lp->loader) / c->accumulate;
    if (lp->per_epoch < 1) {
        kl_error("%s: the training set (%lld samples) is smaller than one step (batch %lld x accumulate %lld x ranks %d)",
                 t->model, (long long)t->train_set.count, (long long)c->batch, (long long)c->accumulate, t->world);
        return -1;
    }
    lp->total = c->epochs * lp->per_epoch;
    if (c->steps > 0 && c->steps < lp->total)
        lp->total = c->steps;
    t->schedule_span = c->sched.span > 0 ? c->sched.span : lp->total;
    return 0;
}

/* A resumed run whose lr schedule spans other steps than its
 * checkpoint's stretches (or shrinks) the schedule from here on: one line
 * says so. Constant and step schedules do not depend on the span. */
static void note_schedule_span(const trainer *t, uint64_t saved)
{
    kl_schedule_kind k = t->cfg.sched.kind;
    if (t->opt.quiet || !saved || saved == (uint64_t)t->schedule_span || k == KL_SCHED_CONSTANT || k == KL_SCHED_STEP)
        return;
    printf("note: the checkpoint's lr schedule spans %llu steps, this run's %lld: the lr from here on follows the "
           "%lld-step schedule, not the saved one (--schedule-steps %llu keeps it)\n",
           (unsigned long long)saved, (long long)t->schedule_span, (long long)t->schedule_span,
           (unsigned long long)saved);
}

/* --resume: the params, state and step from the checkpoint. */
static int resume(trainer *t, train_loop *lp)
{
    kl_run_state rs;
    if (t->opt.resume_latest && train_check_latest(t, t->schedule_span))
        return -1;
    if (train_ranks_ckpt_begin(t, true))
        return -1;
    int rc = kl_checkpoint_load(t->s, t->opt.resume, (uint64_t)lp->total, &rs);
    train_ranks_ckpt_end(t, true);
    /* Every rank, loaded or not: each read its own host's file. */
    if (train_agree_resume(t, rc, rc ? 0 : rs.step, rc ? 0 : rs.checksum))
        return -1;
    lp->step = (int64_t)rs.step;
    t->resumed = rs;
    /* The loss scaler continues where it was, counters included, so
     * that its next change falls on the same step; a checkpoint of
     * another precision has none: the scaler starts afresh. */
    if (t->cfg.precision == KL_PREC_FP16 && rs.scaler_from_fp16) {
        t->loss_scale = rs.loss_scale;
        t->clean_steps = rs.clean_steps;
        t->skipped = rs.skipped;
        t->skipped_in_row = rs.skipped_in_row;
    }
    if (!t->opt.quiet)
        kl_fprintf_escaped(stdout, "resumed from %s at step %lld\n", t->opt.resume, (long long)lp->step);
    note_schedule_span(t, rs.schedule_steps);
    return 0;
}

/* After warm-up (the run's first CPU_WAIT_SKIP steps), over the next
 * CPU_WAIT_STEPS: a CPU run whose threads wait for cores held by other
 * processes prints one hint with the share it measured. */
#define CPU_WAIT_SKIP 3
#define CPU_WAIT_STEPS 20
static void watch_cpu_wait(trainer *t, train_loop *lp)
{
    if (t->opt.quiet || kl_backend_is_cuda(t->s->be) || t->s->be->threads < 2)
        return;
    if (lp->step == lp->first_step + CPU_WAIT_SKIP)
        kl_cpu_wait_sample_now(&lp->wait_from);
    if (lp->step != lp->first_step + CPU_WAIT_SKIP + CPU_WAIT_STEPS)
        return;
    kl_cpu_wait_sample now;
    kl_cpu_wait_sample_now(&now);
    char *hint = kl_cpu_wait_hint(&lp->wait_from, &now, t->s->be->threads, CPU_WAIT_STEPS);
    if (hint) {
        train_bar_break(&lp->bar);
        printf("%s\n", hint);
        fflush(stdout);
    }
    free(hint);
}

/* One optimizer step: forward and backward over accumulate micro-batches,
 * the update with the last. False when the epoch's data ends first. */
static bool run_step(trainer *t, train_loop *lp, double *lr)
{
    const kl_train_config *c = &t->cfg;
    train_preempt_test_hook(lp->step + 1);
    write_hyper(t, lp->step + 1, lr);
    /* This rank's loss and metric over the micro-batches, and whether a
     * preemption signal came: summed over the ranks, so that every rank
     * stops at the same step's boundary. */
    double sums[3] = {0, 0, (double)train_preempt_pending()};
    if (t->pipe && train_pipeline_step(t, lp, sums)) {
        kl_error("%s: the data ended inside a pipelined step", t->model);
        kl_comm_abort(t->comm, 1);
    }
    for (int64_t m = 0; !t->pipe && m < c->accumulate; m++) {
        double w0 = kl_now();
        kl_nvtx_push("data wait");
        const kl_batch *b = kl_loader_next(lp->loader);
        kl_nvtx_pop();
        if (t->trace)
            kl_trace_event(t->trace, "next batch", "data", KL_TRACE_DATA, w0, kl_now());
        if (!b)
            return false;
        /* The loader delivers this rank's rows of the global batch. */
        train_feed(t->train, &t->tb, b);
        kl_loader_release(lp->loader, b);
        lp->args.step = lp->step * c->accumulate + m;
        unsigned phases = (1u << IR_PHASE_FORWARD) | (1u << IR_PHASE_BACKWARD);
        if (m == c->accumulate - 1)
            phases |= 1u << IR_PHASE_UPDATE;
        kl_exec_run(t->train, phases, &lp->args);
        sums[0] += kl_exec_scalar(t->train, t->train->g->loss);
        if (lp->metric_count)
            sums[1] += kl_exec_scalar(t->train, t->train->g->reports.v[0].value);
    }
    /* The global batch's: the mean over the ranks. */
    train_ranks_sums(t, sums, 3);
    if (sums[2] > 0 && !lp->preempted)
        lp->preempted = train_preempt_pending() ? train_preempt_pending() : -1;
    lp->win_loss += sums[0] / t->world;
    lp->win_metric += sums[1] / t->world;
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

/* Bad test data stops the run (on_error = fail); skipped samples are
 * reported. -1 after an error. */
static int eval_data_check(trainer *t, eval_result *r)
{
    if (r->error) {
        kl_error("%s", r->error);
        free(r->error);
        r->error = NULL;
        return -1;
    }
    if (r->skipped && !t->opt.quiet)
        kl_fprintf_escaped(stdout, "evaluation: %lld test sample%s skipped (on_error = skip); the first: %s\n",
                           (long long)r->skipped, r->skipped == 1 ? "" : "s", r->first_skip);
    return 0;
}

/* --eval-every: an evaluation between steps. */
static int eval_between_steps(trainer *t, train_loop *lp)
{
    lp->eval_s += train_evaluate(t, &lp->er);
    if (eval_data_check(t, &lp->er))
        return -1;
    train_bar_break(&lp->bar);
    kl_buf line = {0}, json = {0};
    train_eval_metrics(t, &lp->er, &line, &json);
    if (!t->opt.quiet)
        printf("step %lld  eval  loss %.4f%s\n", (long long)lp->step, lp->er.loss, line.s);
    train_json_line(t, "{\"type\": \"eval\", \"step\": %lld, \"loss\": %.6g%s}", (long long)lp->step, lp->er.loss, json.s);
    kl_buf_free(&line);
    kl_buf_free(&json);
    train_tboard_eval(t, lp);
    return 0;
}

/* An epoch's end (or the run's): evaluation (unless eval_every is 0),
 * its line, the checkpoint. */
static int end_epoch(trainer *t, train_loop *lp, int64_t epoch, double epoch_t0)
{
    const kl_train_config *c = &t->cfg;
    double epoch_s = kl_now() - epoch_t0;
    train_ranks_settle(t);
    if (c->eval_every == 0 || !t->eval)
        return t->opt.save && train_save_checkpoint(t, t->opt.save, lp->step) ? -1 : 0;
    double eval_s = train_evaluate(t, &lp->er);
    if (eval_data_check(t, &lp->er))
        return -1;
    lp->eval_s += eval_s;
    lp->evaluated_at_end = true;
    kl_buf line = {0}, json = {0};
    train_eval_metrics(t, &lp->er, &line, &json);
    printf("epoch %lld/%lld  eval  loss %.4f%s  (%lld samples)  epoch %.1f s, eval %.2f s\n", (long long)epoch + 1,
           (long long)c->epochs, lp->er.loss, line.s, (long long)lp->er.samples, epoch_s, eval_s);
    fflush(stdout);
    train_json_line(t, "{\"type\": \"eval\", \"epoch\": %lld, \"step\": %lld, \"loss\": %.6g%s, \"epoch_s\": %.3f}",
                    (long long)epoch + 1, (long long)lp->step, lp->er.loss, json.s, epoch_s);
    kl_buf_free(&line);
    kl_buf_free(&json);
    train_tboard_eval(t, lp);
    if (train_best_after_eval(t, lp, epoch))
        return -1;
    if (t->opt.save && train_save_checkpoint(t, t->opt.save, lp->step))
        return -1;
    return 0;
}

/* A preemption signal (train_preempt.c) at this step's boundary: --save
 * at this step (every rank settles; rank 0 writes), one line, and the
 * run's distinct exit status. */
static int stop_preempted(trainer *t, train_loop *lp)
{
    train_ranks_settle(t);
    if (t->opt.save && train_save_checkpoint(t, t->opt.save, lp->step))
        return 1;
    const char *sig = lp->preempted == SIGTERM ? "SIGTERM" : lp->preempted == SIGUSR1 ? "SIGUSR1" : "a signal on another rank";
    kl_fprintf_escaped(stdout, "preempted (%s) at step %lld of %lld: saved %s; the same command with --resume latest "
                       "continues (exit status %d)\n", sig, (long long)lp->step, (long long)lp->total,
                       t->opt.save ? t->opt.save : "(rank 0's --save)", TRAIN_EXIT_PREEMPTED);
    fflush(stdout);
    train_json_line(t, "{\"type\": \"preempted\", \"step\": %lld}", (long long)lp->step);
    return TRAIN_EXIT_PREEMPTED;
}

/* The loop: epochs of steps, each step logged every log_every and checked
 * for divergence, an evaluation every eval_every steps and at each
 * epoch's end, then the summary and the final checkpoint. */
static int run_training(trainer *t)
{
    const kl_train_config *c = &t->cfg;
    train_loop lp = {.best = -1, .args = {0, (uint64_t)c->seed}};
    /* Every rank orders the global batches (batch x ranks samples) the
     * same way and decodes only its own rows of each. */
    kl_loader_opts lo = {.batch = c->batch * t->world, .shuffle = c->data_shuffle, .drop_last = true,
                         .seed = (uint64_t)c->seed, .depth = t->train_set.shards ? c->data_prefetch : 4,
                         .workers = t->train_set.shards ? c->data_workers : 1, .augment_random = true,
                         .rows_first = t->rank * c->batch, .rows = c->batch};
    lp.loader = kl_loader_new_opts(&t->train_set, &lo);
    t->loop = &lp;
    int rc = -1;
    if (count_steps(t, &lp) || (t->opt.resume && resume(t, &lp)))
        goto out;
    lp.first_step = lp.step;
    lp.t_start = kl_now();
    lp.win_wait = kl_loader_wait_seconds(lp.loader);
    kl_host_sample_now(&lp.win_host);
    lp.run_host = lp.win_host;
    lp.metric_count = t->train->g->reports.n && t->train->g->reports.v[0].name[0] != '_';
    lp.metric_name = lp.metric_count ? t->train->g->reports.v[0].name : NULL;
    /* Every line the run prints is known by now (rank > 0, --eval-only
     * and --generate are quiet): the bar or the periodic lines. */
    t->opt.progress = train_progress_resolve(t->opt.progress, t->opt.quiet);
    lp.bar.on = t->opt.progress == TRAIN_PROGRESS_BAR;
    /* With the bar (a person at a terminal): the model summary first. */
    if (lp.bar.on) {
        kl_model_summary(t->train->plan, c->batch, c->accumulate, stdout);
        if (t->world > 1)
            kl_model_summary_ranks(t->train->plan, t->world, stdout);
        fflush(stdout);
    }
    if (train_best_setup(t, &lp))
        goto out;
    for (int64_t epoch = lp.step / lp.per_epoch; epoch < c->epochs && lp.step < lp.total && !lp.watch.stopped; epoch++) {
        /* A resumed run starts past the batches it already took in this
         * epoch: the order is the seed's and the epoch's, so the position
         * is the step's. */
        kl_loader_start_at(lp.loader, epoch, (lp.step - epoch * lp.per_epoch) * c->accumulate);
        double epoch_t0 = kl_now();
        train_bar_epoch(&lp.bar, epoch, c->epochs, epoch * lp.per_epoch, lp.per_epoch, lp.first_step, lp.total);
        /* A periodic save or a preemption at an epoch's last step waits
         * for its evaluation, so that the checkpoint records it (a run
         * resumed from there does not evaluate that epoch again). */
        bool save_at_end = false;
        while (lp.step < lp.total) {
            double lr = 0, st0 = kl_now();
            if (kl_nvtx_on()) {
                char name[48];
                snprintf(name, sizeof name, "step %lld", (long long)lp.step + 1);
                kl_nvtx_push(name);
            }
            bool stepped = run_step(t, &lp, &lr);
            kl_nvtx_pop();
            if (!stepped) {
                if (kl_loader_failed(lp.loader)) {
                    kl_error("%s", kl_loader_failed(lp.loader));
                    goto out;
                }
                break;
            }
            if (c->max_skipped_steps > 0 && t->skipped_in_row > c->max_skipped_steps) {
                train_bar_break(&lp.bar);
                /* A scale beyond fp16's largest value overflows any gradient of
                   magnitude >= 1 by itself: then the scale is the cause, not --lr. */
                if (t->loss_scale > 65504.0)
                    kl_error("step %lld: the last %lld steps were all skipped for non-finite gradients; the loss scale "
                             "(now %g) is above fp16's largest value 65504: lower it (loss_scale = dynamic(scale = 65536) "
                             "or static(S)); max_skipped_steps = %lld",
                             (long long)lp.step, (long long)t->skipped_in_row, t->loss_scale,
                             (long long)c->max_skipped_steps);
                else
                    kl_error("step %lld: the last %lld steps were all skipped for non-finite gradients (loss scale now %g); "
                             "training diverged (try a lower --lr or a lower loss_scale; max_skipped_steps = %lld)",
                             (long long)lp.step, (long long)t->skipped_in_row, t->loss_scale,
                             (long long)c->max_skipped_steps);
                goto out;
            }
            time_step(t, &lp, st0);
            watch_cpu_wait(t, &lp);
            double loss_now = lp.win_loss / (double)(lp.win_steps * c->accumulate);
            if (!isfinite(loss_now)) {
                train_bar_break(&lp.bar);
                kl_error("step %lld: the loss is %g; training diverged (try a lower --lr)", (long long)lp.step, loss_now);
                goto out;
            }
            bool logged = lp.step % c->log_every == 0 || lp.step == lp.total;
            /* A step that ends the epoch (or the run) is evaluated
             * once, by end_epoch: its line and its record. */
            bool at_end = lp.step % lp.per_epoch == 0 || lp.step == lp.total;
            /* The bar's loss and metric: the steps' since the last
             * progress record, as the lines show them. */
            train_bar_step(&lp.bar, lp.step, kl_now() - st0, c->batch * c->accumulate * t->world, loss_now,
                           lp.metric_name, lp.win_metric / (double)(lp.win_steps * c->accumulate),
                           kl_backend_is_cuda(t->s->be) ? t->peak_bytes : 0, logged || at_end);
            if (logged)
                train_log_progress(t, &lp, epoch, loss_now, lr);
            if (lp.preempted && !at_end) {
                train_bar_break(&lp.bar);
                rc = stop_preempted(t, &lp);
                goto out;
            }
            if (c->eval_every > 0 && lp.step % c->eval_every == 0 && !at_end && eval_between_steps(t, &lp))
                goto out;
            bool periodic = t->opt.save_every > 0 && lp.step % t->opt.save_every == 0;
            save_at_end = periodic && at_end;
            if (periodic && !at_end && save_periodic(t, lp.step, lp.first_step))
                goto out;
            if (at_end)
                break;
        }
        train_bar_break(&lp.bar);
        if (end_epoch(t, &lp, epoch, epoch_t0))
            goto out;
        if (save_at_end && save_periodic(t, lp.step, lp.first_step))
            goto out;
        if (lp.preempted && !lp.watch.stopped) {
            rc = stop_preempted(t, &lp);
            goto out;
        }
    }
    if (!lp.evaluated_at_end && c->eval_every != 0 && t->eval) {
        lp.eval_s += train_evaluate(t, &lp.er);
        if (eval_data_check(t, &lp.er))
            goto out;
        if (lp.metric_count && !lp.best_epoch) {
            /* Resumed at its end from a checkpoint without the
             * evaluations' record (before format 6): this evaluation is
             * the run's only one, of the epoch the last step was in. */
            lp.best = lp.er.metric[0];
            lp.best_epoch = lp.step > 0 ? (lp.step - 1) / lp.per_epoch + 1 : 1;
        }
    }
    train_print_summary(t, &lp);
    train_best_print_summary(t, &lp);
    /* For --profile's bottleneck summary: the steps this run timed. */
    t->run_steps = lp.clock.run_steps;
    t->run_step_s = lp.clock.run_s;
    t->run_wait_s = kl_loader_wait_seconds(lp.loader);
    train_ranks_settle(t);
    const char *own_first;
    char first[904];
    /* Each rank skips among its own rows: the count is the ranks' sum,
     * the reason the lowest skipping rank's. */
    int64_t own = kl_loader_skipped(lp.loader, &own_first);
    int64_t skipped = train_ranks_skips(t, own, own_first, first, sizeof first);
    if (skipped)
        kl_fprintf_escaped(stdout,
                           "data: %lld training sample%s skipped while reading (on_error = skip); the first: %s\n",
                           (long long)skipped, skipped == 1 ? "" : "s", first);
    rc = t->opt.save && train_save_checkpoint(t, t->opt.save, lp.step) ? -1 : 0;
    /* Tensor-parallel params and zero3's slices are exported whole
     * (train_tp.c, train_ranks.c). */
    if (!rc && t->opt.export_path) {
        rc = train_ranks_ckpt_begin(t, false) ||
                     kl_session_export(t->s, t->opt.export_path, IR_NONE, t->train->g->name,
                                       kl_precision_name(c->precision), (uint64_t)lp.step)
                 ? -1
                 : 0;
        train_ranks_ckpt_end(t, false);
    }
out:
    t->loop = NULL;
    kl_loader_free(lp.loader);
    return rc;
}

int kl_train_main(int argc, char **argv, const char *model_name, const char *model_src,
                  const kl_builtin_kernel *builtins)
{
    /* First: how OpenMP's threads wait is fixed when libgomp loads. */
    kl_cpu_wait_setup(argv);
    trainer t = {.model = model_name, .tp = 1, .pp = 1};
    int rc = 1;
    kl_source src;
    kl_source_from_string(&src, model_name, model_src);
    ir_graph *g = NULL;
    /* Ranks first: under mpirun or srun every rank parses and checks the
     * same flags, and rank 0 alone prints, writes files and checkpoints. */
    if (!(t.comm = kl_comm_open()))
        return 1;
    t.rank = kl_comm_rank(t.comm);
    t.world = kl_comm_world(t.comm);
    /* --config FILE's flags first, so that the command line's win. */
    if (train_config_expand(&argc, &argv, &t.opt, model_name) || train_parse_flags(argc, argv, &t.opt, model_name) ||
        train_check_ckpt_flags(&t.opt))
        goto done;
    /* Every rank finds the same file (--save's folder is shared, as
     * --resume's is); with --save, preemption signals are caught. */
    if (t.opt.resume_latest && train_find_latest(&t))
        goto done;
    bool preemptible = t.opt.save != NULL;
    if (t.world > 1 && t.opt.eval_only) {
        kl_error("--eval-only runs on one rank (this is rank %d of %d)\n"
                 "---> run it without mpirun or srun",
                 t.rank, t.world);
        goto done;
    }
    if (t.rank > 0) {
        /* --save-every stays: every rank joins the averaging before a save. */
        t.opt.quiet = true;
        t.opt.metrics = t.opt.save = t.opt.save_init = t.opt.trace_path = t.opt.save_best = NULL;
        t.opt.export_path = t.opt.predict = NULL;
        if (!freopen("/dev/null", "w", stdout)) {
            kl_error("rank %d: cannot send standard output to /dev/null", t.rank);
            goto done;
        }
    }
    if (t.opt.device && strcmp(t.opt.device, "cpu") && strcmp(t.opt.device, "auto") && strcmp(t.opt.device, "cuda")) {
        kl_error("--device must be auto, cpu or cuda");
        goto done;
    }
    /* Every file the run will write, checked before any work, so that a
     * typo in a path does not cost an epoch of training. */
    /* Each is then locked until the run exits, so that a second run
     * naming one of them is refused instead of interleaving with this
     * one (--save's lock covers its periodic FILE.step-N too). */
    const char *outs[][2] = {{t.opt.save, "--save"},           {t.opt.export_path, "--export"},
                             {t.opt.predict, "--predict"},     {t.opt.save_init, "--save-init"},
                             {t.opt.metrics, "--metrics"},     {t.opt.trace_path, "--trace"},
                             {t.opt.save_best, "--save-best"}};
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++)
        if (outs[i][0] && kl_outfile_check(outs[i][0], outs[i][1]))
            goto done;
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++)
        if (outs[i][0] && kl_outfile_lock(outs[i][0]))
            goto done;
    g = train_load_with(&src, &t.opt, NULL, NULL);
    if (!g)
        goto done;
    kl_train_read(&g->train, &t.cfg);
    /* The watchdog's timeout, then the ranks' agreement on their
     * settings before any collective that depends on them. */
    kl_comm_set_timeout(t.comm, t.cfg.comm_timeout);
    if (train_agree_settings(&t, t.comm, &g->train, NULL) || train_tp_setup(&t) || train_pipeline_check(&t) || train_check_value_sizes(&t))
        goto done;
    /* --generate reads no data: it needs the checkpoint alone. */
    if (t.opt.generate)
        t.opt.quiet = true;
    else if (train_load_data(&t))
        goto done;
    /* One optimizer step takes batch x accumulate samples: a set smaller
     * than that is refused before anything is compiled or allocated. */
    int64_t step_samples = kl_size_mul(kl_size_mul(t.cfg.batch, t.cfg.accumulate), t.world);
    if (!t.opt.generate && !t.opt.eval_only && (step_samples < 0 || step_samples > t.train_set.count)) {
        char ranks[32] = "";
        if (t.world > 1)
            snprintf(ranks, sizeof ranks, " x ranks %d", t.world);
        kl_error("%s: the training set (%lld samples) is smaller than one step (batch %lld x accumulate %lld%s)\n"
                 "---> try --batch %lld --accumulate 1",
                 model_name, (long long)t.train_set.count, (long long)t.cfg.batch, (long long)t.cfg.accumulate, ranks,
                 (long long)(t.cfg.batch < t.train_set.count ? t.cfg.batch : t.train_set.count));
        goto done;
    }
    if (t.opt.metrics && kl_outfile_open_log(&t.metrics, t.opt.metrics, t.opt.resume != NULL))
        goto done;
    if (t.opt.config) {
        char *js = train_config_json(&t.opt);
        train_json_line(&t, "%s", js);
        free(js);
    }
    /* --eval-only prints the evaluation line alone. */
    if (t.opt.eval_only)
        t.opt.quiet = true;
    char *jit_reason = train_kernel_flags(&t.opt);
    if (t.world > 1) {
        /* The shard pass's buckets (concatenations, slices) are kernels
         * that kiln build, compiling for one rank, did not make. */
        char *r = kl_xasprintf("%s%s%d ranks", jit_reason ? jit_reason : "", jit_reason ? ", " : "", t.world);
        free(jit_reason);
        jit_reason = r;
    }
    kl_cpu_options co = {.threads = t.opt.threads ? t.opt.threads : (int)t.cfg.threads,
                         .threads_from = t.opt.threads ? "--threads" : "the train block's threads",
                         .builtins = builtins,
                         .quiet = t.opt.quiet,
                         .jit_reason = jit_reason,
                         .bf16_gemm = t.opt.bf16_gemm,
                         .fp32_gemm = t.opt.fp32_gemm};
    kl_backend *be = train_open_backend(&t.opt, &co, t.comm);
    be = train_agree_backend(be, t.comm);
    free(jit_reason);
    if (!be)
        goto done;
    t.s = kl_session_new(be, (uint64_t)t.cfg.seed);
    t.s->no_graphs = t.opt.no_cuda_graph;
    t.s->comm = t.comm;
    /* With stages, collectives run in program order: a result that
     * crosses to another stage is complete at its step's place, and the
     * transfers' MPI calls never meet the communication thread's (MPI
     * serialises them: one thread at a time). */
    t.s->overlap = t.cfg.overlap && t.pp <= 1;
    if (t.opt.batch_auto && train_choose_batch(&t, &src, be, &g))
        goto done;
    t.scaled_lr = kl_train_scaled_lr(&t.cfg, t.world);
    t.loss_scale = t.cfg.precision == KL_PREC_FP16 ? t.cfg.loss_scale.init : 1.0;
    t.finite_value = -1;
    if (t.opt.generate) {
        rc = train_generate(&t, &src) ? 1 : 0;
        goto done;
    }
    if (t.opt.eval_only) {
        rc = train_run_eval_only(&t, &src, g) ? 1 : 0;
        g = NULL;
        goto done;
    }

    /* The training plan, then the evaluation plans (same params). */
    int64_t eb, peak;
    int made = train_make_plans(&t, &src, g, &eb);
    g = NULL;
    if (made || train_check_peak(&t, &peak))
        goto done;
    /* The plans too (the same model and executable on every rank), and
     * what --batch auto chose; the plan's text without its train block,
     * whose keys are agreed one by one (some are a rank's own). */
    ir_graph *pg = t.train->g;
    ir_attrs keys = pg->train;
    pg->train = (ir_attrs){0};
    char *plan = ir_print(pg);
    pg->train = keys;
    int differ = train_agree_settings(&t, kl_comm_whole(t.comm), &t.train->g->train, plan);
    free(plan);
    if (differ || train_ranks_prepare(&t))
        goto done;
    t.peak_bytes = peak;
    /* Host readings, and the GPU's through NVML on a GPU run. */
    if (!(t.monitor = kl_monitor_start(KL_MONITOR_INTERVAL, kl_backend_is_cuda(be) ? 0 : -1, t.opt.quiet)))
        goto done;
    if (t.rank == 0 && t.cfg.tensorboard && !(t.tboard = kl_tboard_open(t.cfg.tensorboard)))
        goto done;
    if (!t.opt.quiet)
        train_print_start(&t, be, eb, peak);
    train_pipeline_print_start(&t);
    if (t.opt.init && train_ranks_init(&t))
        goto done;
    if (t.opt.save_init && train_save_checkpoint(&t, t.opt.save_init, 0))
        goto done;
    if (t.opt.profile)
        kl_exec_profile(t.train);
    if (t.opt.trace_path) {
        if (!(t.trace = kl_trace_open(t.opt.trace_path)))
            goto done;
        kl_exec_trace(t.train, t.trace);
    }
    train_pipeline_observe(&t);
    if (preemptible)
        train_preempt_arm();
    rc = run_training(&t);
    train_preempt_disarm();
    rc = rc == TRAIN_EXIT_PREEMPTED ? rc : rc ? 1 : 0;
    if (rc == 0 || rc == TRAIN_EXIT_PREEMPTED)
        train_pipeline_finish(&t);
    if (t.opt.profile)
        train_print_profile(&t);
done:
    ir_graph_free(g);
    kl_monitor_stop(t.monitor);
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
    if (kl_tboard_close(t.tboard))
        rc = 1;
    kl_dataset_free(&t.train_set);
    kl_dataset_free(&t.test_set);
    kl_train_config_free(&t.cfg);
    if (t.metrics.f && kl_outfile_close_log(&t.metrics))
        rc = 1;
    for (int i = 0; i < t.opt.nowned; i++)
        free(t.opt.owned[i]);
    for (int i = 0; i < t.opt.config_owned.n; i++)
        free(t.opt.config_owned.v[i]);
    free(t.opt.config_owned.v);
    kl_source_free(&src);
    free(t.averaged.v);
    free(t.latest_path);
    free(t.latest_model);
    free(t.latest_precision);
    train_ranks_free(&t);
    train_pipeline_free(&t);
    /* A rank that stops with an error while the others wait in a
     * collective would hang them: the job ends here instead. */
    if (rc && rc != TRAIN_EXIT_PREEMPTED && t.world * t.tp * t.pp > 1)
        kl_comm_abort(t.comm, rc);
    kl_comm_close(t.comm);
    return rc;
}
