/* What the training loop carries from step to step, shared by the loop
 * (train.c) and its observers (train_observe.c). Private to driver/. */
#ifndef KILN_TRAIN_LOOP_H
#define KILN_TRAIN_LOOP_H

#include "trainer.h"
#include "train_progress.h"
#include "runtime/observe/hostmetrics.h"
#include "runtime/observe/monitor.h"
#include "runtime/cpu/cpu_wait.h"

/* The metric that early stopping and --save-best watch (train_best.c):
 * early_stop's, else the metric shown (the first report), else the
 * evaluation loss. */
typedef struct train_watch {
    int index;         /* into eval_result.metric, or -1: the loss */
    const char *name;
    bool lower;        /* better = lower */
    double best;
    int64_t best_epoch, best_step; /* 0: no evaluation yet */
    int64_t evals, bad; /* epoch-end evaluations, and those in a row without improvement */
    bool stopped;      /* early stopping ended the run */
} train_watch;

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
    bool metric_lower; /* the shown metric's better = lower */
    train_watch watch;
    /* The evaluations' record as of the last epoch's end, which
     * checkpoints keep (train_ckpt.c): an evaluation at a run's end
     * mid-epoch (--steps) is left out, since the longer run it may be
     * resumed into does not make it. */
    kl_run_state record;
    int preempted;     /* the signal that stops the run at this step's boundary (0: none) */
    bool evaluated_at_end;
    /* At the last progress line: the loader's total wait and the process's
     * CPU time, for the window's data wait and CPU utilisation. */
    double win_wait;
    kl_host_sample win_host;
    /* The monitor's readings: since the last progress line, and the run's
     * (from its start: CPU time and wall time for the run's CPU mean). */
    kl_monitor_stats win_samples, run_samples;
    kl_host_sample run_host;
    /* After warm-up: whether the CPU threads wait for cores (cpu_wait.h). */
    kl_cpu_wait_sample wait_from;
    train_bar bar; /* --progress bar: the epoch's live line */
} train_loop;

/* train_pipeline.c: one optimizer step of the stages' schedule: this
 * stage's forward and backward of every micro-batch, its update, the
 * transfers; sums (loss, metric, preemption flag) summed over the
 * stages. -1 when the data ends inside the step. */
int train_pipeline_step(trainer *t, train_loop *lp, double *sums);

/* train_observe.c: what a run shows and records besides its steps.
 * log_progress: the progress line, its metrics record, its TensorBoard
 * scalars and the monitor's readings over the steps since the last.
 * tboard_eval: an evaluation's scalars. print_summary: the run's last
 * lines and summary record. print_profile: --profile's table of the
 * step's kernels and where its time went. */
void train_log_progress(trainer *t, train_loop *lp, int64_t epoch, double loss_now, double lr);
void train_tboard_eval(trainer *t, const train_loop *lp);
void train_print_summary(trainer *t, train_loop *lp);
void train_print_profile(const trainer *t);

/* train_best.c: setup resolves the watched metric and checks early_stop
 * and --save-best against the model and the run (-1 after an error,
 * reported); after_eval takes an epoch-end evaluation (lp->er): the
 * shown metric's best, the watched one's, --save-best's checkpoint,
 * early stopping (lp->watch.stopped); print_summary: the best line. */
int train_best_setup(trainer *t, train_loop *lp);
/* (setup also carries over the evaluations' record of the checkpoint a
 * --resume read, train_ckpt.c's: the watched metric's only when it is
 * the same.) */
int train_best_after_eval(trainer *t, train_loop *lp, int64_t epoch);
void train_best_print_summary(trainer *t, const train_loop *lp);

#endif
