/* The token data source's promises (runtime/data/token_data.c through the
 * loader), checked against the file's bytes read here with stdio:
 *   - training sample p of epoch e is the window starting at
 *     kl_tokens_window_start(seed, e * count + p): "tokens" its first
 *     context bytes, "targets" the same shifted by one;
 *   - the same batches with 1 and 3 workers, and an epoch started at
 *     batch k (a resumed run) continues with the whole epoch's batches;
 *   - another epoch and another seed give other windows;
 *   - evaluation: `limit` fixed windows, evenly spaced multiples of the
 *     context from the file's start, the same every time.
 *
 *   token_loader_check FILE.tok CONTEXT   (a u8 token file) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/data.h"
#include "runtime/data/tokens.h"

static int failures;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL: " __VA_ARGS__); printf("\n"); failures++; } } while (0)

/* All batches of epoch e from batch first on: tokens and targets, n samples. */
static int32_t *epoch_batches(const kl_dataset *d, bool train, int workers, uint64_t seed, int64_t e, int64_t first,
                              int64_t batch, int64_t *n)
{
    kl_loader_opts o = {.batch = batch, .shuffle = train, .drop_last = train, .seed = seed, .depth = 3,
                        .workers = workers, .augment_random = train};
    kl_loader *l = kl_loader_new_opts(d, &o);
    kl_loader_start_at(l, e, first);
    int64_t T = d->context, cap = d->count + 1;
    int32_t *out = malloc(sizeof(int32_t) * 2 * T * cap);
    *n = 0;
    const kl_batch *b;
    while ((b = kl_loader_next(l))) {
        for (int64_t i = 0; i < b->size; i++, (*n)++) {
            memcpy(out + (*n * 2) * T, (int32_t *)b->field[0] + i * T, sizeof(int32_t) * T);
            memcpy(out + (*n * 2 + 1) * T, (int32_t *)b->field[1] + i * T, sizeof(int32_t) * T);
        }
        kl_loader_release(l, b);
    }
    kl_loader_free(l);
    return out;
}

/* Sample s (tokens, targets) equals the file's bytes from start on. */
static bool window_is(const int32_t *s, const uint8_t *bytes, int64_t start, int64_t T)
{
    for (int64_t i = 0; i < T; i++)
        if (s[i] != bytes[start + i] || s[T + i] != bytes[start + i + 1])
            return false;
    return true;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: token_loader_check FILE.tok CONTEXT\n");
        return 2;
    }
    int64_t T = atoll(argv[2]), batch = 5;
    FILE *f = fopen(argv[1], "rb");
    if (!f)
        return 2;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 48, SEEK_SET);
    int64_t count = size - 48;
    uint8_t *bytes = malloc((size_t)count);
    if (fread(bytes, 1, (size_t)count, f) != (size_t)count)
        return 2;
    fclose(f);

    kl_dataset d;
    if (kl_tokens_dataset(argv[1], T, true, 0, &d))
        return 1;
    d.field[0].used = d.field[1].used = true;
    CHECK(d.count == (count - 1) / T, "train: %lld windows per epoch, expected %lld", (long long)d.count,
          (long long)((count - 1) / T));
    int64_t n1, n3, nr, n2, ns;
    int32_t *e1 = epoch_batches(&d, true, 1, 11, 1, 0, batch, &n1);
    int32_t *e3 = epoch_batches(&d, true, 3, 11, 1, 0, batch, &n3);
    int32_t *res = epoch_batches(&d, true, 2, 11, 1, 3, batch, &nr);
    int32_t *e0 = epoch_batches(&d, true, 1, 11, 0, 0, batch, &n2);
    int32_t *s0 = epoch_batches(&d, true, 1, 12, 1, 0, batch, &ns);
    CHECK(n1 == d.count / batch * batch, "epoch: %lld samples, expected %lld", (long long)n1,
          (long long)(d.count / batch * batch));
    int bad = 0;
    for (int64_t p = 0; p < n1; p++) {
        int64_t start = kl_tokens_window_start(d.tokens, T, 11, d.count + p);
        bad += !window_is(e1 + p * 2 * T, bytes, start, T);
    }
    CHECK(bad == 0, "%d of %lld training samples are not the file's window at their drawn start", bad, (long long)n1);
    CHECK(n3 == n1 && !memcmp(e1, e3, sizeof(int32_t) * 2 * T * n1), "3 workers give other batches than 1");
    CHECK(nr == n1 - 3 * batch && !memcmp(e1 + 3 * batch * 2 * T, res, sizeof(int32_t) * 2 * T * nr),
          "an epoch started at batch 3 differs from the whole epoch's batches from 3 on");
    CHECK(memcmp(e0, e1, sizeof(int32_t) * 2 * T * n1), "epochs 0 and 1 draw the same windows");
    CHECK(memcmp(s0, e1, sizeof(int32_t) * 2 * T * n1), "seeds 11 and 12 draw the same windows");
    printf("ok: %lld training windows of %lld + 1 tokens per epoch: tokens and targets as in the file, the same for "
           "1 and 3 workers and from batch 3 on, other windows for another epoch or seed\n",
           (long long)n1, (long long)T);
    free(e1), free(e3), free(res), free(e0), free(s0);
    kl_dataset_free(&d);

    /* Evaluation: 7 evenly spaced windows out of (count - 1) / T. */
    int64_t limit = 7, W = (count - 1) / T;
    if (kl_tokens_dataset(argv[1], T, false, limit, &d))
        return 1;
    d.field[0].used = d.field[1].used = true;
    int64_t ne, ne2;
    int32_t *ev = epoch_batches(&d, false, 2, 11, 0, 0, 3, &ne);
    int32_t *ev2 = epoch_batches(&d, false, 1, 99, 4, 0, 3, &ne2);
    CHECK(ne == limit, "evaluation: %lld windows, expected %lld", (long long)ne, (long long)limit);
    bad = 0;
    for (int64_t j = 0; j < ne; j++)
        bad += !window_is(ev + j * 2 * T, bytes, (j * W / limit) * T, T);
    CHECK(bad == 0, "%d evaluation windows are not at (j * %lld / %lld) * %lld", bad, (long long)W, (long long)limit,
          (long long)T);
    CHECK(ne2 == ne && !memcmp(ev, ev2, sizeof(int32_t) * 2 * T * ne), "evaluation windows depend on seed or epoch");
    printf("ok: %lld evaluation windows at evenly spaced multiples of %lld, the same for any seed and epoch\n",
           (long long)ne, (long long)T);
    free(ev), free(ev2);
    kl_dataset_free(&d);
    free(bytes);
    return failures ? 1 : 0;
}
