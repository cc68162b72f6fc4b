/* The shard loader's promises, checked on shards whose .cls label is the
 * sample's number (0 to N-1):
 *   - every sample exactly once per epoch (drop_last off);
 *   - the same order with 1, 2 and 4 workers, streamed or cached;
 *   - the order depends on the seed and epoch (shuffle_buffer > 0) and
 *     is the file order with shuffle_buffer = 0;
 *   - an epoch started at batch k continues with the samples the whole
 *     epoch has from batch k on (a resumed run).
 *
 *   loader_check PATTERN BATCH SHUFFLE_BUFFER
 *   loader_check --dump PATTERN N   (the first N samples in file order,
 *                                    each field's type and values)
 *   loader_check --dump-augmented PATTERN N CACHE
 *                                   (the same, augmented: see dump())
 *   loader_check --ranks PATTERN BATCH SHUFFLE_BUFFER RANKS
 *                                   (ranks: each of RANKS loaders takes
 *                                    its BATCH rows of every global batch
 *                                    of BATCH x RANKS; together they are
 *                                    the one-rank epoch, row for row)
 *   loader_check --bench PATTERN BATCH WORKERS CACHE EPOCHS
 *                                   (bench/loader.sh: samples/s of the
 *                                    loader alone, cache 0 or 1) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/data.h"
#include "runtime/exec/session.h"

static int load(const char *pattern, int64_t buffer, bool cache, kl_dataset *d)
{
    kl_shards_opts o = {.pattern = pattern, .workers = 2, .prefetch = 3, .shuffle_buffer = buffer, .cache = cache};
    if (kl_shards_load(&o, d))
        return -1;
    for (int f = 0; f < d->nfields; f++)
        d->field[f].used = true;
    char note[300];
    return kl_shards_prepare(d, note, sizeof note);
}

/* The labels of epoch e from batch first on, as the loader delivers them. */
static int64_t *epoch_labels(const kl_dataset *d, int workers, int64_t batch, int64_t buffer, int64_t e,
                             int64_t first, int64_t *n)
{
    kl_loader_opts o = {.batch = batch, .shuffle = buffer > 0, .drop_last = false, .seed = 7, .depth = 3,
                        .workers = workers};
    kl_loader *l = kl_loader_new_opts(d, &o);
    kl_loader_start_at(l, e, first);
    int f = kl_dataset_field(d, "cls");
    int64_t *out = malloc(sizeof *out * (size_t)d->count), k = 0;
    const kl_batch *b;
    while ((b = kl_loader_next(l))) {
        for (int64_t i = 0; i < b->size; i++)
            out[k++] = ((const int64_t *)b->field[f])[i];
        kl_loader_release(l, b);
    }
    if (kl_loader_failed(l)) {
        fprintf(stderr, "FAIL: %s\n", kl_loader_failed(l));
        exit(1);
    }
    kl_loader_free(l);
    *n = k;
    return out;
}

/* The labels of epoch e from batch first on, as rank r of ranks (each
 * taking batch rows of every global batch of batch x ranks, as training
 * does) gets them; drop_last as training. */
static int64_t *rank_labels(const kl_dataset *d, int workers, int64_t batch, int64_t buffer, int ranks, int r,
                            int64_t e, int64_t first, int64_t *nb)
{
    kl_loader_opts o = {.batch = batch * ranks, .shuffle = buffer > 0, .drop_last = true, .seed = 7, .depth = 3,
                        .workers = workers, .rows_first = r * batch, .rows = batch};
    kl_loader *l = kl_loader_new_opts(d, &o);
    kl_loader_start_at(l, e, first);
    int f = kl_dataset_field(d, "cls");
    int64_t *out = malloc(sizeof *out * (size_t)d->count), k = 0;
    const kl_batch *b;
    while ((b = kl_loader_next(l))) {
        if (b->size != batch) {
            fprintf(stderr, "FAIL: rank %d's batch %lld holds %lld samples, not %lld\n", r, (long long)b->index,
                    (long long)b->size, (long long)batch);
            exit(1);
        }
        for (int64_t i = 0; i < b->size; i++)
            out[k++] = ((const int64_t *)b->field[f])[i];
        kl_loader_release(l, b);
    }
    if (kl_loader_failed(l)) {
        fprintf(stderr, "FAIL: %s\n", kl_loader_failed(l));
        exit(1);
    }
    kl_loader_free(l);
    *nb = k / batch;
    return out;
}

/* Ranks against one rank with the global batch: for 2 epochs, streamed
 * and cached, from the start and from the middle, rank r's rows of each
 * global batch are the one-rank batch's rows r*batch.., and the ranks
 * together see each sample of the epoch (its full batches) exactly once. */
