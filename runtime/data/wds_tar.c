/* Reading WebDataset tar shards with libarchive, and brace expansion of
 * shard patterns. */
#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "wds_tar.h"
#include "base/support.h"

/* ---- brace ranges ---- */

/* The most paths a pattern may name, all its ranges multiplied: counted
 * before any is made, so {0..999999}{0..999999} (1e12) is refused at once
 * instead of filling memory. */
#define KL_SHARD_MAX_PATHS 1000000

typedef struct brace_range {
    const char *open, *close; /* the '{' and '}' */
    long long lo, hi;
    int width;                /* zero-padded width, 0 for none */
} brace_range;

/* Parses the first range of pattern into *r: 1 when there is one, 0 when
 * none, -1 with why. */
static int parse_range(const char *pattern, brace_range *r, char *why, size_t n)
{
    const char *open = strchr(pattern, '{');
    if (!open)
        return 0;
    const char *close = strchr(open, '}');
    if (!close) {
        snprintf(why, n, "an unclosed '{' in the shard pattern");
        return -1;
    }
    char lo_s[32], hi_s[32];
    const char *dots = strstr(open, "..");
    size_t lo_len = dots ? (size_t)(dots - open - 1) : 0, hi_len = dots ? (size_t)(close - dots - 2) : 0;
    if (!dots || dots > close || lo_len == 0 || hi_len == 0 || lo_len >= sizeof lo_s || hi_len >= sizeof hi_s) {
        snprintf(why, n, "'%.*s' is not a range (write {000000..000015})", (int)(close - open + 1), open);
        return -1;
    }
    memcpy(lo_s, open + 1, lo_len);
    lo_s[lo_len] = 0;
    memcpy(hi_s, dots + 2, hi_len);
    hi_s[hi_len] = 0;
    for (const char *p = lo_s; *p; p++)
        if (!isdigit((unsigned char)*p))
            goto bad;
    for (const char *p = hi_s; *p; p++)
        if (!isdigit((unsigned char)*p))
            goto bad;
    errno = 0;
    long long lo = strtoll(lo_s, NULL, 10), hi = strtoll(hi_s, NULL, 10);
    if (errno == ERANGE) {
        snprintf(why, n, "'{%s..%s}': a bound of the range is over 2^63", lo_s, hi_s);
        return -1;
    }
    if (hi < lo) {
        snprintf(why, n, "the range {%s..%s} is empty", lo_s, hi_s);
        return -1;
    }
    *r = (brace_range){open, close, lo, hi, lo_s[0] == '0' && lo_len > 1 ? (int)lo_len : 0};
    return 1;
bad:
    snprintf(why, n, "'{%s..%s}': the bounds of a range are decimal numbers", lo_s, hi_s);
    return -1;
}

/* The count of paths the pattern names (the product of its ranges'
 * lengths, checked), or -1 with why. */
static int64_t pattern_count(const char *pattern, char *why, size_t n)
{
    int64_t count = 1;
    brace_range r;
    int rc;
    for (const char *p = pattern; (rc = parse_range(p, &r, why, n)) == 1; p = r.close + 1)
        count = kl_size_mul(count, r.hi - r.lo < INT64_MAX ? r.hi - r.lo + 1 : -1);
    if (rc < 0)
        return -1;
    if (count < 0 || count > KL_SHARD_MAX_PATHS) {
        char many[32];
        if (count < 0)
            snprintf(many, sizeof many, "more than 2^63 - 1");
        else
            snprintf(many, sizeof many, "%lld", (long long)count);
        snprintf(why, n, "the pattern names %s shards (its ranges multiplied), more than the limit of %d", many,
                 KL_SHARD_MAX_PATHS);
        return -1;
    }
    return count;
}

/* Writes every expansion of pattern (prefix already expanded) to
 * out[*count...]; the caller sized out by pattern_count. */
static void expand_into(const char *prefix, const char *pattern, char **out, int *count)
{
    brace_range r;
    char why[8];
    if (parse_range(pattern, &r, why, sizeof why) != 1) {
        out[(*count)++] = kl_xasprintf("%s%s", prefix, pattern);
        return;
    }
    for (long long i = r.lo; i <= r.hi; i++) {
        char *head = kl_xasprintf("%s%.*s%0*lld", prefix, (int)(r.open - pattern), pattern, r.width, i);
        expand_into(head, r.close + 1, out, count);
        free(head);
    }
}

