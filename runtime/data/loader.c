/* The threaded batch loader.
 *
 * The order of an epoch is computed up front as a list of sample ids, a
 * function of the seed and the epoch alone: in memory (idx, synthetic) a
 * seeded permutation; for shards the shard order (seeded) read through a
 * seeded shuffle buffer, as WebDataset shuffles. Batch k is the ids at
 * k*batch and on, so what a batch holds never depends on the worker count
 * or on timing.
 *
 * Batches go through a ring of depth slots. In memory, the workers claim
 * the next batch and copy its samples. Streamed, one reader thread reads
 * the shards in the epoch's shard order and hands each batch's raw
 * samples to a slot (it holds at most the shuffle buffer's reach of
 * samples read ahead); the workers decode slots in parallel; the step
 * takes batch k when it is ready, in order.
 *
 * Each used field is written in the dtype of the input it feeds
 * (kl_dataset_bind_field), a short batch padded to the ring's rows by
 * repeating its samples: the step copies a batch into its inputs as it
 * is, with nothing to convert or allocate. The buffers (the ring's, and
 * a sample's worth for decoding, augmenting and converting per slot) are
 * made with the loader, none per batch.
 *
 * Ranks: every rank computes the same global order and takes its own rows
 * of each batch (opts rows_first, rows). Only those samples are copied or
 * decoded; the reader still reads past the others' bytes in the shards,
 * as the order interleaves every shard's samples through the shuffle
 * buffer: disjoint shards per rank would make the order depend on the
 * rank count, and N ranks would no longer see what one rank sees. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "values.h"
#include "wds_set.h"
#include "base/scalar.h"
#include "base/support.h"
#include "base/thread.h"

typedef enum { SLOT_FREE, SLOT_READING, SLOT_RAW, SLOT_FILLING, SLOT_READY, SLOT_TAKEN } slot_state;

typedef struct slot {
    kl_batch b;
    slot_state state;
    int64_t gen;
    int64_t nraw;
    kl_raw_sample *raw; /* streamed: the batch's samples, and their ids */
    int64_t *ids;
    /* One sample of field f on its way into the batch: as decoded, for
     * an augmented field (decoded[f]), and in the field's own dtype when
     * the batch holds it in another (own[f]); NULL when not needed. */
    uint8_t *decoded[KL_MAX_FIELDS], *own[KL_MAX_FIELDS];
} slot;

struct kl_loader {
    const kl_dataset *d;
    kl_loader_opts o;
    bool streamed;
    int64_t nbatches;
    int64_t n;           /* ids in this epoch's order */
    int64_t *order;
    int64_t *pos;        /* streamed: id -> position in the order, or -1 */
    int *shard_order;    /* streamed: the epoch's shards */
    int depth;
    slot *ring;
    int nworkers;
    pthread_t *workers, reader;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t epoch;       /* -1 before start */
    int64_t first;       /* the first batch of this epoch's run */
    int64_t produced;    /* batches claimed this epoch */
    int64_t consumed;
    int64_t generation;  /* bumps on every start */
    bool quit;
    double wait;
    char *error;
    int64_t skipped;
    char first_skip[900];
};

/* ---- the order of an epoch ---- */

static uint64_t epoch_stream(uint64_t seed, int64_t epoch)
{
    return kl_mix(seed ^ kl_mix((uint64_t)epoch + 1));
}

static void memory_order(kl_loader *l, int64_t epoch)
{
    int64_t n = l->d->count;
    l->n = n;
    for (int64_t i = 0; i < n; i++)
        l->order[i] = i;
    if (l->o.shuffle) {
        /* Fisher-Yates with a stream of (seed, epoch). */
        uint64_t s = epoch_stream(l->o.seed, epoch);
        for (int64_t i = n - 1; i > 0; i--) {
            s = kl_mix(s);
            int64_t j = (int64_t)(s % (uint64_t)(i + 1));
            int64_t t = l->order[i];
            l->order[i] = l->order[j];
            l->order[j] = t;
        }
    }
}

