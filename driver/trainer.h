/* The state of a training run, shared by the executable's files:
 * train.c (main, the training loop), train_flags.c (the flags),
 * train_data.c (the data and the model's inputs), train_setup.c (the
 * start-up), train_observe.c (progress, metrics, the summary; with
 * train_loop.h), train_eval.c (evaluation) and the others named below. Private to driver/. */
#ifndef KILN_TRAINER_H
#define KILN_TRAINER_H

#include "train.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/comm/comm.h"
#include "runtime/data/data.h"
#include "runtime/files/outfile.h"
#include "runtime/exec/session.h"
#include "runtime/observe/trace.h"

/* The flags: train keys they set (kv, NULL-terminated pairs) and the
 * run's own settings. */
/* The most bytes one --generate draws (--tokens): each is a forward pass
 * of the model, so a mistyped count would otherwise run for days. */
#define TRAIN_GEN_MAX_TOKENS 65536
#define TRAIN_GEN_MAX_TOKENS_STR "65536"

typedef struct train_options {
    const char *kv[128];
    int nkv;
    char *owned[64];
    int nowned;
    int threads;
    const char *device, *metrics, *save, *save_init, *resume;
    int64_t force_overflow; /* a test hook: poison this step's loss scale */
    int force_overflow_stage; /* or (pipelines, >= 0) this stage's gradients */
    /* Checkpoints (train_ckpt.c): every save_every steps to SAVE.step-N,
     * the newest keep of them kept (0: all). */
    int64_t save_every, keep;
    /* --save-best FILE: the checkpoint of the best epoch-end evaluation
     * (train_best.c); --resume latest: the newest checkpoint of --save's
     * series, or none (train_latest.c). */
    const char *save_best;
    bool resume_latest;
    /* safetensors out at the end (--export) and in at the start (--init,
     * --init-partial); evaluation alone (--eval-only) and per-sample
     * outputs (--predict, train_ckpt.c). */
    const char *export_path, *init, *predict;
    bool init_partial, eval_only;
    bool quiet, profile, no_cuda_graph, tf32;
    const char *trace_path;
    double plan_predict_ms; /* --plan-predict: kiln plan's step for this layout (0: none) */
    const char *bf16_gemm; /* --bf16-gemm: auto (NULL), onednn, kiln, openblas */
    const char *fp32_gemm; /* --fp32-gemm: auto (NULL), onednn, openblas */
    bool batch_auto;       /* --batch auto (driver/budget.c: kl_auto_batch) */
    bool batch_probe;      /* --probe (driver/batch_probe.c: kl_probe_batch) */
    /* --generate PROMPT --tokens N --temperature X --top-k K
     * (train_generate.c); generate is NULL without it. */
    const char *generate;
    int64_t gen_tokens, top_k; /* gen_tokens: 1 to TRAIN_GEN_MAX_TOKENS */
    double temperature;
    bool gen_settings;     /* one of --tokens, --temperature, --top-k was given */
    /* --progress (train_progress.h), resolved at start: a bar on a
     * terminal, the periodic lines elsewhere, or nothing. */
    int progress;
    /* --config FILE (train_config_file.c): its path, its settings as read
     * ("key = value" lines, for checkpoints and metrics), the strings it
     * made; partial: one line's flags parsed alone (no checks across flags). */
    const char *config, *config_text;
    KL_VEC(char *) config_owned;
    bool partial;
} train_options;

/* Parses argv into o; -1 after an error (reported). --help prints the
 * usage and exits. */
int train_parse_flags(int argc, char **argv, train_options *o, const char *model);
/* --config FILE in argv: argv becomes the program, the file's flags and
 * the other flags (so that those win); -1 after an error in the file
 * (reported with its file and line). Nothing without --config. */
int train_config_expand(int *argc, char ***argv, train_options *o, const char *model);
/* The metrics record of --config's settings: {"type": "config", "file":
 * FILE, "text": the settings as a config file, "settings": {KEY: VALUE,
 * ...} (the values in effect)}. Caller frees. */