int kl_shard_expand(const char *pattern, char ***out, char *why, size_t n)
{
    *out = NULL;
    int64_t total = pattern_count(pattern, why, n);
    if (total < 0)
        return -1;
    int count = 0;
    *out = kl_xcalloc((size_t)total, sizeof **out);
    expand_into("", pattern, *out, &count);
    return count;
}

/* ---- samples ---- */

/* The most members one sample may have: a data set uses at most
 * KL_MAX_FIELDS of them, and the duplicate check below is pairwise, so a
 * sample of 100,000 members (a tar of one key) is refused at once instead
 * of taking minutes. */
#define KL_SHARD_MAX_MEMBERS 1024

void kl_raw_sample_free(kl_raw_sample *s)
{
    for (int i = 0; i < s->nmembers; i++) {
        free(s->m[i].field);
        free(s->m[i].data);
    }
    free(s->m);
    free(s->key);
    memset(s, 0, sizeof *s);
}

const kl_member *kl_raw_sample_find(const kl_raw_sample *s, const char *field)
{
    for (int i = 0; i < s->nmembers; i++)
        if (!strcmp(s->m[i].field, field))
            return &s->m[i];
    return NULL;
}

/* ---- libarchive, opened at run time ----
 *
 * As the CUDA libraries are: an executable starts without it, and only
 * reading shards needs it. Linked, every executable (and the GPU kit,
 * tests/gpu/kit.sh) would carry libarchive's chain of libxml2, ICU, lzma,
 * acl and the rest. */
#define LA_FUNCS(X)                                                                                                    \
    X(archive_read_new) \
    X(archive_read_support_format_tar) \
    X(archive_read_support_format_gnutar) \
    X(archive_read_open_fd) \
    X(archive_error_string) \
    X(archive_read_free) \
    X(archive_read_next_header) \
    X(archive_entry_filetype) \
    X(archive_entry_pathname) \
    X(archive_entry_size) \
    X(archive_read_data) \
    X(archive_read_data_skip) \

static struct {
#define X(f) __typeof__(&f) f;
    LA_FUNCS(X)
#undef X
} la;
static pthread_once_t la_once = PTHREAD_ONCE_INIT;
static bool la_ok;
static char la_why[400];