/* Shards: their order, then each shard's good samples in turn through a
 * buffer of shuffle_buffer ids; a full buffer emits a random one of its
 * ids for each id that comes in, and empties in random order at the end. */
static void shard_order(kl_loader *l, int64_t epoch)
{
    const kl_shard_set *ss = l->d->shards;
    int ns = ss->nshards;
    int64_t buf_n = l->o.shuffle ? ss->shuffle_buffer : 0;
    /* A buffer never holds more ids than the set has: a larger one
     * (shuffle_buffer = 2^61) emits the same order from this many. */
    if (buf_n > ss->total)
        buf_n = ss->total;
    uint64_t s = epoch_stream(l->o.seed, epoch);
    for (int i = 0; i < ns; i++)
        l->shard_order[i] = i;
    if (buf_n > 0)
        for (int i = ns - 1; i > 0; i--) {
            s = kl_mix(s);
            int j = (int)(s % (uint64_t)(i + 1));
            int t = l->shard_order[i];
            l->shard_order[i] = l->shard_order[j];
            l->shard_order[j] = t;
        }
    int64_t *buf = buf_n > 0 ? kl_xmalloc(sizeof *buf * (size_t)buf_n) : NULL, held = 0, n = 0;
    for (int k = 0; k < ns; k++) {
        int sh = l->shard_order[k];
        for (int64_t id = ss->base[sh]; id < ss->base[sh + 1]; id++) {
            if (ss->bad[id])
                continue;
            if (buf_n <= 1) {
                l->order[n++] = id;
            } else if (held < buf_n) {
                buf[held++] = id;
            } else {
                s = kl_mix(s);
                int64_t j = (int64_t)(s % (uint64_t)buf_n);
                l->order[n++] = buf[j];
                buf[j] = id;
            }
        }
    }
    while (held > 0) {
        s = kl_mix(s);
        int64_t j = (int64_t)(s % (uint64_t)held);
        l->order[n++] = buf[j];
        buf[j] = buf[--held];
    }
    free(buf);
    l->n = n;
    for (int64_t id = 0; id < ss->total; id++)
        l->pos[id] = -1;
    for (int64_t i = 0; i < n; i++)
        l->pos[l->order[i]] = i;
}

/* ---- each field in its input's dtype ---- */

static ir_dtype feed_dtype(const kl_field *f)
{
    return f->feed_bytes ? f->feed : f->type.dtype;
}

static int64_t feed_bytes(const kl_field *f)
{
    return f->feed_bytes ? f->feed_bytes : f->bytes;
}

int kl_dataset_bind_field(kl_dataset *d, int f, ir_dtype dt)
{
    kl_field *fd = &d->field[f];
    if (fd->feed_bytes && fd->feed != dt)
        return -1;
    fd->used = true;
    fd->feed = dt;
    fd->feed_bytes = fd->bytes / ir_dtype_size(fd->type.dtype) * ir_dtype_size(dt);
    return 0;
}

/* Where sample row i of field f is made (decoded, augmented, copied from
 * a token file): its row of the batch, or the slot's sample in the
 * field's own dtype when the batch holds another. */
static uint8_t *sample_at(slot *s, const kl_field *fd, int f, int64_t i)
{
    return s->own[f] ? s->own[f] : s->b.field[f] + i * feed_bytes(fd);
}

/* Row i of field f from src, one sample in the field's dtype: written in
 * the feed dtype (nothing to do when src is that row already). */
static void put_row(slot *s, const kl_field *fd, int f, int64_t i, const uint8_t *src)
{
    uint8_t *row = s->b.field[f] + i * feed_bytes(fd);
    if (src != row)
        kl_convert_values(feed_dtype(fd), row, fd->type.dtype, src, fd->bytes / ir_dtype_size(fd->type.dtype));
}

