/* Every file Kiln writes at a path a user names (checkpoints, metrics,
 * traces, `kiln build`'s executable, `kiln ir -o`) goes through here.
 *
 * A replaced file is written whole or not at all: the bytes go to a new
 * temporary of a unique name in the target's folder (mkstemp: O_EXCL, so
 * a link planted there is never followed), every write is checked, the
 * file is flushed, fsync'd and closed, renamed over the target, and the
 * folder is fsync'd. Two writers of one path each rename a whole file;
 * the last one wins and neither tears the other. A target that exists
 * and is not a regular file (a symbolic link, a device, a folder, a
 * FIFO) is refused, never replaced or followed; a character device
 * (/dev/null) is written straight (opened without following links),
 * as every Unix tool allows; what another program writes
 * (begin_external) goes to a temporary in the temporary folder and is
 * copied to the device at the commit.
 *
 * A log (--metrics) is written in place, line by line, so that it can be
 * followed while a run goes on; it is opened without following links,
 * must be a regular file, and is appended to when a run resumes.
 *
 * Errors name the file and strerror(errno). */
#ifndef KILN_OUTFILE_H
#define KILN_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

typedef struct kl_outfile {
    char *path; /* the target */
    char *tmp;  /* the temporary beside it */
    FILE *f;    /* open on tmp (or on path, for a log); NULL once closed */
    int err;    /* the errno of the first failed write, or 0 */
    bool dev;   /* tmp (in the temporary folder) goes to the character device path at the commit */
} kl_outfile;

/* Checks, before any work, that path can be written: it is not an
 * existing non-regular file, and a file can be created in its folder
 * (one is created and removed). what names the file in messages
 * ("--save"). Returns 0, or -1 after an error naming path. */
int kl_outfile_check(const char *path, const char *what);

/* Starts replacing path: o->f is open on a new temporary beside it.
 * Returns 0, or -1 after an error (o is then empty). */
int kl_outfile_begin(kl_outfile *o, const char *path);
/* Closes the temporary (checking the stream's error flag, the flush, the
 * fsync and the close), gives it mode (less the umask: 0666 for data,
 * 0777 for an executable) and renames it over the target. On any failure
 * the temporary is removed, the target is left as it was, and an error
 * names the target. Frees o's strings either way. Returns 0 or -1. */
int kl_outfile_commit(kl_outfile *o, unsigned mode);
/* The same for a file another program writes (a linker's -o): o->tmp
 * is made and closed; the program replaces or fills it. For a character
 * device (kiln build -o /dev/null) o->tmp is in $TMPDIR (or /tmp), and
 * the commit copies it to the device. */
int kl_outfile_begin_external(kl_outfile *o, const char *path);
/* Gives up: removes the temporary; the target is left as it was. */
void kl_outfile_abort(kl_outfile *o);
/* Writes n bytes, keeping the first failure's errno for the commit. */
void kl_outfile_write(kl_outfile *o, const void *p, size_t n);
/* After writes through o->f by other means (fprintf): notes a failure. */
void kl_outfile_note(kl_outfile *o);
/* begin, write and commit (mode 0666) in one: path gets the n bytes of
 * data, whole or not at all. Returns 0, or -1 after an error naming path. */
int kl_outfile_write_whole(const char *path, const void *data, size_t n);

/* Opens the log at path for writing in place (o->tmp stays NULL):
 * appended to when append, emptied otherwise. Returns 0, or -1 after an
 * error naming path. */
int kl_outfile_open_log(kl_outfile *o, const char *path, bool append);
/* Flushes, fsyncs and closes a log, checking each and the writes before.
 * Returns 0, or -1 after an error naming path. Frees o's strings. */
int kl_outfile_close_log(kl_outfile *o);

/* (outfile_temps.c) The temporaries a signal removes on the way out:
 * track one once made (NULL: nothing to track), untrack it once renamed
 * or removed. */
void kl_outfile_track(const char *tmp);
void kl_outfile_untrack(const char *tmp);

/* (outfile_lock.c) Keeps other kiln runs off path until this one exits:
 * an exclusive flock on .NAME.kiln-lock beside it, removed on the way
 * out. Nothing for a character device. Returns 0, or -1 after an error
 * naming path (another run holds it: "PATH is being written by another
 * kiln run"). */
int kl_outfile_lock(const char *path);

#endif
