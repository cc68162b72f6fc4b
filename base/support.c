/* The helpers of support.h: checked allocation and sizes (kl_x*,
 * kl_size_mul, kl_check_alloc against the machine's memory), opening a
 * regular file, the string builder, the arena, source files, user
 * diagnostics with the offending line and a caret (control characters
 * escaped), kl_panic, the monotonic clock and the FNV-1a hash. */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void *kl_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        kl_panic("out of memory allocating %zu bytes", n);
    return p;
}

void *kl_xcalloc(size_t count, size_t n)
{
    void *p = calloc(count ? count : 1, n ? n : 1);
    if (!p)
        kl_panic("out of memory allocating %zu x %zu bytes", count, n);
    return p;
}

void *kl_xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        kl_panic("out of memory reallocating %zu bytes", n);
    return p;
}

char *kl_xstrdup(const char *s)
{
    return kl_xstrndup(s, strlen(s));
}

char *kl_xstrndup(const char *s, size_t n)
{
    char *d = kl_xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *kl_xasprintf(const char *fmt, ...)
{
    kl_buf b = {0};
    va_list ap;
    va_start(ap, fmt);
    kl_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    return kl_buf_take(&b);
}

int64_t kl_size_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
        return -1;
    return r;
}

int64_t kl_machine_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    int64_t bytes = kl_size_mul(pages, size);
    return bytes > 0 ? bytes : INT64_MAX;
}