/* A short batch (the epoch's last, or samples left out): the rows past
 * its size repeat its samples from the first on, so an input of rows
 * samples reads them as they are. */
static void pad_rows(const kl_dataset *d, slot *s)
{
    if (s->b.size <= 0 || s->b.size >= s->b.rows)
        return;
    for (int f = 0; f < d->nfields; f++) {
        if (!d->field[f].used)
            continue;
        size_t fb = (size_t)feed_bytes(&d->field[f]);
        for (int64_t i = s->b.size; i < s->b.rows; i++)
            memcpy(s->b.field[f] + (size_t)i * fb, s->b.field[f] + (size_t)(i % s->b.size) * fb, fb);
    }
}

/* ---- filling a batch ---- */

static int64_t batch_first(const kl_loader *l, int64_t index)
{
    return index * l->o.batch;
}

static int64_t batch_size(const kl_loader *l, int64_t index)
{
    int64_t first = batch_first(l, index);
    return l->n - first < l->o.batch ? l->n - first : l->o.batch;
}

/* This rank's rows of batch index: [*lo, *lo + return) in the order. */
static int64_t rank_rows(const kl_loader *l, int64_t index, int64_t *lo)
{
    int64_t n = batch_size(l, index), a = l->o.rows_first, b = l->o.rows_first + l->o.rows;
    a = a < n ? a : n;
    b = b < n ? b : n;
    *lo = batch_first(l, index) + a;
    return b - a;
}

/* Whether position p of the order is one of this rank's rows. */
static bool rank_wants(const kl_loader *l, int64_t p)
{
    int64_t r = p % l->o.batch;
    return r >= l->o.rows_first && r < l->o.rows_first + l->o.rows;
}

/* In memory: copy each used field of the batch's samples. */
static void fill_memory(kl_loader *l, slot *s, int64_t index)
{
    const kl_dataset *d = l->d;
    int64_t first, n = rank_rows(l, index, &first);
    s->b.index = index;
    s->b.size = n;
    if (d->tokens) {
        /* Token windows by position in the epoch: fields 0 and 1 are
         * tokens and targets (token_data.c). */
        const kl_field *ftok = &d->field[0], *ftgt = &d->field[1];
        char why[600];
        for (int64_t i = 0; i < n; i++) {
            uint8_t *tok = ftok->used ? sample_at(s, ftok, 0, i) : NULL;
            uint8_t *tgt = ftgt->used ? sample_at(s, ftgt, 1, i) : NULL;
            if (kl_tokens_sample(d, l->o.augment_random, l->o.seed, l->epoch, first + i, (int32_t *)tok,
                                 (int32_t *)tgt, why, sizeof why)) {
                pthread_mutex_lock(&l->mu);
                if (!l->error)
                    l->error = kl_xstrdup(why);
                pthread_cond_broadcast(&l->cv);
                pthread_mutex_unlock(&l->mu);
                return;
            }
            if (tok)
                put_row(s, ftok, 0, i, tok);
            if (tgt)
                put_row(s, ftgt, 1, i, tgt);
        }
        pad_rows(d, s);
        return;
    }
    for (int f = 0; f < d->nfields; f++) {
        const kl_field *fd = &d->field[f];
        if (!fd->used)
            continue;
        int64_t bytes = fd->bytes, from = fd->decoded_bytes;
        for (int64_t i = 0; i < n; i++) {
            int64_t id = l->order[first + i];
            if (fd->augmented) {
                uint8_t *x = sample_at(s, fd, f, i);
                kl_augment_apply(&d->shards->augment, fd, d->data[f] + id * from, x, l->o.augment_random, l->o.seed,
                                 l->epoch, id);
                put_row(s, fd, f, i, x);
            } else {
                put_row(s, fd, f, i, d->data[f] + id * bytes);
            }
        }
    }
    pad_rows(d, s);
}

