/* Saving and restoring a session's persistent values (checkpoint.c). */
#ifndef KILN_CHECKPOINT_H
#define KILN_CHECKPOINT_H

#include "runtime/exec/session.h"

/* Where a run stands besides its persistent values: what a resumed run
 * needs to continue exactly. */
typedef struct kl_run_state {
    uint64_t step;                   /* optimizer steps done */
    int64_t clean_steps;             /* fp16: steps since the loss scale last changed */
    int64_t skipped, skipped_in_row; /* fp16: steps skipped in all, and in a row at the end */
    double loss_scale;               /* fp16: the scale of the next step; 1 otherwise */
    uint64_t schedule_steps;         /* the lr schedule's span, its last step (0: not recorded, before version 4) */
    /* The evaluations' record (version 6; 0 before): the shown metric's
     * best and its epoch; the watched metric's (early stopping and
     * --save-best: driver/train_best.c) best, epoch and step, the
     * evaluations since its last improvement, the epoch-end evaluations
     * in all, and a hash of its name (another metric's record is not
     * carried over). */
    double best, watch_best;
    int64_t best_epoch, watch_epoch, watch_step, watch_bad, evals;
    uint64_t watch_name;
    /* Saving: what the header records (NULL: ""); config: the run's
     * --config settings (version 5). */
    const char *model, *precision, *config;
    /* Loading: the scaler state above is an fp16 run's (version 3 says
     * so; versions 1 and 2 do not record the precision: true); the
     * file's checksum (what ranks on several hosts compare: each reads
     * its own copy). */
    bool scaler_from_fp16;
    uint64_t checksum;
} kl_run_state;

/* A checkpoint read into memory and checked: the magic, the checksum,
 * the version, every header field and entry (name, role, dtype, rank,
 * dims, byte count against the type), no duplicate names, no bytes left
 * over, the run state (its loss scale a normal fp32 number). Versions
 * before 3 have "" for the strings. */
typedef struct kl_ckpt_entry {
    char *name, *role; /* role: "param", "optimizer_state", "lowp", ... */
    ir_type type;
    uint64_t bytes;
    const unsigned char *data; /* into the file's bytes */
} kl_ckpt_entry;

typedef struct kl_ckpt {
    char *path;
    kl_source file;
    uint32_t version;
    char *model, *precision, *kiln_version;
    char *config; /* the run's --config settings ("": none, or before version 5) */
    int n;
    kl_ckpt_entry *v;
    const kl_ckpt_entry **by_name; /* v sorted by name: kl_ckpt_find's index */
    uint64_t checksum;             /* the file's last 8 bytes, checked */
    kl_run_state rs;
} kl_ckpt;

/* Reads and checks path; -1 after an error naming it and what is wrong. */
int kl_ckpt_read(kl_ckpt *c, const char *path);
void kl_ckpt_free(kl_ckpt *c);
/* Checks what kl_ckpt_read does not: every value finite (but the dead
 * ones the next step overwrites: the loss_scale and grad_acc roles), no
 * Adam second moment (NAME.adam_v) negative. roles: NULL, or per entry
 * a role that overrides the file's (a version 1 or 2 file records none). kiln ckpt, kiln export and every
 * load call it, so each refuses the same files. -1 after an error naming
 * the file, the value and its first bad element. */
int kl_ckpt_validate(const kl_ckpt *c, const char *const *roles);
/* The entry named name, or NULL: a binary search (O(log n)). */
const kl_ckpt_entry *kl_ckpt_find(const kl_ckpt *c, const char *name);

/* Writes the checkpoint through outfile.h (whole or not at all). Refuses,
 * with an error, a session whose values are not all finite. */
int kl_checkpoint_save(kl_session *s, const char *path, const kl_run_state *rs);
/* Restores every persistent value; the file must hold each of the
 * session's values exactly once with the same types and byte counts, a
 * run state that fits a run of max_step steps, and a matching checksum.
 * Low-precision copies (NAME.lowp) are the exception: one of another
 * dtype is skipped, and the model's are rebuilt from NAME when the file
 * has none of their dtype (a checkpoint resumes in another precision).
 * An error lists what differs (names not in the model, names missing,
 * a type that differs). Nothing changes unless all of it checks. Returns
 * 0 or -1. */
int kl_checkpoint_load(kl_session *s, const char *path, uint64_t max_step, kl_run_state *rs);
/* The same for the values s holds alone (an evaluation plan's params and
 * running statistics): the file's others (optimizer state) are skipped,
 * any step is accepted. */
int kl_checkpoint_load_held(kl_session *s, const char *path, kl_run_state *rs);

/* Fills p, a param's low-precision copy NAME.lowp, from NAME's values
 * rounded to its dtype (after loading NAME from a file). */
void kl_checkpoint_rebuild_copy(kl_session *s, kl_persist *p);

#endif
