/* Token files: a sequence of integer tokens for a language model, written
 * by `kiln pack --text` and memory-mapped for training.
 *
 * Layout (all integers little-endian; the format is version 1):
 *
 *   offset  size  field
 *        0     8  magic "KILNTOK\0"
 *        8     4  version (1)
 *       12     4  dtype: 1 = u8, 2 = u16, 3 = u32 (bytes per token 1, 2, 4)
 *       16     8  count: tokens in the file
 *       24     8  vocab: every token is < vocab (256 for byte-level text)
 *       32     8  checksum: FNV-1a 64 (kl_hash_bytes) of the token bytes
 *       40     8  reserved, 0
 *       48        count tokens of the dtype's size
 *
 * The file is exactly 48 + count * size bytes: a shorter one is truncated,
 * a longer one has trailing bytes, and either is refused, as is a wrong
 * checksum or a token >= vocab.
 *
 * Windows: a training sample is context + 1 consecutive tokens (inputs
 * and next-token targets). Sample i of a run with seed s starts at a
 * position drawn from (s, i) alone, uniformly in [0, count - context - 1],
 * so the windows of a step depend only on the seed and the step's sample
 * indices: a resumed run draws exactly the windows an uninterrupted one
 * would. Evaluation uses the fixed, non-overlapping windows j * context. */
#ifndef KILN_TOKENS_H
#define KILN_TOKENS_H

#include <stdint.h>
#include <stddef.h>

#define KL_TOKENS_MAGIC "KILNTOK"
#define KL_TOKENS_VERSION 1
#define KL_TOKENS_HEADER 48

typedef struct kl_tokens {
    char *path;
    int fd;             /* open for kl_tokens_read's pread */
    void *map;          /* the whole file, mapped read-only: valid only
                         * while the file is unchanged (kl_tokens_get);
                         * training reads through kl_tokens_read */
    size_t map_len;
    const uint8_t *data; /* map + KL_TOKENS_HEADER */
    int64_t count;
    int dtype_bytes;    /* 1, 2 or 4 */
    uint64_t vocab;
} kl_tokens;

/* Bytes per token for a dtype code (1, 2, 3), or 0 for another code. */
int kl_tokens_dtype_bytes(uint32_t code);
/* The dtype's name: "u8", "u16", "u32". */
const char *kl_tokens_dtype_name(int dtype_bytes);

/* Maps and validates a token file. Errors name the file and the reason
 * (not a token file, unsupported version or dtype, truncated, trailing
 * bytes, checksum mismatch, a token out of range); returns 0 or -1. */
int kl_tokens_open(const char *path, kl_tokens *t);
void kl_tokens_close(kl_tokens *t);

static inline uint32_t kl_tokens_get(const kl_tokens *t, int64_t i)
{
    const uint8_t *p = t->data + i * t->dtype_bytes;
    switch (t->dtype_bytes) {
    case 1: return p[0];
    case 2: return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    default: return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
}

/* Random windows: 0 when the file holds at least context + 1 tokens, else
 * -1 after an error naming the file and both numbers. */
int kl_tokens_check_context(const kl_tokens *t, int64_t context);
/* The first token of sample `index`'s window for a seed (see above). */
int64_t kl_tokens_window_start(const kl_tokens *t, int64_t context, uint64_t seed, int64_t index);
/* Reads tokens first .. first + n - 1 into out with pread, not through
 * the map: a file truncated while a run reads it (a mapped page past its
 * new end is SIGBUS) gives 0 or -1 with why = the file, its size now and
 * the size it had. */
int kl_tokens_read(const kl_tokens *t, int64_t first, int64_t n, int32_t *out, char *why, size_t why_len);
/* Copies sample `index`'s context + 1 tokens into out; -1 after
 * kl_tokens_read's error. */
int kl_tokens_window(const kl_tokens *t, int64_t context, uint64_t seed, int64_t index, int32_t *out);
/* Evaluation windows: (count - 1) / context of them, window j starting at
 * j * context (its last token is the next window's first). */
int64_t kl_tokens_eval_windows(const kl_tokens *t, int64_t context);

/* Writes a token file at path (whole or not at all: outfile.h) from count
 * tokens of dtype_bytes each, little-endian, as they will be stored; every
 * token must be < vocab. Returns 0, or -1 after an error naming path. */
int kl_tokens_write(const char *path, int dtype_bytes, uint64_t vocab, const void *tokens, int64_t count);

#endif