/* A bad sample met while decoding: counted and left out, or the
 * loader's error. Called with the lock held. */
static bool note_bad(kl_loader *l, const char *why)
{
    if (l->d->shards->skip) {
        if (!l->skipped++)
            snprintf(l->first_skip, sizeof l->first_skip, "%s", why);
        return false;
    }
    if (!l->error)
        l->error = kl_xstrdup(why);
    return true;
}

/* Streamed: decode the slot's raw samples into its batch. */
static void fill_decoded(kl_loader *l, slot *s)
{
    const kl_dataset *d = l->d;
    int64_t out = 0;
    /* Augmented fields decode into the slot's decoded sample, then
     * augment into the batch (through own[f] when converted). */
    for (int64_t i = 0; i < s->nraw; i++) {
        uint8_t *dst[KL_MAX_FIELDS] = {0};
        for (int f = 0; f < d->nfields; f++)
            if (d->field[f].used)
                dst[f] = s->decoded[f] ? s->decoded[f] : sample_at(s, &d->field[f], f, out);
        char why[900];
        if (kl_shards_decode_sample(d, &s->raw[i], s->ids[i], dst, why, sizeof why)) {
            pthread_mutex_lock(&l->mu);
            bool stop = note_bad(l, why);
            pthread_mutex_unlock(&l->mu);
            if (stop)
                break;
            continue;
        }
        for (int f = 0; f < d->nfields; f++) {
            const kl_field *fd = &d->field[f];
            if (!fd->used)
                continue;
            uint8_t *x = dst[f];
            if (s->decoded[f]) {
                x = sample_at(s, fd, f, out);
                kl_augment_apply(&d->shards->augment, fd, s->decoded[f], x, l->o.augment_random, l->o.seed, l->epoch,
                                 s->ids[i]);
            }
            put_row(s, fd, f, out, x);
        }
        out++;
    }
    if (out == 0 && s->nraw > 0) {
        /* Nothing left to feed (a rank's few rows, all bad): an error,
         * never an empty batch that the step would have to make up. */
        pthread_mutex_lock(&l->mu);
        if (!l->error)
            l->error = kl_xasprintf("batch %lld: all %lld sample%s of it read here were bad (on_error = skip "
                                    "leaves nothing to train on); the first skipped: %s",
                                    (long long)s->b.index, (long long)s->nraw, s->nraw == 1 ? "" : "s",
                                    l->first_skip);
        pthread_mutex_unlock(&l->mu);
    }
    for (int64_t i = 0; i < s->nraw; i++)
        kl_raw_sample_free(&s->raw[i]);
    s->nraw = 0;
    s->b.size = out;
    pad_rows(d, s);
}

/* ---- threads ---- */

/* A free slot, or NULL. */
static slot *free_slot(kl_loader *l)
{
    for (int i = 0; i < l->depth; i++)
        if (l->ring[i].state == SLOT_FREE)
            return &l->ring[i];
    return NULL;
}