void kl_format_bytes(char *out, size_t n, int64_t bytes)
{
    static const char *const unit[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
    double x = (double)bytes;
    int u = 0;
    while (x >= 1000 && u + 1 < (int)KL_ARRAY_LEN(unit)) {
        x /= 1000;
        u++;
    }
    snprintf(out, n, u ? "%.2f %s" : "%.0f %s", x, unit[u]);
}

int kl_check_alloc(const char *what, int64_t bytes, int64_t limit, const char *hint)
{
    int64_t machine = kl_machine_memory();
    bool own = limit <= 0;
    if (own)
        limit = machine;
    if (bytes >= 0 && bytes <= limit)
        return 0;
    char need[32], have[32];
    kl_format_bytes(have, sizeof have, limit);
    if (bytes < 0)
        snprintf(need, sizeof need, "more than 9.2 EB");
    else
        kl_format_bytes(need, sizeof need, bytes);
    kl_error("%s needs %s, more than %s (%s)\n---> %s", what, need, own ? "the machine's memory" : "the memory limit",
             have, hint);
    return -1;
}

int kl_open_regular(const char *path, char *why, size_t n)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, n, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        snprintf(why, n, "cannot open: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        const char *kind = S_ISDIR(st.st_mode)    ? "a folder"
                           : S_ISFIFO(st.st_mode) ? "a FIFO"
                           : S_ISCHR(st.st_mode)  ? "a character device"
                           : S_ISBLK(st.st_mode)  ? "a block device"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                                                  : "not a plain file";
        snprintf(why, n, "not a regular file (%s)", kind);
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

void kl_panic_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "kiln: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

/* ---- string builder ---- */

static void buf_reserve(kl_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    b->s = kl_xrealloc(b->s, cap);
    b->cap = cap;
}

void kl_buf_putn(kl_buf *b, const char *s, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void kl_buf_putc(kl_buf *b, char c)
{
    kl_buf_putn(b, &c, 1);
}

void kl_buf_puts(kl_buf *b, const char *s)
{
    kl_buf_putn(b, s, strlen(s));
}

void kl_buf_put_json_str(kl_buf *b, const char *s)
{
    kl_buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            kl_buf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            kl_buf_printf(b, "\\u%04x", *p);
        else
            kl_buf_putc(b, (char)*p);
    }
    kl_buf_putc(b, '"');
}

void kl_fput_json_str(FILE *f, const char *s)
{
    kl_buf b = {0};
    kl_buf_put_json_str(&b, s);
    fputs(b.s, f);
    kl_buf_free(&b);
}

void kl_buf_vprintf(kl_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    kl_check(n >= 0);
    buf_reserve(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void kl_buf_printf(kl_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

char *kl_buf_take(kl_buf *b)
{
    char *s = b->s ? b->s : kl_xstrdup("");
    b->s = NULL;
    b->len = b->cap = 0;
    return s;
}

void kl_buf_free(kl_buf *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

void kl_buf_put_double(kl_buf *b, double x)
{
    char tmp[64];
    if (x != x) {
        kl_buf_puts(b, "nan");
        return;
    }
    if (x == 1.0 / 0.0 || x == -1.0 / 0.0) {
        kl_buf_puts(b, x > 0 ? "inf" : "-inf");
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, x);
        if (strtod(tmp, NULL) == x)
            break;
    }
    /* Keep a float recognisable as a float when it reads back. */
    if (!strpbrk(tmp, ".eEn"))
        strcat(tmp, ".0");
    kl_buf_puts(b, tmp);
}

/* ---- arena ---- */

struct kl_arena_chunk {
    kl_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *kl_arena_alloc(kl_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    kl_arena_chunk *c = a->head;
    if (!c || c->used + n > c->cap) {
        size_t cap = n > 16384 ? n : 16384;
        c = kl_xmalloc(sizeof *c + cap);
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *kl_arena_strndup(kl_arena *a, const char *s, size_t n)
{
    char *d = kl_arena_alloc(a, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *kl_arena_strdup(kl_arena *a, const char *s)
{
    return kl_arena_strndup(a, s, strlen(s));
}

void kl_arena_free(kl_arena *a)
{
    kl_arena_chunk *c = a->head;
    while (c) {
        kl_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

/* ---- sources and diagnostics ---- */

/* Reads a whole regular file; -1 with why on failure. */
static int source_read(kl_source *src, const char *path, char *why, size_t n)
{
    memset(src, 0, sizeof *src);
    int fd = kl_open_regular(path, why, n);
    if (fd < 0)
        return -1;
    /* Read whole: a file past the machine's memory (a sparse 1 TB
     * safetensors file) is refused before a byte is buffered. */
    struct stat st;
    if (!fstat(fd, &st) && st.st_size > kl_machine_memory()) {
        char size[32], have[32];
        kl_format_bytes(size, sizeof size, st.st_size);
        kl_format_bytes(have, sizeof have, kl_machine_memory());
        snprintf(why, n, "the file is %s, more than the machine's memory (%s), and is read whole", size, have);
        close(fd);
        return -1;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        snprintf(why, n, "cannot open: %s", strerror(errno));
        close(fd);
        return -1;
    }
    kl_buf b = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        kl_buf_putn(&b, chunk, got);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        kl_buf_free(&b);
        snprintf(why, n, "read error");
        return -1;
    }
    src->name = kl_xstrdup(path);
    src->len = b.len;
    src->text = kl_buf_take(&b);
    return 0;
}

int kl_source_read(kl_source *src, const char *path)
{
    char why[256];
    if (source_read(src, path, why, sizeof why) == 0)
        return 0;
    kl_error("%s: %s", path, why);
    return -1;
}

int kl_source_read_quiet(kl_source *src, const char *path)
{
    char why[256];
    return source_read(src, path, why, sizeof why);
}

void kl_source_from_string(kl_source *src, const char *name, const char *text)
{
    src->name = kl_xstrdup(name);
    src->text = kl_xstrdup(text);
    src->len = strlen(src->text);
}

void kl_source_free(kl_source *src)
{
    free(src->name);
    free(src->text);
    memset(src, 0, sizeof *src);
}

static FILE *diag_stream;

void kl_diag_set_stream(FILE *f)
{
    diag_stream = f;
}

FILE *kl_diag_stream(void)
{
    return diag_stream ? diag_stream : stderr;
}

/* Length of the well-formed UTF-8 sequence at p (before e) that encodes a
 * printable character beyond ASCII, or 0. */
static int utf8_char_len(const unsigned char *p, const unsigned char *e)
{
    int n = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : 0;
    if (!n || e - p < n)
        return 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    uint32_t c = n == 2 ? (p[0] & 0x1fu) : n == 3 ? (p[0] & 0x0fu) : (p[0] & 0x07u);
    for (int i = 1; i < n; i++)
        c = c << 6 | (p[i] & 0x3fu);
    bool ok = c >= 0xa0 && !(c >= 0xd800 && c <= 0xdfff) && c <= 0x10ffff &&
              (n != 3 || c >= 0x800) && (n != 4 || c >= 0x10000);
    return ok ? n : 0;
}

/* Prints the source line of loc with a caret under the column. Tabs in the
 * line are kept in the caret line so the caret lines up. Control bytes and
 * bytes that are not UTF-8 text (a binary file) print as '?', and a UTF-8
 * character takes one column in the caret line, though several bytes. */
static void show_line(FILE *out, const kl_source *src, kl_loc loc)
{
    if (!src || !src->text || loc.line <= 0)
        return;
    const char *p = src->text, *end = src->text + src->len;
    for (int l = 1; l < loc.line && p < end; p++)
        if (*p == '\n')
            l++;
    if (p >= end && loc.line > 1)
        return;
    const char *e = p;
    while (e < end && *e != '\n')
        e++;
    if (e > p && e[-1] == '\r')
        e--;
    if (e == p)
        return; /* an empty line: nothing to point at */
    const unsigned char *line = (const unsigned char *)p, *lend = (const unsigned char *)e;
    const unsigned char *at = line + (loc.col > 1 ? loc.col - 1 : 0);
    kl_buf text = {0}, caret = {0};
    for (const unsigned char *q = line; q < lend;) {
        int n = *q >= 0x80 ? utf8_char_len(q, lend) : 1;
        bool printable = *q == '\t' || (*q >= 32 && *q < 127) || n > 1;
        if (printable)
            kl_buf_putn(&text, (const char *)q, (size_t)n);
        else
            kl_buf_putc(&text, '?');
        if (q < at)
            kl_buf_putc(&caret, *q == '\t' ? '\t' : ' ');
        q += n ? n : 1;
    }
    fprintf(out, "  %s\n  %s^\n", text.s, caret.s ? caret.s : "");
    kl_buf_free(&text);
    kl_buf_free(&caret);
}

void kl_fputs_escaped(const char *s, FILE *out)
{
    /* One write: stderr is unbuffered, and a byte at a time would let the
     * lines of several ranks (or runs) sharing a terminal interleave. */
    kl_buf b = {0};
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p < 32 && *p != '\n' && *p != '\t') || *p == 127)
            kl_buf_printf(&b, "\\x%02x", *p);
        else
            kl_buf_putn(&b, (const char *)p, 1);
    }
    if (b.len)
        fwrite(b.s, 1, b.len, out);
    kl_buf_free(&b);
}

/* fmt's text with control bytes escaped: names from files reach no
 * terminal as escape sequences. */
static void vput_escaped(FILE *out, const char *fmt, va_list ap)
{
    kl_buf b = {0};
    kl_buf_vprintf(&b, fmt, ap);
    kl_fputs_escaped(b.s ? b.s : "", out);
    kl_buf_free(&b);
}

void kl_vfprintf_escaped(FILE *out, const char *fmt, va_list ap)
{
    vput_escaped(out, fmt, ap);
}

void kl_fprintf_escaped(FILE *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vput_escaped(out, fmt, ap);
    va_end(ap);
}

static void vreport(const char *kind, const kl_source *src, kl_loc loc, const char *fmt, va_list ap)
{
    FILE *out = kl_diag_stream();
    const char *name = src && src->name ? src->name : "kiln";
    if (loc.line > 0)
        fprintf(out, "%s:%d:%d: %s: ", name, loc.line, loc.col, kind);
    else
        fprintf(out, "%s: %s: ", name, kind);
    vput_escaped(out, fmt, ap);
    fputc('\n', out);
    show_line(out, src, loc);
}

void kl_verror_at(const kl_source *src, kl_loc loc, const char *fmt, va_list ap)
{
    vreport("error", src, loc, fmt, ap);
}

void kl_error_at(const kl_source *src, kl_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("error", src, loc, fmt, ap);
    va_end(ap);
}

void kl_note_at(const kl_source *src, kl_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport("note", src, loc, fmt, ap);
    va_end(ap);
}

void kl_error(const char *fmt, ...)
{
    va_list ap;
    FILE *out = kl_diag_stream();
    fputs("kiln: error: ", out);
    va_start(ap, fmt);
    vput_escaped(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
}

double kl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t kl_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
