/* Token files: see tokens.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokens.h"
#include "runtime/files/outfile.h"
#include "base/scalar.h"
#include "base/support.h"

int kl_tokens_dtype_bytes(uint32_t code)
{
    return code == 1 ? 1 : code == 2 ? 2 : code == 3 ? 4 : 0;
}

const char *kl_tokens_dtype_name(int dtype_bytes)
{
    return dtype_bytes == 1 ? "u8" : dtype_bytes == 2 ? "u16" : "u32";
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

/* The largest token in n tokens of size bytes each. */
static uint32_t max_token(const uint8_t *p, int64_t n, int bytes)
{
    uint32_t m = 0;
    kl_tokens t = {.data = p, .dtype_bytes = bytes};
    if (bytes == 1) {
        for (int64_t i = 0; i < n; i++)
            m = p[i] > m ? p[i] : m;
        return m;
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = kl_tokens_get(&t, i);
        m = v > m ? v : m;
    }
    return m;
}

int kl_tokens_open(const char *path, kl_tokens *t)
{
    memset(t, 0, sizeof *t);
    char why[160];
    int fd = kl_open_regular(path, why, sizeof why);
    if (fd < 0) {
        kl_error("%s: %s", path, why);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        kl_error("%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    size_t len = (size_t)st.st_size;
    if (len < KL_TOKENS_HEADER) {
        uint8_t head[8] = {0};
        ssize_t got = read(fd, head, sizeof head);
        close(fd);
        if (got >= 7 && !memcmp(head, KL_TOKENS_MAGIC, 7))
            kl_error("%s: truncated token file: %zu bytes, shorter than the %d-byte header", path, len,
                     KL_TOKENS_HEADER);
        else
            kl_error("%s: not a Kiln token file (%zu bytes; expected the magic \"KILNTOK\")", path, len);
        return -1;
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        kl_error("%s: cannot map the file: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    const uint8_t *h = map;
    const char *bad = NULL;
    char msg[256];
    uint32_t version = get_u32(h + 8), code = get_u32(h + 12);
    uint64_t count = get_u64(h + 16), vocab = get_u64(h + 24), sum = get_u64(h + 32);
    int bytes = kl_tokens_dtype_bytes(code);
    if (memcmp(h, KL_TOKENS_MAGIC, 8)) {
        bad = "not a Kiln token file (expected the magic \"KILNTOK\")";
    } else if (version != KL_TOKENS_VERSION) {
        snprintf(msg, sizeof msg, "token file version %u, this Kiln reads version %d", version, KL_TOKENS_VERSION);
        bad = msg;
    } else if (!bytes) {
        snprintf(msg, sizeof msg, "corrupt header: dtype code %u (expected 1 = u8, 2 = u16, 3 = u32)", code);
        bad = msg;
    } else if (get_u64(h + 40)) {
        bad = "corrupt header: the reserved field is not 0";
    } else if (count > (uint64_t)(len - KL_TOKENS_HEADER) / (uint64_t)bytes) {
        snprintf(msg, sizeof msg, "truncated: the header announces %llu tokens (%llu bytes) but the file holds %zu",
                 (unsigned long long)count, (unsigned long long)(KL_TOKENS_HEADER + count * (uint64_t)bytes), len);
        bad = msg;
    } else if (KL_TOKENS_HEADER + count * (uint64_t)bytes != len) {
        snprintf(msg, sizeof msg, "corrupt: %llu bytes after the %llu tokens the header announces",
                 (unsigned long long)(len - KL_TOKENS_HEADER - count * (uint64_t)bytes), (unsigned long long)count);
        bad = msg;
    } else if (vocab == 0 || vocab > (uint64_t)1 << (8 * bytes)) {
        snprintf(msg, sizeof msg, "corrupt header: vocabulary size %llu for %s tokens", (unsigned long long)vocab,
                 kl_tokens_dtype_name(bytes));
        bad = msg;
    } else if (kl_hash_bytes(KL_HASH_INIT, h + KL_TOKENS_HEADER, count * (uint64_t)bytes) != sum) {
        bad = "checksum mismatch: the tokens are corrupt";
    } else if (count && max_token(h + KL_TOKENS_HEADER, (int64_t)count, bytes) >= vocab) {
        snprintf(msg, sizeof msg, "corrupt: token %u is out of range for the vocabulary of %llu",
                 max_token(h + KL_TOKENS_HEADER, (int64_t)count, bytes), (unsigned long long)vocab);
        bad = msg;
    }
    if (bad) {
        kl_error("%s: %s", path, bad);
        munmap(map, len);
        close(fd);
        return -1;
    }
    t->path = kl_xstrdup(path);
    t->fd = fd;
    t->map = map;
    t->map_len = len;
    t->data = h + KL_TOKENS_HEADER;
    t->count = (int64_t)count;
    t->dtype_bytes = bytes;
    t->vocab = vocab;
    return 0;
}

void kl_tokens_close(kl_tokens *t)
{
    if (t->map) {
        munmap(t->map, t->map_len);
        close(t->fd);
    }
    free(t->path);
    memset(t, 0, sizeof *t);
}

int kl_tokens_check_context(const kl_tokens *t, int64_t context)
{
    if (context < 1 || t->count < context + 1) {
        kl_error("%s: %lld tokens, too few for one window of context %lld + 1", t->path, (long long)t->count,
                 (long long)context);
        return -1;
    }
    return 0;
}

int64_t kl_tokens_window_start(const kl_tokens *t, int64_t context, uint64_t seed, int64_t index)
{
    kl_check(context >= 1 && t->count >= context + 1 && index >= 0);
    /* Starts 0 .. count - context - 1: a multiply-shift maps 64 random bits
     * onto the range (bias below 2^-20 for any file under 2^44 tokens). */
    uint64_t starts = (uint64_t)(t->count - context);
    uint64_t r = kl_mix(kl_mix(seed ^ 0x746f6b656e73ull) ^ (uint64_t)index);
    return (int64_t)(((unsigned __int128)r * starts) >> 64);
}

int kl_tokens_read(const kl_tokens *t, int64_t first, int64_t n, int32_t *out, char *why, size_t why_len)
{
    kl_check(first >= 0 && n >= 0 && first + n <= t->count);
    /* In chunks through a small buffer: the bytes, then the tokens. */
    uint8_t buf[4096];
    int64_t per = (int64_t)sizeof buf / t->dtype_bytes;
    for (int64_t done = 0; done < n;) {
        int64_t k = n - done < per ? n - done : per;
        size_t want = (size_t)(k * t->dtype_bytes);
        off_t at = (off_t)(KL_TOKENS_HEADER + (first + done) * t->dtype_bytes);
        size_t got = 0;
        while (got < want) {
            ssize_t r = pread(t->fd, buf + got, want - got, at + (off_t)got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                struct stat st;
                long long now = fstat(t->fd, &st) ? -1 : (long long)st.st_size;
                if (r < 0)
                    snprintf(why, why_len, "%s: reading tokens: %s", t->path, strerror(errno));
                else
                    snprintf(why, why_len,
                             "%s: the token file changed while the run reads it: it now holds %lld bytes, it held "
                             "%zu when opened (truncated or rewritten in place? write a new file and rename it)",
                             t->path, now, t->map_len);
                return -1;
            }
            got += (size_t)r;
        }
        kl_tokens c = {.data = buf, .dtype_bytes = t->dtype_bytes};
        for (int64_t i = 0; i < k; i++)
            out[done + i] = (int32_t)kl_tokens_get(&c, i);
        done += k;
    }
    return 0;
}

int kl_tokens_window(const kl_tokens *t, int64_t context, uint64_t seed, int64_t index, int32_t *out)
{
    char why[600];
    if (kl_tokens_read(t, kl_tokens_window_start(t, context, seed, index), context + 1, out, why, sizeof why)) {
        kl_error("%s", why);
        return -1;
    }
    return 0;
}

int64_t kl_tokens_eval_windows(const kl_tokens *t, int64_t context)
{
    return context >= 1 && t->count > 0 ? (t->count - 1) / context : 0;
}

int kl_tokens_write(const char *path, int dtype_bytes, uint64_t vocab, const void *tokens, int64_t count)
{
    kl_check(dtype_bytes == 1 || dtype_bytes == 2 || dtype_bytes == 4);
    kl_check(vocab >= 1 && vocab <= (uint64_t)1 << (8 * dtype_bytes) && count >= 0);
    uint32_t code = dtype_bytes == 4 ? 3 : (uint32_t)dtype_bytes;
    if (count && max_token(tokens, count, dtype_bytes) >= vocab)
        kl_panic("token %u >= vocabulary %llu", max_token(tokens, count, dtype_bytes), (unsigned long long)vocab);
    uint8_t h[KL_TOKENS_HEADER] = {0};
    memcpy(h, KL_TOKENS_MAGIC, 8);
    put_u32(h + 8, KL_TOKENS_VERSION);
    put_u32(h + 12, code);
    put_u64(h + 16, (uint64_t)count);
    put_u64(h + 24, vocab);
    put_u64(h + 32, kl_hash_bytes(KL_HASH_INIT, tokens, (size_t)count * (size_t)dtype_bytes));
    kl_outfile o;
    if (kl_outfile_begin(&o, path))
        return -1;
    kl_outfile_write(&o, h, sizeof h);
    kl_outfile_write(&o, tokens, (size_t)count * (size_t)dtype_bytes);
    return kl_outfile_commit(&o, 0666);
}
