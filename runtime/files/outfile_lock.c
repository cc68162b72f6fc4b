/* The locks that keep two runs off one output: a run takes an exclusive
 * flock on `.NAME.kiln-lock` beside each file it will write (--metrics,
 * --save and its periodic FILE.step-N, --predict, --trace, ...) before
 * any work, and holds it until it exits; a second run naming the same
 * file is refused at once, with an error naming the file, instead of
 * interleaving its lines into the first one's log.
 *
 * The lock file is opened with O_NOFOLLOW (a planted link is refused,
 * never followed) and O_CLOEXEC, and is removed on the way out: at exit,
 * or by outfile_temps.c's handler on SIGINT, SIGTERM or SIGHUP (it is
 * tracked as a temporary). Removing a held lock file is safe because a
 * taker checks, once it holds the flock, that the name still leads to
 * the file it locked, and starts again if not. A lock file left by a
 * SIGKILL is held by no one, so the next run takes it.
 *
 * A character device (/dev/null) is written straight and gets no lock
 * (none is made in /dev). The same file named twice by one run (--trace
 * and --metrics at one path) is locked once. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outfile.h"
#include "base/support.h"

#define MAX_LOCKS 32

typedef struct {
    int fd;
    char *path; /* the lock file */
    dev_t dev;
    ino_t ino;
} held_lock;
static held_lock held[MAX_LOCKS];
static int nheld;
static pid_t owner; /* a forked child that exits leaves the locks alone */

static void remove_locks(void)
{
    /* Unlinked while still held: a run that opened the old file finds
     * the name gone once it has the flock, and starts again. */
    for (int i = 0; i < nheld; i++) {
        if (getpid() == owner)
            unlink(held[i].path);
        kl_outfile_untrack(held[i].path);
        close(held[i].fd);
        free(held[i].path);
    }
    nheld = 0;
}

/* The lock file's name: .BASE.kiln-lock in path's folder. */
static char *lock_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dir = slash ? (int)(slash - path) + 1 : 0;
    /* At most 200 bytes of the name, so that it fits NAME_MAX. */
    return kl_xasprintf("%.*s.%.200s.kiln-lock", dir, path, base);
}

/* 1 when fd is already one of this run's locks (closed then), else 0. */
static int already_held(int fd, const struct stat *st)
{
    for (int i = 0; i < nheld; i++)
        if (held[i].dev == st->st_dev && held[i].ino == st->st_ino) {
            close(fd);
            return 1;
        }
    return 0;
}

int kl_outfile_lock(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISCHR(st.st_mode))
        return 0; /* a device, written straight: nothing to lock */
    char *name = lock_name(path);
    int tries;
    for (tries = 0; tries < 100; tries++) {
        int fd = open(name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
        if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
            kl_error("%s: cannot take the lock %s: %s", path, name, fd < 0 ? strerror(errno) : "not a regular file");
            if (fd >= 0)
                close(fd);
            break;
        }
        if (already_held(fd, &st)) {
            free(name);
            return 0;
        }
        if (flock(fd, LOCK_EX | LOCK_NB)) {
            int e = errno;
            close(fd);
            if (e == EWOULDBLOCK)
                kl_error("%s is being written by another kiln run (lock %s held)\n"
                         "---> wait for that run to end, or write to another file",
                         path, name);
            else
                kl_error("%s: cannot take the lock %s: %s", path, name, strerror(e));
            break;
        }
        struct stat now;
        if (lstat(name, &now) || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
            close(fd); /* removed or replaced by the run that held it: again */
            continue;
        }
        if (nheld == MAX_LOCKS) {
            kl_error("%s: more than %d outputs to lock", path, MAX_LOCKS);
            close(fd);
            break;
        }
        static bool registered;
        if (!registered) {
            registered = true;
            owner = getpid();
            atexit(remove_locks);
        }
        kl_outfile_track(name);
        held[nheld++] = (held_lock){.fd = fd, .path = name, .dev = st.st_dev, .ino = st.st_ino};
        return 0;
    }
    if (tries == 100)
        kl_error("%s: cannot take the lock %s: it keeps being replaced", path, name);
    free(name);
    return -1;
}