static void *memory_worker(void *arg)
{
    kl_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        slot *s = NULL;
        while (!l->quit && !(l->epoch >= 0 && l->produced < l->nbatches && (s = free_slot(l))))
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->quit)
            break;
        int64_t index = l->produced++;
        s->gen = l->generation;
        s->state = SLOT_FILLING;
        pthread_mutex_unlock(&l->mu);
        fill_memory(l, s, index);
        pthread_mutex_lock(&l->mu);
        s->state = s->gen == l->generation ? SLOT_READY : SLOT_FREE;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void *decode_worker(void *arg)
{
    kl_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        slot *s = NULL;
        while (!l->quit) {
            /* The oldest raw batch first: the step waits for it. */
            for (int i = 0; i < l->depth; i++)
                if (l->ring[i].state == SLOT_RAW && (!s || l->ring[i].b.index < s->b.index))
                    s = &l->ring[i];
            if (s)
                break;
            pthread_cond_wait(&l->cv, &l->mu);
        }
        if (l->quit)
            break;
        s->state = SLOT_FILLING;
        pthread_mutex_unlock(&l->mu);
        fill_decoded(l, s);
        pthread_mutex_lock(&l->mu);
        s->state = s->gen == l->generation ? SLOT_READY : SLOT_FREE;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* The reader's position in the epoch's stream of shards. */
typedef struct stream {
    int64_t gen;
    int k;                 /* index into shard_order */
    kl_shard_reader *r;
    int64_t next_id;       /* the id of r's next sample */
    kl_raw_sample **held;  /* by id: read, not yet handed to a batch */
} stream;

static void stream_reset(kl_loader *l, stream *st)
{
    kl_shard_close(st->r);
    st->r = NULL;
    st->k = 0;
    for (int64_t id = 0; id < l->d->shards->total; id++)
        if (st->held[id]) {
            kl_raw_sample_free(st->held[id]);
            free(st->held[id]);
            st->held[id] = NULL;
        }
}

/* Reads until id is held; -1 with why on a read error. */
static int read_until(kl_loader *l, stream *st, int64_t id, int64_t lo, int64_t hi, char *why, size_t n)
{
    const kl_shard_set *ss = l->d->shards;
    while (!st->held[id]) {
        if (!st->r) {
            if (st->k >= ss->nshards) {
                snprintf(why, n, "%s: internal: sample %lld not found in the shards", ss->paths[0], (long long)id);
                return -1;
            }
            int sh = l->shard_order[st->k];
            st->r = kl_shard_open(ss->paths[sh], 1, why, n);
            st->next_id = ss->base[sh];
            if (!st->r)
                return -1;
        }
        int sh = l->shard_order[st->k];
        if (st->next_id == ss->base[sh + 1]) {
            /* The index's count: a damaged tail (on_error = skip) is
             * never read again. */
            kl_shard_close(st->r);
            st->r = NULL;
            st->k++;
            continue;
        }
        kl_raw_sample *rs = kl_xmalloc(sizeof *rs);
        char w[800];
        int rc = kl_shard_next(st->r, rs, w, sizeof w);
        if (rc != 1) {
            free(rs);
            snprintf(why, n, "%s: %s", ss->paths[sh], rc == 0 ? "the shard changed since it was indexed (fewer samples)" : w);
            return -1;
        }
        int64_t got = st->next_id++;
        int64_t p = l->pos[got];
        if (p < lo || p >= hi || !rank_wants(l, p)) {
            /* Not wanted this epoch (left out, dropped with the last
             * partial batch, before a resumed run's first batch, or
             * another rank's row). */
            kl_raw_sample_free(rs);
            free(rs);
            continue;
        }
        st->held[got] = rs;
    }
    return 0;
}

static void *reader_thread(void *arg)
{
    kl_loader *l = arg;
    stream st = {.gen = -1};
    st.held = kl_xcalloc((size_t)l->d->shards->total, sizeof *st.held);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        slot *s = NULL;
        while (!l->quit && !(l->epoch >= 0 && !l->error && l->produced < l->nbatches && (s = free_slot(l))))
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->quit)
            break;
        int64_t index = l->produced++;
        s->gen = l->generation;
        s->state = SLOT_READING;
        bool restart = st.gen != l->generation;
        st.gen = l->generation;
        int64_t lo = batch_first(l, l->first), hi = l->nbatches * l->o.batch < l->n ? l->nbatches * l->o.batch : l->n;
        pthread_mutex_unlock(&l->mu);
        if (restart)
            stream_reset(l, &st);
        int64_t first, nb = rank_rows(l, index, &first);
        char why[900];
        int rc = 0;
        s->b.index = index;
        s->nraw = 0;
        for (int64_t i = 0; i < nb && rc == 0; i++) {
            int64_t id = l->order[first + i];
            rc = read_until(l, &st, id, lo, hi, why, sizeof why);
            if (rc == 0) {
                s->raw[i] = *st.held[id];
                s->ids[i] = id;
                s->nraw++;
                free(st.held[id]);
                st.held[id] = NULL;
            }
        }
        pthread_mutex_lock(&l->mu);
        if (rc && !l->error)
            l->error = kl_xstrdup(why);
        s->state = s->gen == l->generation && !rc ? SLOT_RAW : SLOT_FREE;
        if (s->state == SLOT_FREE) {
            for (int64_t i = 0; i < s->nraw; i++)
                kl_raw_sample_free(&s->raw[i]);
            s->nraw = 0;
        }
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    stream_reset(l, &st);
    free(st.held);
    return NULL;
}