static void la_load(void)
{
    void *h = dlopen("libarchive.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(la_why, sizeof la_why, "%s", dlerror());
        return;
    }
#define X(f)                                                                                                           \
    if (!(la.f = (__typeof__(la.f))dlsym(h, #f))) {                                                                    \
        snprintf(la_why, sizeof la_why, "libarchive.so.13 has no %s", #f);                                            \
        return;                                                                                                        \
    }
    LA_FUNCS(X)
#undef X
    la_ok = true;
}

/* ---- the reader ---- */

/* A member is at most this large: a sample field, not a data set. */
#define MAX_MEMBER ((int64_t)1 << 30)

struct kl_shard_reader {
    struct archive *a;
    int fd;
    int with_data;
    bool done;
    /* The member read past the end of the last sample: the first of the
     * next one. */
    bool have_next;
    char *next_key;
    kl_member next;
};

kl_shard_reader *kl_shard_open(const char *path, int with_data, char *why, size_t n)
{
    /* libarchive opens what it is given; a folder or a device is refused
     * here with the project's own words. */
    int fd = kl_open_regular(path, why, n);
    if (fd < 0)
        return NULL;
    pthread_once(&la_once, la_load);
    if (!la_ok) {
        snprintf(why, n, "reading tar shards needs libarchive (%s)\n---> apt-get install libarchive13", la_why);
        close(fd);
        return NULL;
    }
    kl_shard_reader *r = kl_xcalloc(1, sizeof *r);
    r->with_data = with_data;
    r->fd = fd;
    r->a = la.archive_read_new();
    la.archive_read_support_format_tar(r->a);
    la.archive_read_support_format_gnutar(r->a);
    /* fd's ownership stays here: libarchive reads it, we close it. */
    if (la.archive_read_open_fd(r->a, fd, 1 << 16) != ARCHIVE_OK) {
        snprintf(why, n, "not a tar archive (%s)", la.archive_error_string(r->a));
        la.archive_read_free(r->a);
        close(fd);
        free(r);
        return NULL;
    }
    return r;
}

void kl_shard_close(kl_shard_reader *r)
{
    if (!r)
        return;
    /* archive_read_open_fd does not close the descriptor. */
    la.archive_read_free(r->a);
    close(r->fd);
    free(r->next_key);
    free(r->next.field);
    free(r->next.data);
    free(r);
}

/* Reads the next member into r->next (key and field split): 1, 0 at the
 * end, -1 with why. Folders and links are passed over. */
static int read_member(kl_shard_reader *r, const char *last_member, char *why, size_t n)
{
    for (;;) {
        struct archive_entry *e;
        int rc = la.archive_read_next_header(r->a, &e);
        if (rc == ARCHIVE_EOF)
            return 0;
        if (rc < ARCHIVE_WARN) {
            snprintf(why, n, "truncated or corrupt archive after member %s (%s)", last_member ? last_member : "(none)",
                     la.archive_error_string(r->a));
            return -1;
        }
        if (la.archive_entry_filetype(e) != AE_IFREG)
            continue;
        const char *path = la.archive_entry_pathname(e);
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        const char *dot = strchr(base, '.');
        if (!dot || dot == base || !dot[1]) {
            snprintf(why, n, "member %s: no key and field in its name (WebDataset names members KEY.FIELD, such as 000123.png)",
                     path);
            return -1;
        }
        int64_t size = la.archive_entry_size(e);
        if (size < 0 || size > MAX_MEMBER) {
            snprintf(why, n, "member %s: %lld bytes, over the 1 GiB a sample field may have", path, (long long)size);
            return -1;
        }
        free(r->next_key);
        free(r->next.field);
        free(r->next.data);
        r->next_key = kl_xstrndup(path, (size_t)(dot - path));
        r->next.field = kl_xstrdup(dot + 1);
        r->next.size = (size_t)size;
        r->next.data = NULL;
        if (r->with_data) {
            r->next.data = kl_xmalloc(size ? (size_t)size : 1);
            size_t got = 0;
            while (got < (size_t)size) {
                la_ssize_t k = la.archive_read_data(r->a, r->next.data + got, (size_t)size - got);
                if (k < 0 || k == 0) {
                    snprintf(why, n, "member %s: truncated or corrupt data (%s)", path,
                             k < 0 ? la.archive_error_string(r->a) : "the archive ends inside it");
                    return -1;
                }
                got += (size_t)k;
            }
        } else if (la.archive_read_data_skip(r->a) != ARCHIVE_OK) {
            snprintf(why, n, "member %s: truncated or corrupt data (%s)", path, la.archive_error_string(r->a));
            return -1;
        }
        return 1;
    }
}

int kl_shard_next(kl_shard_reader *r, kl_raw_sample *out, char *why, size_t n)
{
    memset(out, 0, sizeof *out);
    if (r->done)
        return 0;
    if (!r->have_next) {
        int rc = read_member(r, NULL, why, n);
        if (rc <= 0) {
            r->done = true;
            return rc;
        }
        r->have_next = true;
    }
    out->key = r->next_key;
    r->next_key = NULL;
    for (;;) {
        if (out->nmembers == KL_SHARD_MAX_MEMBERS) {
            snprintf(why, n, "member %s.%s: sample %s has more than %d members (a sample is the run of members that "
                     "share a key)", out->key, r->next.field, out->key, KL_SHARD_MAX_MEMBERS);
            kl_raw_sample_free(out);
            r->done = true;
            return -1;
        }
        for (int i = 0; i < out->nmembers; i++)
            if (!strcmp(out->m[i].field, r->next.field)) {
                snprintf(why, n, "member %s.%s: sample %s has field %s twice", out->key, r->next.field, out->key,
                         r->next.field);
                kl_raw_sample_free(out);
                r->done = true;
                return -1;
            }
        out->m = kl_xrealloc(out->m, sizeof *out->m * (size_t)(out->nmembers + 1));
        out->m[out->nmembers++] = r->next;
        memset(&r->next, 0, sizeof r->next);
        char last[600];
        snprintf(last, sizeof last, "%s.%s", out->key, out->m[out->nmembers - 1].field);
        int rc = read_member(r, last, why, n);
        if (rc < 0) {
            kl_raw_sample_free(out);
            r->done = true;
            return -1;
        }
        if (rc == 0) {
            r->done = true;
            r->have_next = false;
            return 1;
        }
        if (strcmp(r->next_key, out->key))
            return 1;
        free(r->next_key);
        r->next_key = NULL;
    }
}
