/* The memory a training run needs, known before it starts
 * (runtime/budget.c): the persistent values (params, optimizer and other
 * state) and one arena, planned by codegen/memplan.c, that the training and
 * evaluation plans share. A budget (--memory-limit, the train key
 * memory_limit) refuses a run that does not fit, naming what would. */
#ifndef KILN_BUDGET_H
#define KILN_BUDGET_H

#include "plan/plan.h"
#include "ir/train_config.h"
#include "passes/pipeline.h"
#include "compile.h"

/* Bytes of g's persistent values (params and state). */
int64_t kl_persistent_bytes(const ir_graph *g);

/* A memory limit as the errors print it: "2.00 MB", or "1 byte", "512
 * bytes" below 10 kB (which "0.00 MB" would hide). Writes into buf. */
const char *kl_limit_text(char *buf, size_t n, int64_t bytes);

/* The model again, with the run's train overrides, to plan it with other
 * settings (another batch, recomputation). */
typedef struct kl_replan {
    const kl_source *src;
    const char *const *kv; /* NULL-terminated key/value pairs, or NULL */
    int pipeline;          /* pipeline ranks P (0 or 1: none): a training plan's arena is its largest rank's,
                              with what that rank holds between passes */
    int64_t held;          /* kl_check_budget: host memory the checked plan's rank holds beside (pipeline) */
} kl_replan;

/* The model compiled (driver/compile.c) with the overrides and then extra
 * (pairs, NULL-terminated) in mode; NULL after an error (reported). */
kl_compiled *kl_replan_compile(const kl_replan *r, const char *const *extra, kl_mode mode);

/* Compiles the model with the overrides and then extra (pairs, NULL-
 * terminated) in mode (driver/compile.c): the arena bytes,
 * with the persistent bytes when asked; -1 after an error (reported). */
int64_t kl_replan_arena(const kl_replan *r, const char *const *extra, kl_mode mode, int64_t *persistent);

/* With a limit (bytes, > 0): 0 when the training plan p and its graph's
 * persistent values fit; else an error naming the peak and suggesting what
 * would fit (a smaller micro-batch with more accumulation, recomputation),
 * and -1. */
int kl_check_budget(const kl_replan *r, const kl_train_config *cfg, const kl_plan *p, int64_t limit);

/* The evaluation batch: the largest divisor of count from first down to
 * batch / 2 whose plan's arena fits in arena bytes (the training plan's,
 * which evaluation shares); else batch (a remainder plan takes the rest). */
int64_t kl_eval_batch_within(const kl_replan *r, int64_t count, int64_t batch, int64_t first, int64_t arena);

/* --batch auto: the largest micro-batch, a multiple of 8 up to the
 * effective batch, whose training plan (persistent values + arena, as
 * kl_check_budget counts) fits in limit bytes, found from plans alone
 * (nothing runs or allocates); accumulate keeps batch x accumulate at the
 * effective batch (exactly when the batch divides it, else the nearest).
 * -1 after an error (reported: nothing fits, or a plan failed). */
typedef struct kl_auto_batch_result {
    int64_t batch, accumulate;
    int64_t bytes;      /* the chosen plan's */
    int64_t next_batch; /* the next multiple of 8 (0: the chosen one is the largest candidate) */
    int64_t next_bytes; /* its plan's (-1: none) */
    int plans;          /* plans made by the search */
} kl_auto_batch_result;
int kl_auto_batch(const kl_replan *r, int64_t effective, int64_t limit, kl_auto_batch_result *out);

/* Over the P ranks of training plan p (a plan with pipeline stages,
 * stage k on rank k mod P): the largest arena a rank allocates (the
 * memory planner's over its steps and transfers, as the training
 * executable places it, driver/train_pipeline.c) and the largest need,
 * that arena plus the host memory the rank holds between passes (the
 * saved activations of its micro-batches in flight under p's schedule,
 * W copies, inputs). p's offsets are the whole plan's again after. */
void kl_pipeline_rank_needs(kl_plan *p, int P, int64_t *arena, int64_t *need);

#endif
