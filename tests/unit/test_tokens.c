/* Token files (runtime/data/tokens.h): the header's bytes, a round trip per
 * dtype, every way a file can be broken (each with its message naming the
 * file), and the windows: in range, a function of (seed, index) alone,
 * pinned to known values so that a resumed run keeps drawing what the
 * interrupted one would have. */
#define _GNU_SOURCE
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/support.h"
#include "runtime/data/tokens.h"

static char dir[64];

static char *tmp_path(const char *name)
{
    return kl_xasprintf("%s/%s", dir, name);
}

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n + 1);
    assert_int_equal(fread(p, 1, *n, f), *n);
    fclose(f);
    return p;
}

static void write_all(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Opens path expecting failure; returns the diagnostics (caller frees). */
static char *open_fails(const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kl_diag_set_stream(f);
    kl_tokens t;
    int rc = kl_tokens_open(path, &t);
    kl_diag_set_stream(NULL);
    fclose(f);
    assert_int_equal(rc, -1);
    return buf;
}

static void expect_error(const char *path, const char *want)
{
    char *msg = open_fails(path);
    if (!strstr(msg, path) || !strstr(msg, want))
        fail_msg("expected '%s' naming %s, got: %s", want, path, msg);
    free(msg);
}

static void test_header_bytes(void **state)
{
    (void)state;
    char *p = tmp_path("h.tok");
    const uint8_t tok[5] = {'h', 'e', 'l', 'l', 'o'};
    assert_int_equal(kl_tokens_write(p, 1, 256, tok, 5), 0);
    size_t n;
    uint8_t *b = read_all(p, &n);
    assert_int_equal(n, 48 + 5);
    static const uint8_t want[40] = {'K', 'I', 'L', 'N', 'T', 'O', 'K', 0, 1, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0,
                                     0,   0,   0,   0,   0,   1,   0,   0, 0, 0, 0, 0};
    assert_memory_equal(b, want, 32);
    /* FNV-1a 64 of "hello", little-endian. */
    uint64_t sum = 0;
    for (int i = 0; i < 8; i++)
        sum |= (uint64_t)b[32 + i] << (8 * i);
    assert_true(sum == 0xa430d84680aabd0bull);
    assert_memory_equal(b + 48, "hello", 5);
    free(b);
    free(p);
}

static void test_round_trip(void **state)
{
    (void)state;
    static const int sizes[3] = {1, 2, 4};
    for (int s = 0; s < 3; s++) {
        int bytes = sizes[s];
        uint64_t vocab = bytes == 1 ? 256 : bytes == 2 ? 50257 : 100000;
        int64_t n = 1000;
        uint8_t *raw = calloc((size_t)n, (size_t)bytes);
        for (int64_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)((i * 7919) % (int64_t)vocab);
            for (int k = 0; k < bytes; k++)
                raw[i * bytes + k] = (uint8_t)(v >> (8 * k));
        }
        char *p = tmp_path("rt.tok");
        assert_int_equal(kl_tokens_write(p, bytes, vocab, raw, n), 0);
        kl_tokens t;
        assert_int_equal(kl_tokens_open(p, &t), 0);
        assert_int_equal(t.count, n);
        assert_int_equal(t.dtype_bytes, bytes);
        assert_true(t.vocab == vocab);
        for (int64_t i = 0; i < n; i++)
            assert_int_equal(kl_tokens_get(&t, i), (i * 7919) % (int64_t)vocab);
        kl_tokens_close(&t);
        free(raw);
        free(p);
    }
}

/* A valid u8 file of 100 tokens, then one change to its bytes. */
static char *broken(const char *name, void (*edit)(uint8_t *b, size_t *n))
{
    uint8_t tok[100];
    for (int i = 0; i < 100; i++)
        tok[i] = (uint8_t)(i * 3);
    char *p = tmp_path(name);
    assert_int_equal(kl_tokens_write(p, 1, 256, tok, 100), 0);
    size_t n;
    uint8_t *b = read_all(p, &n);
    b = realloc(b, n + 16);
    edit(b, &n);
    write_all(p, b, n);
    free(b);
    return p;
}

static void cut(uint8_t *b, size_t *n) { (void)b; *n -= 1; }
static void cut_header(uint8_t *b, size_t *n) { (void)b; *n = 20; }
static void extra(uint8_t *b, size_t *n) { b[(*n)++] = 0; b[(*n)++] = 0; }
static void flip_token(uint8_t *b, size_t *n) { (void)n; b[48 + 50] ^= 1; }
static void bad_magic(uint8_t *b, size_t *n) { (void)n; memcpy(b, "GPT2TOKS", 8); }
static void version2(uint8_t *b, size_t *n) { (void)n; b[8] = 2; }
static void dtype7(uint8_t *b, size_t *n) { (void)n; b[12] = 7; }
static void count_big(uint8_t *b, size_t *n) { (void)n; b[16] = 200; }
static void reserved(uint8_t *b, size_t *n) { (void)n; b[44] = 1; }

