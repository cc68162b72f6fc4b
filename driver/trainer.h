/* The state of a training run, shared by the executable's files:
 * train.c (main, the inputs, the training loop), train_flags.c (the
 * flags), train_eval.c (evaluation). Private to driver/. */
#ifndef KILN_TRAINER_H
#define KILN_TRAINER_H

#include "train.h"
#include "runtime/data.h"
#include "runtime/outfile.h"
#include "runtime/session.h"
#include "runtime/trace.h"

/* The flags: train keys they set (kv, NULL-terminated pairs) and the
 * run's own settings. */
typedef struct train_options {
    const char *kv[128];
    int nkv;
    char *owned[64];
    int nowned;
    int threads;
    const char *device, *metrics, *save, *save_init, *resume;
    int64_t force_overflow; /* a test hook: poison this step's loss scale */
    bool quiet, profile, no_cuda_graph, tf32;
    const char *trace_path;
    const char *bf16_gemm; /* --bf16-gemm: auto (NULL), onednn, openblas */
    bool batch_auto;       /* --batch auto (driver/budget.c: kl_auto_batch) */
} train_options;

/* Parses argv into o; -1 after an error (reported). --help prints the
 * usage and exits. */
int train_parse_flags(int argc, char **argv, train_options *o, const char *model);
/* Adds a train setting (a copy of value) as a flag would; -1 when full. */
int train_add_setting(train_options *o, const char *key, const char *value);
/* The flags given that may change the kernels from those built into the
 * executable, as typed ("--batch 64, --set optimizer=sgd(lr = 0.1)");
 * NULL when none. Caller frees. */
char *train_kernel_flags(const train_options *o);

typedef struct bindings {
    int features, labels; /* input values, or -1 */
    int loss;
    int ce_classes;       /* classes of the first cross_entropy, or 0 */
} bindings;

/* Copies a batch into the exec's inputs, converting features to the
 * input's dtype and padding a short batch by repeating its samples. */
void train_feed(kl_exec *e, const bindings *b, const kl_batch *batch, int64_t sample_bytes);

typedef struct trainer {
    kl_train_config cfg;
    kl_trace *trace;
    /* fp16 loss scaling: the scale, clean steps since the last change,
     * skipped steps (in all and in a row), and the check's value in the
     * training graph. */
    double loss_scale;
    int64_t clean_steps, skipped, skipped_in_row;
    int finite_value;
    train_options opt;
    const char *model;
    kl_session *s;
    kl_exec *train, *eval, *eval_tail;
    bindings tb, eb, etb;
    kl_dataset train_set, test_set;
    kl_outfile metrics; /* metrics.f is NULL without --metrics */
    double scaled_lr;
} trainer;

typedef struct eval_result {
    double loss, metric[8];
    int64_t samples;
} eval_result;

/* The loss and metrics over the test set (train_eval.c); returns the
 * seconds it took. */
double train_evaluate(trainer *t, eval_result *r);

#endif
