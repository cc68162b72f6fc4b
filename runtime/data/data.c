/* IDX reading (the MNIST family, gzip through zlib) and synthetic data:
 * data sets held in memory (the loader: loader.c; shards: wds_data.c). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "wds_set.h"
#include "tokens.h"
#include "base/scalar.h"
#include "base/support.h"
#include "idx_cache.h"

/* idx and synthetic: the fields "image" (u8, the sample's shape) and
 * "label" (i32), both in memory. */
static void image_label_fields(kl_dataset *d)
{
    d->nfields = 2;
    kl_field *img = &d->field[0], *lab = &d->field[1];
    img->name = kl_xstrdup("image");
    img->type.dtype = IR_U8;
    img->type.rank = d->rank;
    for (int i = 0; i < d->rank; i++)
        img->type.shape[i] = d->shape[i];
    img->bytes = d->sample_bytes;
    lab->name = kl_xstrdup("label");
    lab->type.dtype = IR_I32;
    lab->bytes = 4;
    img->used = lab->used = true;
    d->data[0] = d->features;
    d->data[1] = (uint8_t *)d->labels;
}

/* ---- IDX ---- */

/* The path of dir/base.gz or dir/base, or NULL with why: "missing" when
 * neither exists, or why the folder cannot be read. */
static char *find_file(const char *dir, const char *base, char *why, size_t n)
{
    struct stat st;
    char *p = kl_xasprintf("%s/%s.gz", dir, base);
    if (stat(p, &st) == 0)
        return p;
    int err = errno;
    free(p);
    p = kl_xasprintf("%s/%s", dir, base);
    if (stat(p, &st) == 0)
        return p;
    if (errno != ENOENT || err != ENOENT)
        snprintf(why, n, "%s", strerror(errno != ENOENT ? errno : err));
    else
        snprintf(why, n, "missing");
    free(p);
    return NULL;
}

/* The bytes of an IDX file, gzip (one or more members and nothing after
 * them) or raw. zlib's gzread would skip garbage after the last member
 * and stop before a missing trailer without a word: this reader sees
 * both, and reports a failed check as corrupt data, not as a short file. */
typedef struct idx_stream {
    const char *path;
    int fd;
    bool gz, in_eof, members_done;
    z_stream z;
    unsigned char in[1 << 16];
    char why[160];
} idx_stream;

static int stream_open(idx_stream *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->fd = kl_open_regular(path, s->why, sizeof s->why);
    if (s->fd < 0) {
        kl_error("%s: %s", path, s->why);
        return -1;
    }
    size_t len = strlen(path);
    s->gz = len > 3 && !strcmp(path + len - 3, ".gz");
    if (s->gz && inflateInit2(&s->z, 15 + 16) != Z_OK)
        kl_panic("inflateInit2 failed");
    return 0;
}

static void stream_close(idx_stream *s)
{
    if (s->gz)
        inflateEnd(&s->z);
    close(s->fd);
}

