/* The live progress bar of a training run on a terminal
 * (train_progress.c): one line per epoch, redrawn in place with \r, in
 * place of the periodic progress lines. Private to driver/. */
#ifndef KILN_TRAIN_PROGRESS_H
#define KILN_TRAIN_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

/* --progress: auto (a bar on a terminal, else lines), bar, lines, none. */
typedef enum train_progress_mode {
    TRAIN_PROGRESS_AUTO,
    TRAIN_PROGRESS_BAR,
    TRAIN_PROGRESS_LINES,
    TRAIN_PROGRESS_NONE
} train_progress_mode;

/* The mode named s; -1 (reported, naming --progress) for another word. */
int train_progress_parse(const char *s);
/* What auto means here: the bar when standard output is a terminal and
 * the run is not --quiet (nor CI set in the environment), else lines;
 * --quiet shows neither. */
train_progress_mode train_progress_resolve(train_progress_mode m, bool quiet);

/* The bar of one epoch. drawn: a partial line is on the screen (what
 * else prints first ends it with train_bar_break). */
typedef struct train_bar {
    bool on, drawn;
    int64_t epoch, epochs;         /* epoch is 0-based */
    int64_t first, per_epoch;      /* the epoch's first step (global), its steps */
    int64_t run_first, run_total;  /* the run's first step in this process, its last */
    double t0, last_draw;          /* the epoch's start, the last redraw (kl_now) */
    double step_s, first_s;        /* seconds inside this process's steps so far, in its first */
    int64_t steps_timed;
} train_bar;

/* The epoch's start: epoch (0-based) of epochs, its first step and
 * steps, the run's first step in this process and its last step. */
void train_bar_epoch(train_bar *b, int64_t epoch, int64_t epochs, int64_t first, int64_t per_epoch, int64_t run_first,
                     int64_t run_total);
/* After step (global, 1-based) that took step_s seconds: redrawn when
 * force (a log_every step, the epoch's last) or 0.2 s after the last
 * redraw. gpu_bytes: the plan's peak on a GPU (0 on the CPU: the bar
 * shows the resident set). */
void train_bar_step(train_bar *b, int64_t step, double step_s, int64_t samples_per_step, double loss,
                    const char *metric_name, double metric, int64_t gpu_bytes, bool force);
/* Ends the partial line (a newline) before other output; the next
 * redraw starts a new one. */
void train_bar_break(train_bar *b);
/* One bar line as text (for the tests and the redraws): width columns at
 * most; mem_what names the memory shown ("mem": the host's resident set,
 * "gpu": the memory plan's peak on the device). */
void train_bar_format(char *out, size_t n, int width, int64_t epoch, int64_t epochs, int64_t done, int64_t per_epoch,
                      double sps, double loss, const char *metric_name, double metric, double eta_epoch,
                      double eta_run, const char *mem_what, int64_t mem_bytes);

#endif
