/* gzip IDX files inflated once: the data cache (idx_cache.h).
 *
 * A gzip IDX file's data is kept inflated in the cache folder's data/
 * (cache_dir.h: private to the user), one entry per file (named from its
 * real path), so the next run reads it instead of inflating again:
 * Fashion-MNIST's training images are 26 MB of gzip, about 0.25 s of CPU
 * to inflate each run, against about 0.02 s to read and check 47 MB.
 * The entry carries the file's real path and identity (device, inode,
 * size, modification and change times), the dimensions and a CRC-32 of
 * the data; an entry that does not match in any of these, or is short, is
 * not used and is written again. Writing one removes the entries whose
 * file is gone or has changed (a copy in a temporary folder). Files under
 * 256 KiB of gzip (labels) are inflated each time. KILN_DATA_CACHE=0
 * turns the cache off; where it cannot be written (no private folder,
 * too little space) the data is inflated as before. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "idx_cache.h"
#include "base/support.h"
#include "runtime/files/cache_dir.h"

static const char idx_cache_magic[8] = {'K', 'I', 'L', 'N', 'I', 'D', 'X', '1'};

/* The identity of the file st into h. */
static void identity(const struct stat *st, idx_cache_head *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, idx_cache_magic, sizeof h->magic);
    h->dev = (uint64_t)st->st_dev;
    h->ino = (uint64_t)st->st_ino;
    h->size = (uint64_t)st->st_size;
    h->mtime_s = (int64_t)st->st_mtim.tv_sec;
    h->mtime_ns = (int64_t)st->st_mtim.tv_nsec;
    h->ctime_s = (int64_t)st->st_ctim.tv_sec;
    h->ctime_ns = (int64_t)st->st_ctim.tv_nsec;
}

int kl_idx_cache_open(kl_idx_entry *e, int fd, const char *path, int rank)
{
    memset(e, 0, sizeof *e);
    const char *on = getenv("KILN_DATA_CACHE");
    struct stat st;
    if (on && *on && strcmp(on, "0") && strcmp(on, "1")) {
        kl_error("KILN_DATA_CACHE='%s': 0 (no data cache) or 1 (the default)", on);
        return -2;
    }
    if ((on && !strcmp(on, "0")) || fstat(fd, &st) || st.st_size < (256 << 10))
        return -1;
    identity(&st, &e->head);
    e->head.rank = rank;
    char *dir = NULL;
    if (!(e->real = realpath(path, NULL)) || strlen(e->real) > PATH_MAX || !(dir = kl_cache_dir("data"))) {
        free(e->real);
        e->real = NULL;
        return -1;
    }
    e->head.path_len = (uint32_t)strlen(e->real);
    uint64_t key = kl_hash_bytes(KL_HASH_INIT, e->real, e->head.path_len);
    e->path = kl_xasprintf("%s/%016llx.idx", dir, (unsigned long long)key);
    free(dir);
    return 0;
}

void kl_idx_cache_close(kl_idx_entry *e)
{
    free(e->path);
    free(e->real);
    memset(e, 0, sizeof *e);
}

static bool read_all(int fd, void *dst, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)dst + got, n - got > (1u << 30) ? (1u << 30) : n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static bool write_all(int fd, const void *src, size_t n)
{
    for (size_t put = 0; put < n;) {
        ssize_t r = write(fd, (const char *)src + put, n - put > (1u << 30) ? (1u << 30) : n - put);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        put += (size_t)r;
    }
    return true;
}

