/* The kernel cache's folders and objects, sealed against other users.
 *
 * Compiled kernels in the cache are loaded into the process (dlopen), so
 * the cache is private: every folder Kiln makes for it is 0700, and a
 * folder or object that is not the user's own, or that group or others
 * may write, or that is a symbolic link, is never used. Objects are
 * opened without following links. See docs/cli.md, "Kernels compiled at
 * start, and their cache". */
#ifndef KILN_CACHE_DIR_H
#define KILN_CACHE_DIR_H

#include <stddef.h>

/* The cache folder for compiled kernels (and decompressed data sets),
 * created 0700 and checked private: $KILN_CACHE_DIR/sub,
 * $XDG_CACHE_HOME/kiln/sub, ~/.cache/kiln/sub, else (or when that one is
 * not private, with a note) $TMPDIR/kiln-cache-UID/sub. Caller frees;
 * NULL after an error. */
char *kl_cache_dir(const char *sub);

/* Makes dir and the folders below base on its way (0700) and checks each
 * from base down: a folder (not a link), the user's own, not writable by
 * group or others. Returns 0, or -1 with why (naming the folder) filled. */
int kl_cache_seal(const char *base, const char *dir, char *why, size_t why_len);

/* Opens a cache object for reading without following links; it must be a
 * regular file, the user's own, not writable by group or others. Returns
 * the descriptor, or -1 (errno set; EPERM for a file that fails the
 * ownership or mode check). */
int kl_cache_open(const char *path);

/* Removes whatever is at path if it is not a regular file (a link planted
 * at a cache name: the link goes, its target is never touched). */
void kl_cache_clear_odd(const char *path);

/* Takes the lock of one cache key (path: KEY.lock beside its object), so
 * that processes needing one key at once (the ranks of a job) compile it
 * once: the first compiles, the others wait and then find the object.
 * Returns the descriptor for kl_cache_unlock, or -1 when no lock can be
 * had (a link or a foreign file at path, or a holder stuck for ten
 * minutes): the caller then compiles anyway, the lock only saves work. */
int kl_cache_lock(const char *path);
void kl_cache_unlock(int fd);

#endif