char *train_config_json(const train_options *o);
/* Adds a train setting (a copy of value) as a flag would; -1 when full. */
int train_add_setting(train_options *o, const char *key, const char *value);
/* The flags given that may change the kernels from those built into the
 * executable, as typed ("--batch 64, --set optimizer=sgd(lr = 0.1)");
 * NULL when none. Caller frees. */
char *train_kernel_flags(const train_options *o);

typedef struct bindings {
    int features, labels; /* idx and synthetic: input values, or -1 */
    int loss;
    int ce_classes;       /* classes of the first cross_entropy, or 0 */
    /* Every input, the data set's field it reads, and the input's
     * samples and bytes. */
    int n;
    int value[KL_MAX_FIELDS], field[KL_MAX_FIELDS];
    int64_t rows[KL_MAX_FIELDS];
    size_t bytes[KL_MAX_FIELDS];
} bindings;

/* Copies a batch (of the data set the bindings were made for) into the
 * exec's inputs: one copy per input into the backend, nothing converted
 * or allocated (the loader wrote each field in its input's dtype, a short
 * batch padded by repeating samples). */
void train_feed(kl_exec *e, const bindings *b, const kl_batch *batch);

typedef struct trainer trainer;

/* train_data.c: the training and test splits loaded per the train
 * block's data (--eval-only: the test split alone); the inputs of g bound
 * to d's fields (checked against them); after binding, shards checked and
 * cached and the data's start-up lines printed. -1 after an error
 * (reported). */
int train_load_data(trainer *t);
int train_bind_inputs(const ir_graph *g, kl_dataset *d, bindings *b, const char *model);
int train_prepare_data(trainer *t);

struct trainer {
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
    int64_t schedule_span; /* the steps the lr schedule spans (checkpoints record it) */
    /* The training loop while it runs (NULL otherwise): a checkpoint
     * records its evaluations' best (train_best.c); the record a --resume
     * read, which train_best_setup carries over. */
    const struct train_loop *loop;
    kl_run_state resumed;
    /* --predict: called after each evaluation batch runs (train_eval.c),
     * with the exec that ran it. */
    void (*on_eval_batch)(trainer *t, kl_exec *e, const kl_batch *b);
    void *predict; /* the --predict state (train_ckpt.c) */
    struct kl_tboard *tboard; /* NULL without --tensorboard */
    struct kl_monitor *monitor; /* host and GPU readings (runtime/observe/monitor.h) */
    int64_t peak_bytes;       /* the memory plan's peak with params and state */
    /* The run's own steps, their time and data wait (--profile's summary). */
    int64_t run_steps;
    double run_step_s, run_wait_s;
    /* Ranks (train_ranks.c): this process's rank of world; the state
     * averaged across ranks before evaluation and checkpoints. */
    kl_comm *comm;
    int rank, world;
    double comm_logged, waited_logged; /* train_overlap.c: the collectives' seconds at the last progress record */
    KL_VEC(int) averaged;
    /* shard = zero1: the full optimizer state gathered from the ranks'
     * slices at the last train_ranks_settle (host memory in ptr), which
     * rank 0's checkpoints hold in place of the slices. */
    KL_VEC(kl_persist) zero_full;
    KL_VEC(kl_persist) zero_held; /* the session's own list while swapped */
    /* Tensor parallelism (train_tp.c): the group size (1: none) and this
     * rank's index in its group; comm, rank and world above are then the
     * data-parallel group's. The full split values gathered at the last
     * settle (host memory), and the session's list while swapped. */
    int tp, tp_rank;
    /* Pipeline parallelism (train_pipeline.c): the stages (1: none), this
     * rank's stage, and the schedule's state (NULL: none); comm, rank and
     * world above are then the stage's data-parallel group's. */
    int pp, stage;
    struct train_pipe *pipe;
    KL_VEC(kl_persist) tp_full;
    KL_VEC(kl_persist) tp_held;
    /* --resume latest: the checkpoint found (owned; NULL: none) and what
     * its header records (train_latest.c). */
    char *latest_path, *latest_model, *latest_precision;
    uint64_t latest_span;
};

