/* Saving and restoring a session's persistent values (checkpoint.c). */
#ifndef KILN_CHECKPOINT_H
#define KILN_CHECKPOINT_H

#include "session.h"

/* Where a run stands besides its persistent values: what a resumed run
 * needs to continue exactly. */
typedef struct kl_run_state {
    uint64_t step;                   /* optimizer steps done */
    int64_t clean_steps;             /* fp16: steps since the loss scale last changed */
    int64_t skipped, skipped_in_row; /* fp16: steps skipped in all, and in a row at the end */
    double loss_scale;               /* fp16: the scale of the next step; 1 otherwise */
} kl_run_state;

/* Writes the checkpoint through outfile.h (whole or not at all). Refuses,
 * with an error, a session whose values are not all finite. */
int kl_checkpoint_save(kl_session *s, const char *path, const kl_run_state *rs);
/* Restores every persistent value; the file must hold each of the
 * session's values exactly once with the same types and byte counts, a
 * run state that fits a run of max_step steps, and a matching checksum.
 * Nothing changes unless all of it checks. Returns 0 or -1. */
int kl_checkpoint_load(kl_session *s, const char *path, uint64_t max_step, kl_run_state *rs);

#endif