/* Raw bytes of the file into dst (the whole of it, or to its end). */
static int64_t read_raw(idx_stream *s, unsigned char *dst, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(s->fd, dst + got, n - got > (1u << 30) ? (1u << 30) : n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(s->why, sizeof s->why, "read error: %s", strerror(errno));
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (int64_t)got;
}

/* More compressed input when inflate has used what it had (none at the
 * file's end); -1 with why on a read error. */
static int refill(idx_stream *s)
{
    if (s->z.avail_in > 0 || s->in_eof)
        return 0;
    int64_t r = read_raw(s, s->in, sizeof s->in);
    if (r < 0)
        return -1;
    s->in_eof = r == 0;
    s->z.next_in = s->in;
    s->z.avail_in = (uInt)r;
    return 0;
}

/* Up to n bytes of data into dst: the count (less than n only at the
 * data's end), or -1 with why. */
static int64_t stream_read(idx_stream *s, unsigned char *dst, size_t n)
{
    if (!s->gz)
        return read_raw(s, dst, n);
    size_t got = 0;
    while (got < n && !s->members_done) {
        if (refill(s))
            return -1;
        if (s->z.avail_in == 0) {
            snprintf(s->why, sizeof s->why, "truncated or corrupt: the gzip data ends early (no end of stream or trailer)");
            return -1;
        }
        size_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
        s->z.next_out = dst + got;
        s->z.avail_out = (uInt)want;
        int rc = inflate(&s->z, Z_NO_FLUSH);
        got += want - s->z.avail_out;
        if (rc == Z_STREAM_END) {
            /* Another member may follow; anything else is garbage. */
            if (refill(s))
                return -1;
            if (s->z.avail_in == 0) {
                s->members_done = true;
            } else if (s->z.next_in[0] != 0x1f) {
                snprintf(s->why, sizeof s->why, "corrupt: trailing garbage after the gzip data");
                return -1;
            } else {
                inflateReset(&s->z);
            }
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            snprintf(s->why, sizeof s->why, "corrupt gzip data (%s)", s->z.msg ? s->z.msg : zError(rc));
            return -1;
        }
    }
    return (int64_t)got;
}

/* Reads exactly n bytes; on a short read or an error prints PATH:
 * WHAT: why and returns -1. */
static int read_exact(idx_stream *s, void *dst, size_t n, const char *what)
{
    int64_t got = stream_read(s, dst, n);
    if (got == (int64_t)n)
        return 0;
    if (got >= 0)
        kl_error("%s: truncated or corrupt: %s (the file ends after %lld of %zu bytes)", s->path, what, (long long)got, n);
    else
        kl_error("%s: %s", s->path, s->why);
    return -1;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Reads one IDX file of unsigned bytes: dims out, data malloc'd. The
 * data must end where the header says, and its size must fit in memory
 * (and in what the file can hold) before it is allocated. */
static int read_idx(const char *path, int want_rank, int64_t *dims, uint8_t **data)
{
    idx_stream *s = kl_xmalloc(sizeof *s);
    *data = NULL;
    if (stream_open(s, path)) {
        free(s);
        return -1;
    }
    unsigned char head[4];
    int rc = -1;
    kl_idx_entry entry;
    int use = s->gz ? kl_idx_cache_open(&entry, s->fd, path, want_rank) : -1;
    bool cached = use == 0;
    if (use == -2)
        goto done;
    if (cached && kl_idx_cache_read(&entry, dims, data) == 0) {
        rc = 0;
        goto done;
    }
    if (read_exact(s, head, 4, "no IDX header"))
        goto done;
    if (head[0] != 0 || head[1] != 0 || head[2] != 0x08) {
        kl_error("%s: not an IDX file of unsigned bytes (magic %02x %02x %02x %02x)", path, head[0], head[1], head[2], head[3]);
        goto done;
    }
    if (head[3] != want_rank) {
        kl_error("%s: has %d dimensions, expected %d", path, head[3], want_rank);
        goto done;
    }
    int64_t total = 1;
    for (int i = 0; i < want_rank; i++) {
        unsigned char d[4];
        if (read_exact(s, d, 4, "the header ends early"))
            goto done;
        dims[i] = be32(d);
        if (dims[i] <= 0 || dims[i] > (1 << 28)) {
            kl_error("%s: dimension %d is %lld, out of range", path, i, (long long)dims[i]);
            goto done;
        }
        total = kl_size_mul(total, dims[i]);
    }
    /* Deflate expands at most 1032 to 1. */
    struct stat st;
    int64_t most = fstat(s->fd, &st) ? -1 : s->gz ? kl_size_mul(st.st_size, 1032) : st.st_size;
    if (total < 0 || (most >= 0 && total > most)) {
        kl_error("%s: truncated or corrupt: the header announces %lld bytes of data, more than the file can hold", path,
                 (long long)total);
        goto done;
    }
    char what[600];
    snprintf(what, sizeof what, "%s: the data", path);
    if (kl_check_alloc(what, total, 0, "use a machine with more memory, or a smaller data set"))
        goto done;
    *data = kl_xmalloc((size_t)total);
    char expected[64];
    snprintf(expected, sizeof expected, "expected %lld bytes of data", (long long)total);
    if (read_exact(s, *data, (size_t)total, expected))
        goto done;
    /* Nothing after the data, and the gzip stream's end and check. */
    unsigned char extra;
    int64_t more = stream_read(s, &extra, 1);
    if (more < 0) {
        kl_error("%s: %s", path, s->why);
        goto done;
    }
    if (more > 0) {
        kl_error("%s: corrupt: data after the %lld bytes the header announces", path, (long long)total);
        goto done;
    }
    if (cached)
        kl_idx_cache_write(&entry, dims, *data, total);
    rc = 0;
done:
    if (rc) {
        free(*data);
        *data = NULL;
    }
    if (cached)
        kl_idx_cache_close(&entry);
    stream_close(s);
    free(s);
    return rc;
}

int kl_idx_load(const char *dir, const char *split, kl_dataset *out)
{
    memset(out, 0, sizeof *out);
    /* The folder first: a missing or unreadable one is not a missing
     * data set. */
    struct stat st;
    if (stat(dir, &st)) {
        kl_error("%s: cannot read the data folder: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        kl_error("%s: the data is a folder of IDX files, and this is not a folder", dir);
        return -1;
    }
    char *img_base = kl_xasprintf("%s-images-idx3-ubyte", split);
    char *lab_base = kl_xasprintf("%s-labels-idx1-ubyte", split);
    char iwhy[160], lwhy[160];
    char *img = find_file(dir, img_base, iwhy, sizeof iwhy), *lab = img ? find_file(dir, lab_base, lwhy, sizeof lwhy) : NULL;
    int rc = -1;
    uint8_t *images = NULL, *labels = NULL;
    if (!img || !lab) {
        const char *why = img ? lwhy : iwhy;
        if (strcmp(why, "missing"))
            kl_error("%s: cannot read %s(.gz): %s", dir, img ? lab_base : img_base, why);
        else
            kl_error("%s: no %s(.gz) here (is the dataset installed? apt-get install dataset-fashion-mnist)", dir,
                     img ? lab_base : img_base);
        goto done;
    }
    int64_t idims[3], ldims[1];
    if (read_idx(img, 3, idims, &images) || read_idx(lab, 1, ldims, &labels))
        goto done;
    if (idims[0] != ldims[0]) {
        kl_error("%s: %lld images but %s has %lld labels", img, (long long)idims[0], lab, (long long)ldims[0]);
        goto done;
    }
    out->name = kl_xasprintf("%s/%s", dir, split);
    out->count = idims[0];
    out->rank = 2;
    out->shape[0] = idims[1];
    out->shape[1] = idims[2];
    out->sample_bytes = idims[1] * idims[2];
    out->features = images;
    images = NULL;
    out->labels = kl_xmalloc(sizeof(int32_t) * (size_t)out->count);
    for (int64_t i = 0; i < out->count; i++) {
        out->labels[i] = labels[i];
        if (labels[i] > out->max_label)
            out->max_label = labels[i];
    }
    image_label_fields(out);
    out->label_path = lab;
    lab = NULL;
    rc = 0;
done:
    free(images);
    free(labels);
    free(img);
    free(lab);
    free(img_base);
    free(lab_base);
    return rc;
}

int kl_synthetic(int64_t count, uint64_t seed, kl_dataset *out)
{
    memset(out, 0, sizeof *out);
    /* 784 bytes of pixels and a 4-byte label per sample. */
    int64_t bytes = kl_size_mul(count, 784 + 4);
    char what[96], hint[96];
    snprintf(what, sizeof what, "synthetic:%lld (%lld samples of 788 bytes)", (long long)count, (long long)count);
    snprintf(hint, sizeof hint, "try --data synthetic:N with N at most %lld", (long long)(kl_machine_memory() / 2 / 788));
    if (kl_check_alloc(what, bytes, 0, hint))
        return -1;
    out->name = kl_xstrdup("synthetic");
    out->count = count;
    out->rank = 2;
    out->shape[0] = out->shape[1] = 28;
    out->sample_bytes = 28 * 28;
    out->features = kl_xmalloc((size_t)(count * 784));
    out->labels = kl_xmalloc(sizeof(int32_t) * (size_t)count);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < count; i++) {
        uint8_t *img = out->features + i * 784;
        for (int p = 0; p < 784; p++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            img[p] = (uint8_t)((s >> 33) % 64);
        }
        /* Label c puts a bright 7x7 patch in cell c of a 4x3 grid. */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int c = (int)((s >> 33) % 10);
        int r0 = (c / 4) * 9 + 1, c0 = (c % 4) * 7;
        for (int y = r0; y < r0 + 7 && y < 28; y++)
            for (int x = c0; x < c0 + 7; x++)
                img[y * 28 + x] = 200;
        out->labels[i] = c;
        if (c > out->max_label)
            out->max_label = c;
    }
    image_label_fields(out);
    return 0;
}

int kl_dataset_check_labels(const kl_dataset *d, int classes)
{
    if (!classes || d->max_label < classes || !d->labels)
        return 0;
    int64_t i = 0;
    while (i < d->count - 1 && d->labels[i] < classes)
        i++;
    kl_error("%s: sample %lld: label %d is out of range for the model's %d classes",
             d->label_path ? d->label_path : d->name ? d->name : "data", (long long)i, d->labels[i], classes);
    return -1;
}

void kl_dataset_free(kl_dataset *d)
{
    free(d->name);
    free(d->label_path);
    for (int f = 0; f < d->nfields; f++) {
        free(d->field[f].name);
        free(d->data[f]);
    }
    kl_shard_set *ss = d->shards;
    if (ss) {
        for (int s = 0; s < ss->nshards; s++)
            free(ss->paths[s]);
        for (int64_t id = 0; id < ss->total; id++)
            free(ss->keys[id]);
        free(ss->paths);
        free(ss->base);
        free(ss->keys);
        free(ss->has);
        free(ss->bad);
        free(ss);
    }
    if (d->tokens) {
        kl_tokens_close(d->tokens);
        free(d->tokens);
    }
    memset(d, 0, sizeof *d);
}

