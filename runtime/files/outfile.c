/* Writing the files users name. See outfile.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outfile.h"
#include "base/support.h"

/* The folder of path ("." for a bare name). */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return kl_xstrdup(".");
    if (slash == path)
        return kl_xstrdup("/");
    return kl_xstrndup(path, (size_t)(slash - path));
}

static int check_target_chr(const char *path, bool chr);
static int commit_to_device(kl_outfile *o);

/* 0 when path does not exist or is a regular file (not a link to one). */
static int check_target(const char *path)
{
    return check_target_chr(path, false);
}

/* The same; with chr, 1 when path is a character device (/dev/null),
 * which is written straight, never replaced. */
static int check_target_chr(const char *path, bool chr)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        kl_error("%s: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISREG(st.st_mode))
        return 0;
    if (chr && S_ISCHR(st.st_mode))
        return 1;
    kl_error("%s: is %s, not a regular file; refusing to write over it", path,
             S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a folder" : "a device, FIFO or socket");
    return -1;
}

/* A new file of a unique name beside path, open for writing; its name in
 * *tmp. -1 with errno set when it cannot be made. */
static int make_temp(const char *path, char **tmp)
{
    char *dir = dir_of(path);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    /* At most 200 bytes of the name, so the temporary fits NAME_MAX. */
    *tmp = kl_xasprintf("%s/.%.200s.XXXXXX", dir, base);
    free(dir);
    int fd = mkostemp(*tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(*tmp);
        *tmp = NULL;
        errno = e;
    } else
        kl_outfile_track(*tmp);
    return fd;
}

static int fsync_dir(const char *path)
{
    char *dir = dir_of(path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int kl_outfile_check(const char *path, const char *what)
{
    if (!*path) {
        kl_error("%s needs a file name", what);
        return -1;
    }
    int t = check_target_chr(path, true);
    if (t)
        return t > 0 ? 0 : -1;
    char *tmp;
    int fd = make_temp(path, &tmp);
    if (fd < 0) {
        char *dir = dir_of(path);
        kl_error("%s: cannot write %s here (%s: %s)", path, what, dir, strerror(errno));
        free(dir);
        return -1;
    }
    close(fd);
    unlink(tmp);
    kl_outfile_untrack(tmp);
    free(tmp);
    return 0;
}

/* A character device is written straight (o->tmp stays NULL), opened
 * without following links and checked to be one after the open. */
static int begin_char_device(kl_outfile *o, const char *path)
{
    int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISCHR(st.st_mode) || !(o->f = fdopen(fd, "wb"))) {
        kl_error("%s: cannot write: %s", path, fd < 0 ? strerror(errno) : "not a character device");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    o->path = kl_xstrdup(path);
    return 0;
}

static int begin(kl_outfile *o, const char *path, bool chr)
{
    memset(o, 0, sizeof *o);
    int t = check_target_chr(path, chr);
    if (t)
        return t > 0 ? begin_char_device(o, path) : -1;
    int fd = make_temp(path, &o->tmp);
    if (fd < 0) {
        kl_error("%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    if (!(o->f = fdopen(fd, "wb"))) {
        kl_error("%s: cannot write: %s", path, strerror(errno));
        close(fd);
        unlink(o->tmp);
        kl_outfile_untrack(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    o->path = kl_xstrdup(path);
    return 0;
}

int kl_outfile_begin(kl_outfile *o, const char *path)
{
    return begin(o, path, true);
}

static void outfile_free(kl_outfile *o)
{
    kl_outfile_untrack(o->tmp);
    free(o->path);
    free(o->tmp);
    memset(o, 0, sizeof *o);
}

void kl_outfile_abort(kl_outfile *o)
{
    if (o->f)
        fclose(o->f);
    if (o->tmp)
        unlink(o->tmp);
    outfile_free(o);
}

void kl_outfile_write(kl_outfile *o, const void *p, size_t n)
{
    if (!o->err && n && fwrite(p, 1, n, o->f) != n)
        o->err = errno ? errno : EIO;
}

void kl_outfile_note(kl_outfile *o)
{
    /* stdio sets errno when a write fails; the error flag stays set. */
    if (!o->err && o->f && ferror(o->f))
        o->err = errno ? errno : EIO;
}

/* The end of a straight write (a character device, a log): flush, sync
 * to disk when asked, close, and say what failed. */
static int close_straight(kl_outfile *o, bool sync)
{
    kl_outfile_note(o);
    int e = o->err;
    if (!e && fflush(o->f))
        e = errno;
    if (!e && sync && fsync(fileno(o->f)))
        e = errno;
    if (fclose(o->f) && !e)
        e = errno;
    o->f = NULL;
    if (e)
        kl_error("%s: writing failed: %s", o->path, strerror(e));
    outfile_free(o);
    return e ? -1 : 0;
}

int kl_outfile_commit(kl_outfile *o, unsigned mode)
{
    if (!o->tmp)
        return close_straight(o, false);
    if (o->dev)
        return commit_to_device(o);
    int e = 0, fd = -1;
    if (o->f) {
        kl_outfile_note(o);
        e = o->err;
        if (!e && fflush(o->f))
            e = errno;
        fd = fileno(o->f);
    } else if ((fd = open(o->tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        e = errno; /* another program wrote it (kl_outfile_begin_external) */
    }
    if (!e && fsync(fd))
        e = errno;
    mode_t mask = umask(0);
    umask(mask);
    if (!e && fchmod(fd, (mode_t)mode & ~mask))
        e = errno;
    if (o->f) {
        if (fclose(o->f) && !e)
            e = errno;
        o->f = NULL;
    } else if (fd >= 0) {
        close(fd);
    }
    if (!e && check_target(o->path)) {
        kl_outfile_abort(o);
        return -1;
    }
    if (!e && rename(o->tmp, o->path))
        e = errno;
    if (!e && fsync_dir(o->path))
        e = errno;
    if (e) {
        kl_error("%s: writing failed: %s", o->path, strerror(e));
        kl_outfile_abort(o);
        return -1;
    }
    outfile_free(o);
    return 0;
}

int kl_outfile_begin_external(kl_outfile *o, const char *path)
{
    /* Another program replaces the temporary: a device gets a copy of
     * it at the commit, from a temporary where one can be made. */
    memset(o, 0, sizeof *o);
    int t = check_target_chr(path, true);
    if (t < 0)
        return -1;
    if (t > 0) {
        const char *dir = getenv("TMPDIR");
        char *beside = kl_xasprintf("%s/kiln-out", dir && *dir ? dir : "/tmp");
        int fd = make_temp(beside, &o->tmp);
        free(beside);
        if (fd < 0) {
            kl_error("%s: cannot write: no temporary for it (%s)", path, strerror(errno));
            return -1;
        }
        close(fd);
        o->path = kl_xstrdup(path);
        o->dev = true;
        return 0;
    }
    if (begin(o, path, false))
        return -1;
    fclose(o->f);
    o->f = NULL;
    return 0;
}

/* The commit of an external write to a character device: the
 * temporary's bytes to the device, then the temporary removed. */
static int commit_to_device(kl_outfile *o)
{
    FILE *in = fopen(o->tmp, "rb");
    kl_outfile dev = {0};
    int rc = -1;
    if (!in)
        kl_error("%s: writing failed: %s: %s", o->path, o->tmp, strerror(errno));
    else if (begin_char_device(&dev, o->path) == 0) {
        char buf[1 << 16];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            kl_outfile_write(&dev, buf, n);
        if (ferror(in) && !dev.err)
            dev.err = EIO;
        rc = close_straight(&dev, false);
    }
    if (in)
        fclose(in);
    unlink(o->tmp);
    outfile_free(o);
    return rc;
}

int kl_outfile_open_log(kl_outfile *o, const char *path, bool append)
{
    memset(o, 0, sizeof *o);
    if (check_target(path))
        return -1;
    /* O_NOFOLLOW: a link planted since the check is refused, not
     * followed; O_NONBLOCK: a FIFO planted there cannot hang the open. */
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : 0), 0666);
    if (fd < 0) {
        kl_error("%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        kl_error("%s: is not a regular file; refusing to write to it", path);
        close(fd);
        return -1;
    }
    if (fcntl(fd, F_SETFL, append ? O_APPEND : 0) || (!append && ftruncate(fd, 0)) ||
        !(o->f = fdopen(fd, append ? "ab" : "wb"))) {
        kl_error("%s: cannot write: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    o->path = kl_xstrdup(path);
    return 0;
}

int kl_outfile_close_log(kl_outfile *o)
{
    return close_straight(o, true);
}

int kl_outfile_write_whole(const char *path, const void *data, size_t n)
{
    kl_outfile o;
    if (kl_outfile_begin(&o, path))
        return -1;
    kl_outfile_write(&o, data, n);
    return kl_outfile_commit(&o, 0666);
}