typedef struct eval_result {
    double loss, metric[IR_MAX_REPORTS];
    int64_t samples;
    char *error;          /* bad test data (on_error = fail): the run stops */
    int64_t skipped;      /* test samples skipped (on_error = skip) */
    char first_skip[900];
} eval_result;

/* The start-up (train_setup.c). load_with: the model lowered again with
 * the flags' settings and one more (key NULL: none). open_backend: the GPU
 * when one is usable (or asked for), else the CPU with a notice; NULL when
 * --device cuda finds no GPU. choose_batch: --batch auto (g loaded again
 * with the batch and accumulation chosen). make_plans: the training plan
 * (taking g) and the evaluation plans, the inputs bound, eb_out their
 * batch (0: no test split). check_peak: the planned memory against
 * --memory-limit. print_start: the start-up lines. -1 (NULL) after an
 * error (reported). */
ir_graph *train_load_with(const kl_source *src, const train_options *o, const char *key, const char *val);
kl_backend *train_open_backend(const train_options *o, const kl_cpu_options *co, const kl_comm *comm);
/* Every rank on the same kind of device (NCCL and MPI do not meet): be,
 * or NULL (be destroyed, reported) when some ranks found a GPU and others
 * did not. A rank whose be is NULL takes no part: its error ends the job
 * (kl_train_main aborts every rank). */
kl_backend *train_agree_backend(kl_backend *be, kl_comm *comm);
int train_choose_batch(trainer *t, const kl_source *src, const kl_backend *be, ir_graph **g);
int train_make_plans(trainer *t, const kl_source *src, ir_graph *g, int64_t *eb_out);
int train_check_peak(trainer *t, int64_t *peak_out);
void train_print_start(const trainer *t, const kl_backend *be, int64_t eb, int64_t peak);

/* One metrics record, a line of JSON (train_observe.c; nothing without
 * --metrics). */
void train_json_line(trainer *t, const char *fmt, ...) KL_PRINTF(2, 3);
/* --eval-only (train_eval_only.c): evaluates the model (g, which it
 * takes) with the values of --resume or --init; -1 after an error
 * (reported). */
int train_run_eval_only(trainer *t, const kl_source *src, ir_graph *g);

/* Periodic checkpoints (train_ckpt.c): the checks of --save-every and
 * --keep, the path of step's checkpoint (caller frees), and the removal
 * of all but the newest --keep of this run's series once the newest (of
 * step now) is in place. The series: the SAVE.step-N with N <= now on
 * the --save-every grid, N > first (the step the run began at) unless it
 * resumed (then the ones before it are the series it continues). A
 * higher-numbered file, or one off the grid, is another run's: never
 * counted nor removed. */
int train_check_ckpt_flags(const train_options *o);
/* --init and --resume files larger than --memory-limit (they are read
 * whole): refused before anything is loaded, naming the file and the
 * limit. */
int train_check_value_sizes(const trainer *t);
char *train_periodic_path(const char *save, int64_t step);
/* The step N of a name BASE.step-N (digits only), or -1. */
int64_t train_periodic_step(const char *name, const char *base);
void train_prune_checkpoints(const train_options *o, int64_t first, int64_t now);

/* One checkpoint of the session's values at step (train_ckpt.c): the state
 * averaged or gathered from the ranks first where it is split. */
int train_save_checkpoint(trainer *t, const char *path, int64_t step);

/* --resume latest (train_latest.c): o->resume set to the newest complete
 * checkpoint of --save's series (SAVE and SAVE.step-N, by the step they
 * hold), or left NULL when there is none (the run starts from scratch);
 * said in one line. Damaged files are passed over with a note. -1 after
 * an error (reported). check_latest: after the run's length is known,
 * the checkpoint found against this run: its model, precision and lr
 * schedule's span must be this run's (the same command resubmitted),
 * else -1 with the reason. */
int train_find_latest(trainer *t);
int train_check_latest(const trainer *t, int64_t schedule_span);