static void test_broken_files(void **state)
{
    (void)state;
    struct { const char *name; void (*edit)(uint8_t *, size_t *); const char *want; } cases[] = {
        {"cut.tok", cut, "truncated: the header announces 100 tokens (148 bytes) but the file holds 147"},
        {"cuthead.tok", cut_header, "truncated token file: 20 bytes, shorter than the 48-byte header"},
        {"extra.tok", extra, "corrupt: 2 bytes after the 100 tokens the header announces"},
        {"flip.tok", flip_token, "checksum mismatch"},
        {"magic.tok", bad_magic, "not a Kiln token file"},
        {"v2.tok", version2, "token file version 2, this Kiln reads version 1"},
        {"dtype.tok", dtype7, "dtype code 7"},
        {"count.tok", count_big, "truncated: the header announces 200 tokens"},
        {"reserved.tok", reserved, "the reserved field is not 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = broken(cases[i].name, cases[i].edit);
        expect_error(p, cases[i].want);
        free(p);
    }
    char *missing = tmp_path("missing.tok");
    expect_error(missing, "cannot open: No such file or directory");
    free(missing);
    expect_error(dir, "not a regular file (a folder)");
}

/* A token beyond the vocabulary with a checksum that matches: the range
 * check, not the checksum, must catch it. */
static void test_token_out_of_range(void **state)
{
    (void)state;
    uint8_t tok[4] = {1, 2, 200, 3};
    char *p = tmp_path("range.tok");
    assert_int_equal(kl_tokens_write(p, 1, 256, tok, 4), 0);
    size_t n;
    uint8_t *b = read_all(p, &n);
    b[24] = 100; /* vocab 100 (was 256: 0x100) */
    b[25] = 0;
    write_all(p, b, n);
    expect_error(p, "token 200 is out of range for the vocabulary of 100");
    free(b);
    free(p);
}

static kl_tokens open_counting(int64_t n, const char *name)
{
    uint8_t *tok = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        tok[i] = (uint8_t)(i % 251);
    char *p = tmp_path(name);
    assert_int_equal(kl_tokens_write(p, 1, 256, tok, n), 0);
    kl_tokens t;
    assert_int_equal(kl_tokens_open(p, &t), 0);
    free(tok);
    free(p);
    return t;
}

static void test_windows(void **state)
{
    (void)state;
    kl_tokens t = open_counting(1000, "w.tok");
    int64_t context = 10;
    assert_int_equal(kl_tokens_check_context(&t, context), 0);
    /* In range, covering both ends, and holding the file's tokens. */
    bool low = false, high = false;
    int32_t win[11];
    for (int64_t i = 0; i < 20000; i++) {
        int64_t s = kl_tokens_window_start(&t, context, 42, i);
        assert_true(s >= 0 && s <= 1000 - 11);
        low |= s < 10;
        high |= s > 1000 - 11 - 10;
        if (i < 100) {
            kl_tokens_window(&t, context, 42, i, win);
            for (int k = 0; k <= context; k++)
                assert_int_equal(win[k], (s + k) % 251);
        }
    }
    assert_true(low && high);
    /* A function of (seed, index) alone: a second file handle (a resumed
     * run) draws the same, a different seed draws differently. */
    kl_tokens u = open_counting(1000, "w2.tok");
    int same = 0;
    for (int64_t i = 500; i < 600; i++) {
        assert_int_equal(kl_tokens_window_start(&t, context, 42, i), kl_tokens_window_start(&u, context, 42, i));
        same += kl_tokens_window_start(&t, context, 42, i) == kl_tokens_window_start(&t, context, 43, i);
    }
    assert_true(same < 10);
    /* Known values (computed independently in Python from the formula in
     * tokens.c): changing the draw would change every resumed run. */
    int64_t got[4];
    for (int i = 0; i < 4; i++)
        got[i] = kl_tokens_window_start(&t, context, 1, i);
    print_message("window starts (seed 1): %lld %lld %lld %lld\n", (long long)got[0], (long long)got[1],
                  (long long)got[2], (long long)got[3]);
    static const int64_t known[4] = {82, 42, 92, 705};
    assert_memory_equal(got, known, sizeof got);
    /* Evaluation windows: (1000 - 1) / 10, the last one ends at token 990. */
    assert_int_equal(kl_tokens_eval_windows(&t, context), 99);
    kl_tokens_close(&u);
    kl_tokens_close(&t);
}

static void test_context_too_long(void **state)
{
    (void)state;
    kl_tokens t = open_counting(10, "short.tok");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kl_diag_set_stream(f);
    int rc = kl_tokens_check_context(&t, 10);
    kl_diag_set_stream(NULL);
    fclose(f);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(buf, "short.tok: 10 tokens, too few for one window of context 10 + 1"));
    assert_int_equal(kl_tokens_check_context(&t, 9), 0);
    free(buf);
    kl_tokens_close(&t);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/kiln-tokens-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state)
{
    (void)state;
    return nftw(dir, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_bytes),   cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_broken_files),   cmocka_unit_test(test_token_out_of_range),
        cmocka_unit_test(test_windows),        cmocka_unit_test(test_context_too_long),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