/* ---- the interface ---- */

kl_loader *kl_loader_new_opts(const kl_dataset *d, const kl_loader_opts *o)
{
    kl_loader *l = kl_xcalloc(1, sizeof *l);
    l->d = d;
    l->o = *o;
    if (l->o.rows <= 0) {
        l->o.rows_first = 0;
        l->o.rows = o->batch;
    }
    if (l->o.rows_first < 0 || l->o.rows_first + l->o.rows > o->batch)
        kl_panic("loader rows [%lld, %lld) outside the batch of %lld", (long long)l->o.rows_first,
                 (long long)(l->o.rows_first + l->o.rows), (long long)o->batch);
    const kl_shard_set *ss = d->shards;
    l->streamed = ss && !ss->cached;
    int64_t ids = ss ? ss->total : d->count;
    l->nbatches = o->drop_last ? d->count / o->batch : (d->count + o->batch - 1) / o->batch;
    l->order = kl_xmalloc(sizeof(int64_t) * (size_t)(ids + 1));
    if (ss) {
        l->pos = kl_xmalloc(sizeof(int64_t) * (size_t)(ids + 1));
        l->shard_order = kl_xmalloc(sizeof(int) * (size_t)ss->nshards);
    }
    l->depth = o->depth < 2 ? 2 : o->depth;
    l->ring = kl_xcalloc((size_t)l->depth, sizeof *l->ring);
    for (int i = 0; i < l->depth; i++) {
        slot *s = &l->ring[i];
        s->b.rows = l->o.rows;
        for (int f = 0; f < d->nfields; f++) {
            const kl_field *fd = &d->field[f];
            if (!fd->used)
                continue;
            s->b.field[f] = kl_xmalloc((size_t)(l->o.rows * feed_bytes(fd)));
            if (fd->augmented)
                s->decoded[f] = kl_xmalloc((size_t)fd->decoded_bytes);
            if (feed_dtype(fd) != fd->type.dtype)
                s->own[f] = kl_xmalloc((size_t)fd->bytes);
        }
        if (l->streamed) {
            s->raw = kl_xcalloc((size_t)l->o.rows, sizeof *s->raw);
            s->ids = kl_xcalloc((size_t)l->o.rows, sizeof *s->ids);
        }
    }
    l->epoch = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->nworkers = o->workers < 1 ? 1 : o->workers;
    l->workers = kl_xcalloc((size_t)l->nworkers, sizeof *l->workers);
    for (int i = 0; i < l->nworkers; i++)
        if (kl_thread_create(&l->workers[i], l->streamed ? decode_worker : memory_worker, l))
            kl_panic("cannot start a loader thread");
    if (l->streamed && kl_thread_create(&l->reader, reader_thread, l))
        kl_panic("cannot start the shard reader thread");
    return l;
}

kl_loader *kl_loader_new(const kl_dataset *d, int64_t batch, bool shuffle, bool drop_last, uint64_t seed, int depth)
{
    kl_loader_opts o = {.batch = batch, .shuffle = shuffle, .drop_last = drop_last, .seed = seed, .depth = depth,
                        .workers = 1};
    return kl_loader_new_opts(d, &o);
}