/* Preemption (train_preempt.c): with --save, SIGTERM and SIGUSR1 are
 * caught from the start of training to its end; the loop asks at each
 * step's boundary, saves --save and exits with TRAIN_EXIT_PREEMPTED.
 * pending: the signal caught (0: none). */
#define TRAIN_EXIT_PREEMPTED 75 /* EX_TEMPFAIL: try again (--resume latest continues) */
void train_preempt_arm(void);
void train_preempt_disarm(void);
int train_preempt_pending(void);
void train_preempt_test_hook(int64_t step); /* KILN_TEST_SIGNAL_AT (train_preempt.c) */

/* --predict: the value an exec's logits are in (the input of its
 * cross-entropy), or -1; the output's start (count samples of classes
 * logits), each evaluation batch's rows, and the file written whole.
 * train_predict_begin sets t->on_eval_batch. */
int train_logits_value(const ir_graph *g);
/* --generate: prints the prompt and the tokens drawn after it (bytes)
 * from the checkpoint of --resume (or --init); -1 after an error. */
int train_generate(trainer *t, const kl_source *src);
int train_labels_value(const ir_graph *g); /* the cross-entropy's labels, or -1 */
/* Without a cross-entropy: the value the loss compares with a target
 * (predict_output.c), or -1. */
int train_output_value(const ir_graph *g);
/* count samples of the eval plan g's logits (or output, or declared
 * outputs: -1 after an error, reported). */
int train_predict_begin(trainer *t, int64_t count, const ir_graph *g);
/* The declared outputs (output NAME = ...) of a model without a
 * classifier, as one .npy of records (predict_fields.c): begin (NULL
 * after an error, reported), each evaluation batch, the file written
 * whole (the state freed either way). */
typedef struct predict_fields predict_fields;
predict_fields *train_fields_begin(const ir_graph *g, int64_t count, int64_t batch);
void train_fields_batch(predict_fields *p, kl_exec *e, const kl_batch *b);
int train_fields_finish(predict_fields *p, const char *path);
/* Starts path as a .npy (format 1.0): the magic and the header dict
 * (consumed), padded with spaces to a multiple of 64 bytes and ended in a
 * newline; the caller writes the data and commits. -1 after an error
 * (reported: a header past 65535 bytes, or the file). */
int train_npy_begin(kl_outfile *o, const char *path, kl_buf *dict);
int train_predict_finish(trainer *t);

/* The loss and metrics over the test set (train_eval.c); returns the
 * seconds it took. */
double train_evaluate(trainer *t, eval_result *r);
/* The evaluation's metrics: "  NAME 0.1234" for its line and
 * ", \"NAME\": 0.123456" for its metrics record, for every report of
 * the evaluation plan but hidden ones (named _...); the record of a model
 * that reports none has "metric" (0). Appends to both. */
void train_eval_metrics(const trainer *t, const eval_result *r, kl_buf *line, kl_buf *json);

/* Ranks (train_ranks.c). prepare: the state averaged across ranks (-1
 * after an error, reported). sums: sums[0..n) summed over the ranks in
 * place (this rank's loss and metric sums of a step). settle: averages
 * the state each rank updates on its own (batch norm's running
 * statistics) before evaluation and checkpoints. Both are collectives:
 * every rank calls them at the same point. */
int train_ranks_prepare(trainer *t);
void train_ranks_sums(trainer *t, double *sums, int n);
/* on_error = skip while training: the samples the ranks skipped (own on
 * this rank) summed, and into first (n bytes) the first reason of the
 * lowest rank that skipped any (own_first on this rank); "" when none
 * did. A collective on many ranks. */
int64_t train_ranks_skips(trainer *t, int64_t own, const char *own_first, char *first, size_t n);
void train_ranks_settle(trainer *t);
void train_ranks_print_start(const trainer *t);
/* shard = zero1: a checkpoint holds the usual full optimizer state, not
 * the ranks' slices. begin swaps the session's persistent values for
 * that list (saving: the state gathered at the last settle; loading:
 * zeros to load into), end swaps them back (after a load, each rank
 * takes its slice of what was loaded). Without zero1 state both do
 * nothing. -1 after an error (reported). free: the gathered state. */
