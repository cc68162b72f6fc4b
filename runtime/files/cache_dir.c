/* The kernel cache's folder (kl_cache_dir) and the checks that keep it
 * private to the user: see cache_dir.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_dir.h"
#include "base/support.h"

/* Checks one folder: not a link, a folder, the user's own, not writable
 * by group or others. */
static int check_folder(const char *p, char *why, size_t why_len)
{
    struct stat st;
    if (lstat(p, &st)) {
        snprintf(why, why_len, "%s: %s", p, strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode))
        snprintf(why, why_len, "%s is a symbolic link (remove it)", p);
    else if (!S_ISDIR(st.st_mode))
        snprintf(why, why_len, "%s is not a folder (remove it)", p);
    else if (st.st_uid != geteuid())
        snprintf(why, why_len, "%s belongs to another user (uid %d; remove it or use a folder of your own)", p,
                 (int)st.st_uid);
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
        snprintf(why, why_len, "%s is writable by others (chmod 700 %s)", p, p);
    else
        return 0;
    return -1;
}

int kl_cache_seal(const char *base, const char *dir, char *why, size_t why_len)
{
    size_t nb = strlen(base);
    char *p = kl_xstrdup(dir);
    int rc = 0;
    /* Folders above base are the user's choice (a home, /tmp) and only
     * made if missing; base and those below it are the cache's own. */
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/')
            continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0700) && errno != EEXIST) {
            snprintf(why, why_len, "cannot create %s: %s", p, strerror(errno));
            rc = -1;
        } else if (strlen(p) >= nb && check_folder(p, why, why_len)) {
            rc = -1;
        }
        *s = c;
        if (rc || !c)
            break;
    }
    free(p);
    return rc;
}

int kl_cache_open(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

void kl_cache_clear_odd(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        unlink(path);
}

/* $TMPDIR (or /tmp)/kiln-cache-UID/sub, sealed; NULL after an error. */
static char *fallback_dir(const char *sub, const char *refused, const char *refused_why)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || tmp[0] != '/')
        tmp = "/tmp";
    char *base = kl_xasprintf("%s/kiln-cache-%d", tmp, (int)geteuid());
    char *dir = kl_xasprintf("%s/%s", base, sub);
    char why[1024];
    static int noted; /* the note once a process */
    if (kl_cache_seal(base, dir, why, sizeof why)) {
        if (refused)
            kl_error("no private kernel cache folder: %s; and %s (set KILN_CACHE_DIR to a folder of your own)",
                     refused_why, why);
        else
            kl_error("no private kernel cache folder: %s (set KILN_CACHE_DIR to a folder of your own)", why);
        free(dir);
        dir = NULL;
    } else if (refused && !noted) {
        noted = 1;
        kl_fprintf_escaped(kl_diag_stream(), "kiln: note: not using the kernel cache %s: %s; using %s\n", refused,
                           refused_why, dir);
    }
    free(base);
    return dir;
}

char *kl_cache_dir(const char *sub)
{
    const char *env = getenv("KILN_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char *base;
    if (env && *env)
        base = kl_xstrdup(env);
    else if (xdg && *xdg)
        base = kl_xasprintf("%s/kiln", xdg);
    else if (home && *home)
        base = kl_xasprintf("%s/.cache/kiln", home);
    else
        return fallback_dir(sub, NULL, NULL);
    char *dir = kl_xasprintf("%s/%s", base, sub);
    char why[1024];
    if (kl_cache_seal(base, dir, why, sizeof why)) {
        char *alt = fallback_dir(sub, dir, why);
        free(dir);
        dir = alt;
    }
    free(base);
    return dir;
}

int kl_cache_lock(const char *path)
{
    kl_cache_clear_odd(path);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
        close(fd);
        return -1;
    }
    /* A compile takes seconds; one that holds the lock for ten minutes
     * is taken as stuck (a stopped process) and compiled beside. */
    for (int waited_ms = 0; flock(fd, LOCK_EX | LOCK_NB); waited_ms += 20) {
        if ((errno != EWOULDBLOCK && errno != EINTR) || waited_ms >= 600 * 1000) {
            close(fd);
            return -1;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return fd;
}

void kl_cache_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* closing drops the flock */
}
