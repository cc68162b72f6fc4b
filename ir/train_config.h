/* The train block: what each key means, its checks and defaults.
 *
 * A model file's train block (and the `train { }` section of an IR dump) is
 * a list of key = value; this module checks it against the table in
 * train_config.c, rewrites it into one canonical form (positional call
 * arguments named, defaults left out), and reads it into a typed struct
 * that the passes and the runtime use. Command-line flags of the training
 * executable override single keys through kl_train_set(). */
#ifndef KILN_TRAIN_CONFIG_H
#define KILN_TRAIN_CONFIG_H

#include "ir.h"

typedef enum { KL_OPT_SGD, KL_OPT_ADAM, KL_OPT_ADAMW } kl_optimizer_kind;
typedef enum { KL_SCHED_CONSTANT, KL_SCHED_STEP, KL_SCHED_COSINE, KL_SCHED_WARMUP_COSINE, KL_SCHED_LINEAR } kl_schedule_kind;
typedef enum { KL_LRS_NONE, KL_LRS_LINEAR, KL_LRS_SQRT } kl_lr_scaling;
typedef enum { KL_PREC_FP32, KL_PREC_BF16, KL_PREC_FP16 } kl_precision;
typedef enum { KL_PIPE_GPIPE, KL_PIPE_1F1B, KL_PIPE_INTERLEAVED, KL_PIPE_ZERO_BUBBLE } kl_pipe_schedule;
/* The interleaved schedule's virtual stages per rank v
 * (pipeline_virtual_stages: KL_PIPE_VIRTUAL unless set, at most
 * KL_PIPE_VIRTUAL_MAX): the pipeline pass cuts P x v stages, stage k on
 * rank k mod P. */
#define KL_PIPE_VIRTUAL 2
#define KL_PIPE_VIRTUAL_MAX 8
static inline int kl_pipe_stage_count(int P, kl_pipe_schedule s, int v) { return s == KL_PIPE_INTERLEAVED ? P * v : P; }
typedef enum { KL_SHARD_NONE, KL_SHARD_DP, KL_SHARD_ZERO1, KL_SHARD_ZERO2, KL_SHARD_ZERO3 } kl_shard;
/* The dtype tensor parallelism's partial sums are all-reduced in under
 * bf16/fp16 (passes/precision.c): fp32 (default), the run's 16-bit dtype,
 * or exact (f64 GEMMs and sums, a debugging mode: slow). */
typedef enum { KL_TP_REDUCE_FP32, KL_TP_REDUCE_BF16, KL_TP_REDUCE_FP16, KL_TP_REDUCE_EXACT } kl_tp_reduce;