static int check_ranks(const char *pattern, int64_t batch, int64_t buffer, int ranks)
{
    kl_dataset streamed, cached;
    if (load(pattern, buffer, false, &streamed) || load(pattern, buffer, true, &cached))
        return 1;
    int64_t count = streamed.count, global = batch * ranks, full = count / global;
    int fail = 0;
    for (int64_t e = 0; e < 2; e++)
        for (int c = 0; c < 2; c++)
            for (int64_t first = 0; first <= full / 2; first += full / 2) {
                const kl_dataset *d = c ? &cached : &streamed;
                int64_t nref;
                int64_t *ref = rank_labels(d, 1, global, buffer, 1, 0, e, first, &nref);
                char *seen = calloc((size_t)count, 1);
                int64_t dup = 0, out = 0, total = 0, wrong = 0;
                for (int r = 0; r < ranks; r++) {
                    int64_t nb;
                    int64_t *got = rank_labels(d, 2, batch, buffer, ranks, r, e, first, &nb);
                    if (nb != nref) {
                        printf("FAIL: rank %d of %d has %lld batches, one rank %lld\n", r, ranks, (long long)nb,
                               (long long)nref);
                        fail = 1;
                    }
                    for (int64_t k = 0; k < nb && k < nref; k++)
                        for (int64_t i = 0; i < batch; i++) {
                            int64_t id = got[k * batch + i];
                            wrong += id != ref[k * global + r * batch + i];
                            if (id < 0 || id >= count)
                                out++;
                            else
                                dup += seen[id]++ > 0;
                            total++;
                        }
                    free(got);
                }
                int64_t want = (full - first) * global;
                if (wrong || dup || out || total != want) {
                    printf("FAIL: epoch %lld from batch %lld (%s), %d ranks: %lld samples of %lld (%lld twice, %lld "
                           "unknown), %lld not in one rank's place\n",
                           (long long)e, (long long)first, c ? "cached" : "streamed", ranks, (long long)total,
                           (long long)want, (long long)dup, (long long)out, (long long)wrong);
                    fail = 1;
                } else {
                    printf("ok: epoch %lld from batch %lld (%s): %d ranks x batch %lld see the %lld samples exactly "
                           "once, each in one rank's place\n",
                           (long long)e, (long long)first, c ? "cached" : "streamed", ranks, (long long)batch,
                           (long long)want);
                }
                free(seen);
                free(ref);
            }
    kl_dataset_free(&streamed);
    kl_dataset_free(&cached);
    return fail;
}

/* The first n samples in file order; augmented: epoch 3 of a training
 * loader with augment = [random_crop(pad = 4), hflip(), normalize(0.5,
 * 0.25)] (seed 7), cached or not. */
static int dump(const char *pattern, int64_t n, bool augment, bool cache)
{
    kl_dataset d;
    kl_shards_opts so = {.pattern = pattern, .workers = 2, .prefetch = 3, .cache = cache};
    if (augment)
        so.augment = (kl_augment){.crop_pad = 4, .hflip = true, .nmean = 1, .nstd = 1, .mean = {0.5}, .std = {0.25}};
    if (kl_shards_load(&so, &d))
        return 1;
    for (int f = 0; f < d.nfields; f++)
        d.field[f].used = true;
    char note[300];
    if (kl_shards_prepare(&d, note, sizeof note))
        return 1;
    kl_loader_opts o = {.batch = 1, .depth = 2, .workers = 2, .seed = 7, .augment_random = augment};
    kl_loader *l = kl_loader_new_opts(&d, &o);
    kl_loader_start(l, augment ? 3 : 0);
    const kl_batch *b;
    for (int64_t s = 0; s < n && (b = kl_loader_next(l)); s++) {
        for (int f = 0; f < d.nfields; f++) {
            char t[96];
            kl_field_type_str(&d.field[f].type, t, sizeof t);
            printf("%lld %s %s", (long long)s, d.field[f].name, t);
            int64_t numel = kl_field_numel(&d.field[f].type);
            for (int64_t i = 0; i < numel; i++)
                printf(" %.9g", kl_load_as(d.field[f].type.dtype, b->field[f], i));
            printf("\n");
        }
        kl_loader_release(l, b);
    }
    if (kl_loader_failed(l))
        fprintf(stderr, "%s\n", kl_loader_failed(l));
    kl_loader_free(l);
    kl_dataset_free(&d);
    return 0;
}

/* Epochs through the loader with nothing else running: samples/s. The
 * first epoch of a cached set is in the cache's fill, timed apart. */