void kl_loader_free(kl_loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->quit = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nworkers; i++)
        pthread_join(l->workers[i], NULL);
    if (l->streamed)
        pthread_join(l->reader, NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    for (int i = 0; i < l->depth; i++) {
        slot *s = &l->ring[i];
        for (int f = 0; f < KL_MAX_FIELDS; f++) {
            free(s->b.field[f]);
            free(s->decoded[f]);
            free(s->own[f]);
        }
        for (int64_t k = 0; k < s->nraw; k++)
            kl_raw_sample_free(&s->raw[k]);
        free(s->raw);
        free(s->ids);
    }
    free(l->ring);
    free(l->workers);
    free(l->order);
    free(l->pos);
    free(l->shard_order);
    free(l->error);
    free(l);
}

int64_t kl_loader_batches(const kl_loader *l)
{
    return l->nbatches;
}

void kl_loader_start_at(kl_loader *l, int64_t epoch, int64_t first)
{
    pthread_mutex_lock(&l->mu);
    /* Wait until no slot is being read or filled, then drop what is left. */
    for (;;) {
        bool busy = false;
        for (int i = 0; i < l->depth; i++)
            busy |= l->ring[i].state == SLOT_FILLING || l->ring[i].state == SLOT_READING;
        if (!busy)
            break;
        pthread_cond_wait(&l->cv, &l->mu);
    }
    for (int i = 0; i < l->depth; i++) {
        slot *s = &l->ring[i];
        for (int64_t k = 0; k < s->nraw; k++)
            kl_raw_sample_free(&s->raw[k]);
        s->nraw = 0;
        s->state = SLOT_FREE;
    }
    if (l->d->shards)
        shard_order(l, epoch);
    else
        memory_order(l, epoch);
    l->epoch = epoch;
    l->first = first < l->nbatches ? first : l->nbatches;
    l->produced = l->consumed = l->first;
    l->generation++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void kl_loader_start(kl_loader *l, int64_t epoch)
{
    kl_loader_start_at(l, epoch, 0);
}

const kl_batch *kl_loader_next(kl_loader *l)
{
    pthread_mutex_lock(&l->mu);
    if (l->consumed >= l->nbatches || l->error) {
        pthread_mutex_unlock(&l->mu);
        return NULL;
    }
    int64_t want = l->consumed;
    double t0 = kl_now();
    slot *found = NULL;
    for (;;) {
        for (int i = 0; i < l->depth && !found; i++)
            if (l->ring[i].state == SLOT_READY && l->ring[i].b.index == want)
                found = &l->ring[i];
        if (found || l->error)
            break;
        pthread_cond_wait(&l->cv, &l->mu);
    }
    l->wait += kl_now() - t0;
    if (!found || l->error) {
        pthread_mutex_unlock(&l->mu);
        return NULL;
    }
    found->state = SLOT_TAKEN;
    l->consumed++;
    pthread_mutex_unlock(&l->mu);
    return &found->b;
}

void kl_loader_release(kl_loader *l, const kl_batch *b)
{
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->depth; i++)
        if (&l->ring[i].b == b)
            l->ring[i].state = SLOT_FREE;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

double kl_loader_wait_seconds(const kl_loader *l)
{
    return l->wait;
}

const char *kl_loader_failed(const kl_loader *l)
{
    /* The error is set once, under the lock, and never changes after. */
    kl_loader *m = (kl_loader *)l;
    pthread_mutex_lock(&m->mu);
    const char *e = l->error;
    pthread_mutex_unlock(&m->mu);
    return e;
}

int64_t kl_loader_skipped(const kl_loader *l, const char **first)
{
    kl_loader *m = (kl_loader *)l;
    pthread_mutex_lock(&m->mu);
    int64_t n = l->skipped;
    if (first)
        *first = n ? l->first_skip : NULL;
    pthread_mutex_unlock(&m->mu);
    return n;
}