int kl_idx_cache_read(const kl_idx_entry *e, int64_t *dims, uint8_t **data)
{
    const idx_cache_head *want = &e->head;
    const char *entry = e->path, *real = e->real;
    int fd = kl_cache_open(entry);
    if (fd < 0)
        return -1;
    idx_cache_head h;
    struct stat st;
    uint8_t *d = NULL;
    char stored[PATH_MAX + 1];
    int rc = -1;
    if (!read_all(fd, &h, sizeof h) || fstat(fd, &st) || h.path_len != want->path_len ||
        !read_all(fd, stored, h.path_len) || memcmp(stored, real, h.path_len))
        goto done;
    /* Everything but the data's shape, size and check is the file's. */
    idx_cache_head id = h;
    memset(id.dims, 0, sizeof id.dims);
    id.bytes = 0;
    id.crc = 0;
    if (memcmp(&id, want, sizeof id))
        goto done;
    int64_t total = 1;
    for (int i = 0; i < h.rank; i++)
        total = h.dims[i] > 0 && h.dims[i] <= (1 << 28) ? kl_size_mul(total, h.dims[i]) : -1;
    if (total < 0 || (uint64_t)total != h.bytes || (int64_t)st.st_size != (int64_t)(sizeof h + h.path_len) + total)
        goto done;
    char what[600];
    snprintf(what, sizeof what, "%s: the data", entry);
    if (kl_check_alloc(what, total, 0, "use a machine with more memory, or a smaller data set"))
        goto done;
    d = kl_xmalloc((size_t)total ? (size_t)total : 1);
    if (!read_all(fd, d, (size_t)total))
        goto done;
    uLong crc = crc32_z(0L, Z_NULL, 0);
    if ((uint32_t)crc32_z(crc, d, (size_t)total) != h.crc)
        goto done;
    for (int i = 0; i < h.rank; i++)
        dims[i] = h.dims[i];
    *data = d;
    d = NULL;
    rc = 0;
done:
    free(d);
    close(fd);
    return rc;
}

/* Removes the entries in dir whose file is gone or has changed (their
 * data can never be used again), all but keep, and temporaries older
 * than ten minutes. */
static void idx_cache_prune(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        struct stat st;
        char *p = kl_xasprintf("%s/%s", dir, e->d_name);
        /* A writer's temporary left by a process stopped mid-write. */
        if (n == 27 && !strncmp(e->d_name + 16, ".idx.", 5) && lstat(p, &st) == 0 && S_ISREG(st.st_mode) &&
            st.st_mtime < time(NULL) - 600)
            unlink(p);
        if (n != 20 || strcmp(e->d_name + 16, ".idx")) {
            free(p);
            continue;
        }
        idx_cache_head h, now;
        char stored[PATH_MAX + 1];
        int fd = strcmp(p, keep) ? kl_cache_open(p) : -1;
        if (fd >= 0) {
            bool stale = !read_all(fd, &h, sizeof h) || memcmp(h.magic, idx_cache_magic, sizeof h.magic) ||
                         h.path_len > PATH_MAX || !read_all(fd, stored, h.path_len);
            if (!stale) {
                stored[h.path_len] = 0;
                memset(&now, 0, sizeof now);
                stale = stat(stored, &st) != 0;
                if (!stale) {
                    identity(&st, &now);
                    stale = memcmp(&now.dev, &h.dev, (size_t)((char *)&h.rank - (char *)&h.dev)) != 0;
                }
            }
            close(fd);
            if (stale)
                unlink(p);
        }
        free(p);
    }
    closedir(d);
}

/* Under a temporary name, renamed into place: a reader sees a whole entry
 * or none. */
void kl_idx_cache_write(kl_idx_entry *e, const int64_t *dims, const uint8_t *data, int64_t total)
{
    idx_cache_head *h = &e->head;
    const char *entry = e->path, *real = e->real;
    struct statvfs vfs;
    const char *slash = strrchr(entry, '/');
    char *dir = kl_xasprintf("%.*s", (int)(slash - entry), entry);
    idx_cache_prune(dir, entry);
    /* Not when it would take the last of the disk: twice its size free. */
    bool room = statvfs(dir, &vfs) == 0 && (double)vfs.f_bavail * (double)vfs.f_frsize > 2.0 * (double)total + 64e6;
    free(dir);
    if (!room)
        return;
    for (int i = 0; i < h->rank; i++)
        h->dims[i] = dims[i];
    h->bytes = (uint64_t)total;
    h->crc = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), data, (size_t)total);
    char *tmp = kl_xasprintf("%s.XXXXXX", entry);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        free(tmp);
        return;
    }
    bool ok = write_all(fd, h, sizeof *h) && write_all(fd, real, h->path_len) && write_all(fd, data, (size_t)total);
    ok = close(fd) == 0 && ok;
    kl_cache_clear_odd(entry);
    if (!ok || rename(tmp, entry))
        unlink(tmp);
    free(tmp);
}

