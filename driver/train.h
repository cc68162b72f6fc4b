/* The training executable's entry point (driver/train.c). */
#ifndef KILN_TRAIN_H
#define KILN_TRAIN_H

#include "runtime/exec/backend.h"
#include "ir/train_config.h"

/* Parses flags, lowers the model with them, loads data, builds the plans
 * and trains. Returns the process exit status. */
int kl_train_main(int argc, char **argv, const char *model_name, const char *model_src,
                  const kl_builtin_kernel *builtins);
/* The learning rate at optimizer step t (1-based) of total. */
double kl_schedule_lr(const kl_train_config *c, double base, int64_t t, int64_t total);
/* The batch used for evaluation of count samples. */
int64_t kl_eval_batch(int64_t count, int64_t batch);
/* A data path of the train block, relative to the model file's folder
 * (as the model was named to kiln build); one given with --set data=...
 * (in kv, nkv strings: key, value, ...) stays relative to the working
 * folder, where the shell typed it. Caller frees (data_paths.c). */
char *kl_train_data_path(const char *model, const char *path, const char *const *kv, int nkv);
/* The samples of the test split (idx, shards, synthetic), or -1 where
 * they cannot be counted before the run (tokens, no test split, data
 * not readable yet). */
int64_t kl_train_test_count(const char *model, const kl_train_config *c, const char *const *kv, int nkv);

/* Time inside optimizer steps (train_clock.c): a window (the steps since
 * the last progress line) and the whole run (this process's steps; a
 * resumed run counts none from before). Evaluation and whatever else
 * happens between steps is never in it. */
enum { KL_WARM_STEPS = 10 }; /* the first steps, left out of the timed rate */
typedef struct kl_step_clock {
    int64_t window_steps, run_steps, warm_steps;
    double window_s, run_s, warm_s;
} kl_step_clock;
/* One step that ran from t0 to t1 (seconds). */
void kl_step_clock_add(kl_step_clock *c, double t0, double t1);
/* ms per step and samples/s over the window's steps (0 without any), then
 * a new window. */
void kl_step_clock_window(kl_step_clock *c, int64_t samples_per_step, double *ms, double *sps);
/* The same over all the run's steps, and over those after the warm-up. */
void kl_step_clock_run(const kl_step_clock *c, int64_t samples_per_step, double *ms, double *sps);
void kl_step_clock_timed(const kl_step_clock *c, int64_t samples_per_step, double *ms, double *sps);

#endif
