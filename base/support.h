/* Small helpers every stage uses: checked allocation, growable arrays,
 * a string builder, an arena, source files and user diagnostics.
 *
 * Two kinds of error (STYLE.md): a user's mistake is reported with
 * kl_error_at() as file:line:col with the line and a caret, and the caller
 * returns failure; an internal bug is kl_panic(), which aborts loudly and
 * names the broken invariant. */
#ifndef KILN_SUPPORT_H
#define KILN_SUPPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define KL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define KL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define KL_NORETURN __attribute__((noreturn))

void *kl_xmalloc(size_t n);
void *kl_xcalloc(size_t count, size_t n);
void *kl_xrealloc(void *p, size_t n);
char *kl_xstrdup(const char *s);
char *kl_xstrndup(const char *s, size_t n);
char *kl_xasprintf(const char *fmt, ...) KL_PRINTF(1, 2);

/* Sizes of big allocations (tensors, arenas, data sets) are checked
 * before anything is allocated, in one place: a size too large is a
 * user's error with a hint, not an out-of-memory abort.
 * kl_size_mul: a * b, or -1 when either is negative or the product
 * overflows int64. kl_machine_memory: the machine's physical memory in
 * bytes. kl_check_alloc: 0 when bytes (-1: an overflow) fit in limit, or
 * in the machine's memory when limit <= 0; else prints "WHAT needs ...,
 * more than ..." with "---> HINT" under it and returns -1. */
int64_t kl_size_mul(int64_t a, int64_t b);
int64_t kl_machine_memory(void);
int kl_check_alloc(const char *what, int64_t bytes, int64_t limit, const char *hint);
/* A size in bytes for people: "3.14 GB". */
void kl_format_bytes(char *out, size_t n, int64_t bytes);

/* Opens a file for reading when it is a regular file: a FIFO or a
 * device would block or never end, a folder cannot be read. Returns the
 * descriptor, or -1 with why (e.g. "not a regular file (a FIFO)"). */
int kl_open_regular(const char *path, char *why, size_t n);

KL_NORETURN void kl_panic_at(const char *file, int line, const char *fmt, ...) KL_PRINTF(3, 4);
#define kl_panic(...) kl_panic_at(__FILE__, __LINE__, __VA_ARGS__)
/* An invariant that holds in every build (not compiled out by NDEBUG). */
#define kl_check(cond) \
    do { if (!(cond)) kl_panic("invariant broken: %s", #cond); } while (0)

/* Growable array: struct { T *v; int n, cap; }. */
#define KL_VEC(T) struct { T *v; int n, cap; }
#define kl_vec_push(vec, x)                                                    \
    do {                                                                       \
        if ((vec).n == (vec).cap) {                                            \
            (vec).cap = (vec).cap ? 2 * (vec).cap : 8;                         \
            (vec).v = kl_xrealloc((vec).v, (size_t)(vec).cap * sizeof(*(vec).v)); \
        }                                                                      \
        (vec).v[(vec).n++] = (x);                                              \
    } while (0)
#define kl_vec_free(vec) do { free((vec).v); (vec).v = NULL; (vec).n = (vec).cap = 0; } while (0)

/* String builder; s is always NUL-terminated once anything was appended. */
typedef struct kl_buf {
    char *s;
    size_t len, cap;
} kl_buf;
void kl_buf_putc(kl_buf *b, char c);
void kl_buf_puts(kl_buf *b, const char *s);
void kl_buf_putn(kl_buf *b, const char *s, size_t n);
void kl_buf_printf(kl_buf *b, const char *fmt, ...) KL_PRINTF(2, 3);
void kl_buf_vprintf(kl_buf *b, const char *fmt, va_list ap);
/* Returns the string and resets the builder (the caller frees it). */
char *kl_buf_take(kl_buf *b);
void kl_buf_free(kl_buf *b);
/* Shortest decimal that reads back as the same double. */
void kl_buf_put_double(kl_buf *b, double x);
/* s as a JSON string, quotes included: '"' and '\\' escaped, control
 * bytes as \u00XX; a NULL s is the empty string. */
void kl_buf_put_json_str(kl_buf *b, const char *s);
/* The same, written to f. */
void kl_fput_json_str(FILE *f, const char *s);

/* Bump allocator: many small objects freed at once (AST, lowering scopes). */
typedef struct kl_arena_chunk kl_arena_chunk;
typedef struct kl_arena {
    kl_arena_chunk *head;
} kl_arena;
void *kl_arena_alloc(kl_arena *a, size_t n); /* zeroed */
char *kl_arena_strdup(kl_arena *a, const char *s);
char *kl_arena_strndup(kl_arena *a, const char *s, size_t n);
void kl_arena_free(kl_arena *a);

/* A source text: a model file or an IR dump. The text is NUL-terminated
 * and len counts every byte read, so a NUL inside a file is seen. */
typedef struct kl_source {
    char *name;
    char *text;
    size_t len;
} kl_source;
typedef struct kl_loc {
    int line, col; /* 1-based; 0 when unknown */
} kl_loc;

/* Reads a whole file; on failure prints "NAME: error: why" and returns -1. */
int kl_source_read(kl_source *src, const char *path);
/* The same without the message (errno says why). */
int kl_source_read_quiet(kl_source *src, const char *path);
void kl_source_from_string(kl_source *src, const char *name, const char *text);
void kl_source_free(kl_source *src);

/* Where diagnostics go (stderr unless a test redirects them). */
void kl_diag_set_stream(FILE *f);
FILE *kl_diag_stream(void);
/* file:line:col: error: message, then the source line and a caret. */
void kl_error_at(const kl_source *src, kl_loc loc, const char *fmt, ...) KL_PRINTF(3, 4);
void kl_verror_at(const kl_source *src, kl_loc loc, const char *fmt, va_list ap);
void kl_note_at(const kl_source *src, kl_loc loc, const char *fmt, ...) KL_PRINTF(3, 4);
/* An error with no location: "kiln: error: message". */
void kl_error(const char *fmt, ...) KL_PRINTF(1, 2);
/* Writes s with control bytes other than newline and tab (an ANSI escape
 * in a tensor name from a file) as \xHH. kl_error and kl_error_at print
 * their whole message through it. */
void kl_fputs_escaped(const char *s, FILE *out);
/* fprintf through kl_fputs_escaped: for every warning, note and listing
 * that prints a name from a file (tensor, shard member, manifest string,
 * path). The format's own text is printed as is but for control bytes,
 * so ordinary output is unchanged. */
void kl_fprintf_escaped(FILE *out, const char *fmt, ...) KL_PRINTF(2, 3);
void kl_vfprintf_escaped(FILE *out, const char *fmt, va_list ap);

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): for intervals. */
double kl_now(void);

/* FNV-1a, 64 bits: for cache keys and checksums of plans, not security. */
uint64_t kl_hash_bytes(uint64_t h, const void *p, size_t n);
#define KL_HASH_INIT 0xcbf29ce484222325ull

#endif
