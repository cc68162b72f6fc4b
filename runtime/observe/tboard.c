/* TensorBoard event files (runtime/observe/tboard.h): TFRecord framing and the
 * few fields of tensorflow.Event and tensorflow.Summary a scalar needs,
 * encoded by hand:
 *
 *   Event   { double wall_time = 1; int64 step = 2;
 *             oneof { string file_version = 3; Summary summary = 5; } }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 *
 * A protocol-buffer field is a key (field number << 3 | wire type) as a
 * varint, then the value: wire type 0 a varint, 1 eight little-endian
 * bytes, 2 a varint length and the bytes, 5 four little-endian bytes. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/stat.h>
#include <unistd.h>

#include "tboard.h"
#include "base/support.h"

/* ---- CRC32C (Castagnoli, reflected polynomial 0x82F63B78) ---- */

uint32_t kl_crc32c(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= s[i];
        for (int b = 0; b < 8; b++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return crc ^ 0xFFFFFFFFu;
}

/* TFRecord stores CRCs rotated and offset, so that a CRC of data that
 * itself holds CRCs is not trivially related to them. */
uint32_t kl_crc32c_masked(const void *p, size_t n)
{
    uint32_t c = kl_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* ---- a little protocol-buffer encoder ---- */

static void put_varint(kl_buf *b, uint64_t v)
{
    while (v >= 0x80) {
        kl_buf_putc(b, (char)(v | 0x80));
        v >>= 7;
    }
    kl_buf_putc(b, (char)v);
}

static void put_le(kl_buf *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        kl_buf_putc(b, (char)(v >> (8 * i)));
}

static void put_key(kl_buf *b, int field, int wire) { put_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void put_double(kl_buf *b, int field, double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    put_key(b, field, 1);
    put_le(b, u, 8);
}

static void put_float(kl_buf *b, int field, float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    put_key(b, field, 5);
    put_le(b, u, 4);
}

static void put_bytes(kl_buf *b, int field, const void *p, size_t n)
{
    put_key(b, field, 2);
    put_varint(b, n);
    kl_buf_putn(b, p, n);
}

/* ---- records ---- */

static void write_record(kl_tboard *tb, const kl_buf *data)
{
    unsigned char head[12];
    uint64_t n = data->len;
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)(n >> (8 * i));
    uint32_t hc = kl_crc32c_masked(head, 8), dc = kl_crc32c_masked(data->s, data->len);
    for (int i = 0; i < 4; i++)
        head[8 + i] = (unsigned char)(hc >> (8 * i));
    unsigned char tail[4];
    for (int i = 0; i < 4; i++)
        tail[i] = (unsigned char)(dc >> (8 * i));
    bool ok = fwrite(head, 1, 12, tb->f) == 12 && fwrite(data->s, 1, data->len, tb->f) == data->len &&
              fwrite(tail, 1, 4, tb->f) == 4 && fflush(tb->f) == 0;
    if (!ok && !tb->failed) {
        tb->failed = errno ? errno : EIO;
        kl_error("--tensorboard: cannot write %s: %s", tb->path, strerror(tb->failed));
    }
}

static int mkdirs(const char *dir)
{
    char *p = kl_xstrdup(dir);
    int rc = 0;
    for (char *s = p + 1; *s && !rc; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0777) && errno != EEXIST)
            rc = -1;
        *s = '/';
    }
    if (!rc && mkdir(p, 0777) && errno != EEXIST)
        rc = -1;
    free(p);
    struct stat st;
    if (!rc && (stat(dir, &st) || !S_ISDIR(st.st_mode))) {
        errno = ENOTDIR;
        rc = -1;
    }
    return rc;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

kl_tboard *kl_tboard_open(const char *dir)
{
    if (!dir || !*dir) {
        kl_error("--tensorboard needs a folder");
        return NULL;
    }
    if (mkdirs(dir)) {
        kl_error("--tensorboard: cannot make the folder %s: %s", dir, strerror(errno));
        return NULL;
    }
    char host[64] = "localhost";
    if (gethostname(host, sizeof host - 1))
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    double now = wall_now();
    kl_tboard *tb = kl_xcalloc(1, sizeof *tb);
    /* TensorBoard finds event files by "tfevents" in the name; the pid
     * keeps two runs started in the same second apart. */
    tb->path = kl_xasprintf("%s/events.out.tfevents.%lld.%s.%ld.kiln", dir, (long long)now, host, (long)getpid());
    if (!(tb->f = fopen(tb->path, "wbx"))) {
        kl_error("--tensorboard: cannot create %s: %s", tb->path, strerror(errno));
        free(tb->path);
        free(tb);
        return NULL;
    }
    kl_buf ev = {0};
    put_double(&ev, 1, now);
    put_bytes(&ev, 3, "brain.Event:2", strlen("brain.Event:2"));
    write_record(tb, &ev);
    kl_buf_free(&ev);
    return tb;
}

void kl_tboard_scalar(kl_tboard *tb, const char *tag, int64_t step, double value)
{
    if (!tb || tb->failed)
        return;
    kl_buf val = {0}, sum = {0}, ev = {0};
    put_bytes(&val, 1, tag, strlen(tag));
    put_float(&val, 2, (float)value);
    put_bytes(&sum, 1, val.s, val.len);
    put_double(&ev, 1, wall_now());
    put_key(&ev, 2, 0);
    put_varint(&ev, (uint64_t)step);
    put_bytes(&ev, 5, sum.s, sum.len);
    write_record(tb, &ev);
    kl_buf_free(&val);
    kl_buf_free(&sum);
    kl_buf_free(&ev);
}

int kl_tboard_close(kl_tboard *tb)
{
    if (!tb)
        return 0;
    int rc = tb->failed ? -1 : 0;
    if (fclose(tb->f) && !rc) {
        kl_error("--tensorboard: cannot write %s: %s", tb->path, strerror(errno));
        rc = -1;
    }
    free(tb->path);
    free(tb);
    return rc;
}
