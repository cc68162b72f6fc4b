/* Saving and restoring a session's persistent values (checkpoint.c). */
#ifndef KILN_CHECKPOINT_H
#define KILN_CHECKPOINT_H

#include "session.h"

int kl_checkpoint_save(kl_session *s, const char *path, uint64_t step);
/* Restores every persistent value; the file must hold exactly the
 * session's values with the same types, and its checksum must match.
 * Nothing changes unless all of it checks. Returns 0 or -1. */
int kl_checkpoint_load(kl_session *s, const char *path, uint64_t *step);

#endif