typedef struct kl_train_config {
    char *data_format;     /* "idx", "shards", "tokens" or "synthetic" */
    char *data_path;       /* idx: the folder with the four files; shards: the training shards' pattern */
    char *data_test;       /* shards: the test shards' pattern, or NULL (no evaluation) */
    int data_workers, data_prefetch;
    int64_t data_shuffle_buffer;
    bool data_cache, data_skip; /* cache = memory, on_error = skip */
    bool data_shuffle;     /* idx(shuffle = 0), shards(shuffle_buffer = 0): file order */
    struct {
        int64_t crop_pad;  /* random_crop(pad); 0: none */
        bool hflip;
        int nmean, nstd;   /* normalize(mean, std): 0 when none */
        double mean[8], std[8];
    } augment;             /* shards(augment = [...]) */
    int64_t data_context;  /* tokens(context = T): tokens per sample's input */
    int64_t data_val_windows; /* tokens(val_windows = N): evaluate N evenly spaced windows; 0: all */
    int64_t synthetic_samples;
    int64_t batch;
    int64_t accumulate;
    int64_t epochs;
    int64_t steps;         /* stop after this many optimizer steps; 0: no limit */
    int64_t seed;
    int64_t eval_every;    /* evaluate every N optimizer steps and at each epoch's end; 0: never; -1 (unset): at each epoch's end */
    int64_t log_every;     /* progress line every N optimizer steps */
    int64_t threads;       /* 0: all cores */
    struct {
        kl_optimizer_kind kind;
        double lr, momentum, beta1, beta2, eps, weight_decay;
        bool nesterov;
    } opt;
    struct {
        kl_schedule_kind kind;
        int64_t warmup, every;
        double gamma, min_lr;
        int64_t span; /* schedule_steps: the steps it spans; 0: the run's */
    } sched;
    kl_lr_scaling lr_scaling;
    int64_t base_batch;    /* the effective batch the lr was tuned for; 0: batch x accumulate */
    double clip;           /* global gradient norm; 0: off */
    kl_precision precision;
    struct {
        bool dynamic;
        double init, growth, backoff;
        int64_t interval;
    } loss_scale;
    int64_t max_skipped_steps; /* fp16: a run skipping more steps than this in a row stops; 0: never */
    kl_shard shard;
    char *recompute;       /* "none", "auto" or a comma-separated list of defs */
    int64_t memory_limit;  /* bytes; 0: none */
    char *tensorboard;     /* a folder for event files; NULL: none */
    int64_t bucket;        /* bytes per all-reduce across ranks; 0: one per gradient */
    bool overlap;          /* collectives on a communication thread (runtime/exec/overlap.h) */
    int tensor_parallel;   /* ranks per tensor-parallel group (passes/shard_tp.c); 1: none */
    int pipeline_parallel; /* pipeline stages (passes/pipeline_stages.c); 1: none */
    kl_pipe_schedule pipeline_schedule;
    int pipeline_virtual;  /* interleaved: stages per pipeline rank (pipeline_virtual_stages) */
    bool sync_batchnorm;   /* batch statistics across the data-parallel ranks (passes/sync_batchnorm.c) */
    kl_tp_reduce tp_reduce;
    double comm_timeout;   /* seconds a collective may wait for the other ranks; 0: forever */
    /* early_stop: stop after patience epoch-end evaluations in a row
     * that do not improve metric (a report's name, or loss) by more than
     * min_delta; metric NULL: no early stopping. */
    struct {
        char *metric;
        int64_t patience;
        double min_delta;
    } early_stop;
} kl_train_config;

/* Checks a train block and rewrites it into canonical form in place.
 * Errors name src's file and the value's location; returns 0 or -1. */
int kl_train_check(ir_attrs *train, const kl_source *src);
/* Reads a checked train block (defaults for what is missing). */
void kl_train_read(const ir_attrs *train, kl_train_config *cfg);
void kl_train_config_free(kl_train_config *cfg);
/* Sets one key from text, as a command-line flag would ("batch", "64");
 * checks it like the train block does. Returns 0, or -1 with a message
 * naming the flag. */
int kl_train_set(ir_attrs *train, const char *key, const char *text);
/* --data DIR where DIR holds a kiln pack manifest.json: *call becomes
 * shards(path = its train shards, test = its test (or val) shards).
 * Returns 1 when DIR has no manifest, -1 (with an error naming the
 * folder) when it cannot be read as one. */
int kl_pack_folder_data(const char *dir, const char *flag, ir_attr_val *call);
/* Checks --set KEY=TEXT on its own, when the command line is read, so
 * that its errors name "--set KEY" (kl_train_set's name the key's own
 * flag). lr is left to kl_train_set: it is checked in the optimizer it
 * belongs to. Returns 0, or -1 with the message. */
int kl_train_check_set(const char *key, const char *text);
/* Sets every KEY, VALUE pair of a NULL-terminated list, as the flags of
 * a command line; --lr last, whatever its place. */
int kl_train_set_all(ir_attrs *train, const char *const *kv);
/* lr_scaling's base: base_batch, or batch x accumulate (the train
 * block's own: kl_train_set_all keeps them as base_batch when a flag
 * changes them). The lr after scaling to the effective batch (batch *
 * accumulate * ranks) from that base. */
int64_t kl_train_base_batch(const kl_train_config *cfg);
double kl_train_scaled_lr(const kl_train_config *cfg, int64_t ranks);
const char *kl_precision_name(kl_precision p);
/* The train keys, in the table's order (the same in every build of one
 * version): for the ranks' agreement of settings (driver/train_agree.c). */
int kl_train_key_count(void);
const char *kl_train_key_name(int i);
const char *kl_tp_reduce_name(kl_tp_reduce r);
const char *kl_pipe_schedule_name(kl_pipe_schedule s);

/* A size in bytes: "64MiB", "512MB", "1e9", "4096" (units B, K, KB, KiB,
 * M, MB, MiB, G, GB, GiB, T, TB, TiB); -1 when malformed. */
int64_t kl_parse_bytes(const char *s);

#endif