static int bench(const char *pattern, int64_t batch, int workers, bool cache, int epochs)
{
    kl_dataset d;
    double t0 = kl_now();
    kl_shards_opts so = {.pattern = pattern, .workers = workers, .prefetch = 4, .shuffle_buffer = 1000, .cache = cache};
    if (kl_shards_load(&so, &d))
        return 1;
    for (int f = 0; f < d.nfields; f++)
        d.field[f].used = true;
    char note[300];
    if (kl_shards_prepare(&d, note, sizeof note))
        return 1;
    double t1 = kl_now();
    kl_loader_opts o = {.batch = batch, .shuffle = true, .drop_last = true, .seed = 1, .depth = 4, .workers = workers};
    kl_loader *l = kl_loader_new_opts(&d, &o);
    int64_t samples = 0;
    for (int e = 0; e < epochs; e++) {
        kl_loader_start(l, e);
        const kl_batch *b;
        while ((b = kl_loader_next(l))) {
            samples += b->size;
            kl_loader_release(l, b);
        }
    }
    double t2 = kl_now();
    printf("workers %d, %s: %.0f samples/s over %d epochs (%lld samples, %.2f s); index%s %.2f s\n", workers,
           cache ? "cache = memory" : "streamed", (double)samples / (t2 - t1), epochs, (long long)samples, t2 - t1,
           cache ? " and cache fill" : "", t1 - t0);
    kl_loader_free(l);
    kl_dataset_free(&d);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--dump"))
        return dump(argv[2], atoll(argv[3]), false, false);
    if (argc == 5 && !strcmp(argv[1], "--dump-augmented"))
        return dump(argv[2], atoll(argv[3]), true, atoi(argv[4]) != 0);
    if (argc == 6 && !strcmp(argv[1], "--ranks"))
        return check_ranks(argv[2], atoll(argv[3]), atoll(argv[4]), atoi(argv[5]));
    if (argc == 7 && !strcmp(argv[1], "--bench"))
        return bench(argv[2], atoll(argv[3]), atoi(argv[4]), atoi(argv[5]) != 0, atoi(argv[6]));
    if (argc != 4) {
        fprintf(stderr, "usage: loader_check PATTERN BATCH SHUFFLE_BUFFER\n");
        return 2;
    }
    const char *pattern = argv[1];
    int64_t batch = atoll(argv[2]), buffer = atoll(argv[3]);
    kl_dataset streamed, cached;
    if (load(pattern, buffer, false, &streamed) || load(pattern, buffer, true, &cached))
        return 1;
    int64_t count = streamed.count, nb = (count + batch - 1) / batch;
    int fail = 0;
    int64_t *ref[2];
    for (int64_t e = 0; e < 2; e++) {
        int64_t n;
        ref[e] = epoch_labels(&streamed, 1, batch, buffer, e, 0, &n);
        /* Exactly once. */
        char *seen = calloc((size_t)count, 1);
        int64_t dup = 0, out = 0;
        for (int64_t i = 0; i < n; i++) {
            if (ref[e][i] < 0 || ref[e][i] >= count)
                out++;
            else
                dup += seen[ref[e][i]]++ > 0;
        }
        if (n != count || dup || out) {
            printf("FAIL: epoch %lld delivered %lld samples of %lld (%lld twice, %lld unknown)\n", (long long)e,
                   (long long)n, (long long)count, (long long)dup, (long long)out);
            fail = 1;
        } else {
            printf("ok: epoch %lld: each of the %lld samples exactly once\n", (long long)e, (long long)count);
        }
        free(seen);
        /* Workers and the cache change nothing. */
        int before = fail;
        for (int w = 1; w <= 4; w *= 2)
            for (int c = 0; c < 2; c++) {
                int64_t m;
                int64_t *got = epoch_labels(c ? &cached : &streamed, w, batch, buffer, e, 0, &m);
                if (m != n || memcmp(got, ref[e], sizeof *got * (size_t)n)) {
                    printf("FAIL: epoch %lld with %d workers (%s) differs from 1 worker streamed\n", (long long)e, w,
                           c ? "cached" : "streamed");
                    fail = 1;
                }
                free(got);
            }
        if (fail == before)
            printf("ok: epoch %lld: the same order with 1, 2 and 4 workers, streamed and cached\n", (long long)e);
        before = fail;
        /* Started mid-epoch: the rest of the same epoch. */
        for (int c = 0; c < 2; c++) {
            int64_t k = nb / 2, m;
            int64_t *tail = epoch_labels(c ? &cached : &streamed, 2, batch, buffer, e, k, &m);
            if (m != n - k * batch || memcmp(tail, ref[e] + k * batch, sizeof *tail * (size_t)m)) {
                printf("FAIL: epoch %lld started at batch %lld (%s) is not the rest of the epoch\n", (long long)e,
                       (long long)k, c ? "cached" : "streamed");
                fail = 1;
            }
            free(tail);
        }
        if (fail == before)
            printf("ok: epoch %lld started at batch %lld continues with the same samples\n", (long long)e,
                   (long long)nb / 2);
    }
    bool in_order = true, same_epochs = !memcmp(ref[0], ref[1], sizeof *ref[0] * (size_t)count);
    for (int64_t i = 0; i < count; i++)
        in_order &= ref[0][i] == i;
    if (buffer == 0 && (!in_order || !same_epochs)) {
        printf("FAIL: shuffle_buffer = 0 is not the file order in every epoch\n");
        fail = 1;
    } else if (buffer > 0 && (in_order || same_epochs)) {
        printf("FAIL: shuffle_buffer = %lld left the order %s\n", (long long)buffer,
               in_order ? "unshuffled" : "the same in both epochs");
        fail = 1;
    } else {
        printf("ok: %s\n", buffer ? "shuffled, differently in each epoch" : "the file order in every epoch");
    }
    free(ref[0]);
    free(ref[1]);
    kl_dataset_free(&streamed);
    kl_dataset_free(&cached);
    return fail;
}