int train_ranks_ckpt_begin(trainer *t, bool loading);
/* --init FILE.safetensors into the session, zero3's slices included (-1
 * after an error, reported). */
int train_ranks_init(trainer *t);
/* Tensor parallelism (train_tp.c): setup splits t->comm into groups
 * (-1 after an error, reported); settle gathers the split values (every
 * rank); ckpt_begin/end swap the full values in for a checkpoint and back
 * (after a load, each rank keeps its slice). */
int train_tp_setup(trainer *t);
/* pipeline_parallel > 1 (train_pipeline.c). check: what is not built
 * refused with the reason (-1), else the world split into the stages
 * (t->comm becomes the stage's data-parallel group). prepare: after the
 * training plan, before the evaluation plans (which share its arena, now
 * this rank's own), each step's stage, the transfers and the saved
 * activations (-1 after an error, reported). print_start: the stages' lines (every rank
 * calls it; rank 0 prints). settle: every param and state from the stage
 * that updates it, on every rank (a collective, in train_ranks_settle).
 * Nothing at P = 1. */
typedef struct train_pipe train_pipe;
int train_pipeline_check(trainer *t);
int train_pipeline_prepare(trainer *t);
/* The host memory this rank's stages hold between passes (the saved
 * activations of the micro-batches in flight, zero_bubble's W copies,
 * interleaved's inputs); 0 without stages. */
int64_t train_pipeline_held_bytes(const trainer *t);
void train_pipeline_print_start(const trainer *t);
/* observe: after the trace opens (every stage: whether to keep spans);
 * finish: after the run (every stage: the measured pass times to rank 0,
 * the spans into its trace); print_profile: --profile's bubble lines. */
void train_pipeline_observe(trainer *t);
void train_pipeline_finish(trainer *t);
void train_pipeline_print_profile(const trainer *t);
void train_pipeline_settle(trainer *t);
void train_pipeline_free(trainer *t);
/* The ranks' agreement on the settings that must match (train_agree.c),
 * over comm: train's keys and the run's flags, and with plan (the
 * training plan's text; NULL before it is made) its hash and the training
 * set's size. -1 when they differ (reported by rank 0 with the setting,
 * the ranks and the values; every rank returns -1). */
int train_agree_settings(trainer *t, kl_comm *comm, const ir_attrs *train, const char *plan);
/* After --resume (train_agree.c): each rank read the checkpoint at the
 * path on its own host; loaded is its load's result (0 or -1, reported),
 * step and checksum what it read. -1 on every rank when a rank could not
 * read it or read another file (another step or checksum): rank 0 names
 * the ranks and their hosts. */
int train_agree_resume(trainer *t, int loaded, uint64_t step, uint64_t checksum);
void train_tp_settle(trainer *t);
int train_tp_ckpt_begin(trainer *t, bool loading);
void train_tp_ckpt_end(trainer *t, bool loading);
/* With ZeRO (t->zero_full, train_ranks.c): split params' state gathered
 * whole over the group after ZeRO's gather; widened to the whole shape
 * before a load; cut to this rank's slice after it. */
void train_tp_zero_gather(trainer *t);
void train_tp_zero_widen(trainer *t);
void train_tp_zero_cut(trainer *t);
void train_tp_free(trainer *t);
void train_tp_print_start(const trainer *t);
void train_ranks_ckpt_end(trainer *t, bool loading);
void train_ranks_free(trainer *t);

/* train_overlap.c: the start-up line on the collectives' overlap (more
 * than one rank), and at the end their time per step and the part of it
 * hidden behind compute, as a line and as summary record fields. */
void train_overlap_print_start(const trainer *t);
void train_overlap_print_summary(const trainer *t, int64_t steps);
void train_overlap_json(const trainer *t, int64_t steps, kl_buf *j);
/* The progress record's fields for the steps since the last: the
 * collectives' ms per step and the ms waited for them ("" with one rank). */
void train_overlap_window(trainer *t, int64_t steps, char *out, size_t n);

#endif
