/* A data set of WebDataset shards: the index pass, the fields, the
 * checks of every sample against them, and the memory cache. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "wds_set.h"
#include "base/scalar.h"
#include "base/support.h"
#include "base/thread.h"

int kl_dataset_field(const kl_dataset *d, const char *name)
{
    for (int f = 0; f < d->nfields; f++)
        if (!strcmp(d->field[f].name, name))
            return f;
    return -1;
}

int kl_shard_of(const kl_shard_set *ss, int64_t id)
{
    int lo = 0, hi = ss->nshards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (ss->base[mid] <= id)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Leaves sample id out (on_error = skip) or reports why (fail): 0 when
 * left out, -1 when the run stops. */
static int bad_sample(kl_shard_set *ss, int64_t id, const char *why)
{
    if (!ss->skip) {
        kl_error("%s", why);
        return -1;
    }
    if (!ss->bad[id]) {
        ss->bad[id] = 1;
        if (!ss->skipped++)
            snprintf(ss->first_skip, sizeof ss->first_skip, "%.699s", why);
    }
    return 0;
}

/* The index pass over one shard: keys and fields of its samples. */
static int index_shard(kl_shard_set *ss, int s, char *why, size_t n)
{
    kl_shard_reader *r = kl_shard_open(ss->paths[s], 0, why, n);
    if (!r)
        return -1;
    kl_raw_sample rs;
    int rc;
    while ((rc = kl_shard_next(r, &rs, why, n)) == 1) {
        int64_t id = ss->total++;
        if (ss->total > ((int64_t)1 << 34))
            kl_panic("more samples than an index holds");
        if ((id & (id - 1)) == 0) {
            size_t cap = (size_t)(id ? id * 2 : 1);
            ss->keys = kl_xrealloc(ss->keys, sizeof *ss->keys * cap);
            ss->has = kl_xrealloc(ss->has, cap);
            /* The members' fields stay with the key until the fields of
             * the data set are known: kept as "key\0field\0field\0\0". */
        }
        kl_buf b = {0};
        kl_buf_putn(&b, rs.key, strlen(rs.key) + 1);
        for (int i = 0; i < rs.nmembers; i++)
            kl_buf_putn(&b, rs.m[i].field, strlen(rs.m[i].field) + 1);
        kl_buf_putn(&b, "", 1);
        ss->keys[id] = kl_buf_take(&b);
        ss->has[id] = 0;
        kl_raw_sample_free(&rs);
    }
    kl_shard_close(r);
    return rc;
}

/* The first sample of the set decoded: the data set's fields. */
static int probe_fields(kl_dataset *d, char *why, size_t n)
{
    kl_shard_set *ss = d->shards;
    int s = kl_shard_of(ss, 0);
    kl_shard_reader *r = kl_shard_open(ss->paths[s], 1, why, n);
    if (!r)
        return -1;
    kl_raw_sample rs;
    int rc = kl_shard_next(r, &rs, why, n);
    kl_shard_close(r);
    if (rc != 1) {
        if (rc == 0)
            snprintf(why, n, "%s: the shard changed while it was read", ss->paths[s]);
        return -1;
    }
    for (int i = 0; i < rs.nmembers && rc == 1; i++) {
        if (d->nfields == KL_MAX_FIELDS) {
            snprintf(why, n, "%s: sample %s has more than %d fields", ss->paths[s], rs.key, KL_MAX_FIELDS);
            rc = -1;
            break;
        }
        kl_field *f = &d->field[d->nfields];
        uint8_t *out;
        char w[300];
        if (kl_decode(rs.m[i].field, rs.m[i].data, rs.m[i].size, &f->type, &out, w, sizeof w)) {
            snprintf(why, n, "%s: member %s.%s: %s", ss->paths[s], rs.key, rs.m[i].field, w);
            rc = -1;
            break;
        }
        free(out);
        f->name = kl_xstrdup(rs.m[i].field);
        f->bytes = kl_field_bytes(&f->type);
        f->decoded = f->type;
        f->decoded_bytes = f->bytes;
        d->nfields++;
    }
    kl_raw_sample_free(&rs);
    return rc == 1 ? 0 : -1;
}

/* Shards the pattern names that are not there, reported once with their
 * count and the first (a million missing shards make one line, not a
 * million), before any is read. */
static int report_missing(const char *pattern, char **paths, int n)
{
    int missing = 0, first = -1, first_errno = 0;
    struct stat st;
    for (int s = 0; s < n; s++)
        if (stat(paths[s], &st)) {
            if (!missing++) {
                first = s;
                first_errno = errno;
            }
        }
    if (!missing)
        return 0;
    if (n == 1)
        kl_error("%s: cannot open: %s", paths[0], strerror(first_errno));
    else
        kl_error("%s: %d of the %d shards it names are missing (the first: %s: cannot open: %s)", pattern, missing, n,
                 paths[first], strerror(first_errno));
    return -1;
}

int kl_shards_load(const kl_shards_opts *o, kl_dataset *out)
{
    memset(out, 0, sizeof *out);
    char why[800];
    kl_shard_set *ss = kl_xcalloc(1, sizeof *ss);
    out->shards = ss;
    out->name = kl_xstrdup(o->pattern);
    ss->skip = o->skip;
    ss->augment = o->augment;
    ss->workers = o->workers;
    ss->prefetch = o->prefetch;
    ss->shuffle_buffer = o->shuffle_buffer;
    ss->cached_wanted = o->cache;
    int n = kl_shard_expand(o->pattern, &ss->paths, why, sizeof why);
    if (n < 0) {
        kl_error("%s: %s", o->pattern, why);
        return -1;
    }
    ss->nshards = n;
    if (!o->skip && report_missing(o->pattern, ss->paths, n))
        return -1;
    ss->base = kl_xcalloc((size_t)n + 1, sizeof *ss->base);
    for (int s = 0; s < n; s++) {
        ss->base[s] = ss->total;
        if (index_shard(ss, s, why, sizeof why)) {
            /* A damaged shard: with on_error = skip, its samples before
             * the damage stay (they were read whole). */
            char *msg = kl_xasprintf("%s: %s", ss->paths[s], why);
            if (!o->skip) {
                kl_error("%s", msg);
                free(msg);
                return -1;
            }
            if (!ss->skipped++)
                snprintf(ss->first_skip, sizeof ss->first_skip, "%s (the rest of the shard)", msg);
            free(msg);
        }
    }
    ss->base[n] = ss->total;
    if (ss->total == 0) {
        kl_error("%s: no samples in %d shard%s", o->pattern, n, n == 1 ? "" : "s");
        return -1;
    }
    ss->bad = kl_xcalloc((size_t)ss->total, 1);
    if (probe_fields(out, why, sizeof why)) {
        kl_error("%s", why);
        return -1;
    }
    /* Augmentation: images (u8[C, H, W]); normalisation makes them f32. */
    const kl_augment *a = &o->augment;
    bool any = a->crop_pad > 0 || a->hflip || a->nmean > 0;
    for (int f = 0; any && f < out->nfields; f++) {
        kl_field *fd = &out->field[f];
        if (fd->decoded.dtype != IR_U8 || fd->decoded.rank != 3)
            continue;
        int64_t c = fd->decoded.shape[0];
        if (a->nmean > 0 && ((a->nmean != 1 && a->nmean != c) || (a->nstd != 1 && a->nstd != c))) {
            kl_error("%s: normalize has %d mean%s and %d std%s, but field %s has %lld channel%s (give one value, or one "
                     "per channel)",
                     o->pattern, a->nmean, a->nmean == 1 ? "" : "s", a->nstd, a->nstd == 1 ? "" : "s", fd->name,
                     (long long)c, c == 1 ? "" : "s");
            return -1;
        }
        fd->augmented = true;
        if (a->nmean > 0) {
            fd->type.dtype = IR_F32;
            fd->bytes = kl_field_bytes(&fd->type);
        }
    }
    /* The fields each sample has, as bits of the data set's. */
    for (int64_t id = 0; id < ss->total; id++) {
        const char *p = ss->keys[id] + strlen(ss->keys[id]) + 1;
        for (; *p; p += strlen(p) + 1) {
            int f = kl_dataset_field(out, p);
            if (f >= 0)
                ss->has[id] |= (uint8_t)(1u << f);
        }
    }
    out->count = ss->total;
    return 0;
}

int kl_shards_decode_sample(const kl_dataset *d, const kl_raw_sample *s, int64_t id, uint8_t *const *dst, char *why,
                            size_t n)
{
    const kl_shard_set *ss = d->shards;
    const char *shard = ss->paths[kl_shard_of(ss, id)];
    for (int f = 0; f < d->nfields; f++) {
        const kl_field *fd = &d->field[f];
        if (!fd->used)
            continue;
        const kl_member *m = kl_raw_sample_find(s, fd->name);
        if (!m) {
            snprintf(why, n, "%s: member %s.%s: missing (sample %s has no field %s)", shard, s->key, fd->name, s->key,
                     fd->name);
            return -1;
        }
        kl_field_type t;
        uint8_t *out;
        char w[300];
        if (kl_decode(fd->name, m->data, m->size, &t, &out, w, sizeof w)) {
            snprintf(why, n, "%s: member %s.%s: %s", shard, s->key, fd->name, w);
            return -1;
        }
        if (!kl_field_type_eq(&t, &fd->decoded)) {
            char a[96], b[96];
            kl_field_type_str(&t, a, sizeof a);
            kl_field_type_str(&fd->decoded, b, sizeof b);
            snprintf(why, n, "%s: member %s.%s: %s, where the first sample's field %s (the model's input) is %s", shard,
                     s->key, fd->name, a, fd->name, b);
            free(out);
            return -1;
        }
        if (fd->classes > 0) {
            int64_t v = t.dtype == IR_I64 ? *(int64_t *)out : t.dtype == IR_I32 ? *(int32_t *)out : out[0];
            if (v < 0 || v >= fd->classes) {
                snprintf(why, n, "%s: member %s.%s: label %lld is out of range for the model's %lld classes", shard,
                         s->key, fd->name, (long long)v, (long long)fd->classes);
                free(out);
                return -1;
            }
        }
        memcpy(dst[f], out, (size_t)fd->decoded_bytes);
        free(out);
    }
    return 0;
}

/* ---- the memory cache: every sample decoded once, by the workers ---- */

typedef struct cache_job {
    kl_dataset *d;
    int next_shard;
    pthread_mutex_t mu;
    int failed;
    char why[900];
} cache_job;

static void *cache_worker(void *arg)
{
    cache_job *j = arg;
    kl_dataset *d = j->d;
    kl_shard_set *ss = d->shards;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int s = j->failed ? ss->nshards : j->next_shard++;
        pthread_mutex_unlock(&j->mu);
        if (s >= ss->nshards)
            return NULL;
        char why[900];
        kl_shard_reader *r = kl_shard_open(ss->paths[s], 1, why, sizeof why);
        kl_raw_sample rs;
        int64_t id = ss->base[s];
        int rc = r ? 0 : -1;
        while (r && id < ss->base[s + 1] && (rc = kl_shard_next(r, &rs, why, sizeof why)) == 1) {
            if (!ss->bad[id]) {
                uint8_t *dst[KL_MAX_FIELDS] = {0};
                for (int f = 0; f < d->nfields; f++)
                    if (d->field[f].used)
                        dst[f] = d->data[f] + id * d->field[f].decoded_bytes;
                char w[900];
                if (kl_shards_decode_sample(d, &rs, id, dst, w, sizeof w)) {
                    pthread_mutex_lock(&j->mu);
                    int stop = bad_sample(ss, id, w);
                    pthread_mutex_unlock(&j->mu);
                    if (stop) {
                        kl_raw_sample_free(&rs);
                        rc = -2;
                        break;
                    }
                }
            }
            kl_raw_sample_free(&rs);
            id++;
        }
        kl_shard_close(r);
        if (rc == -1) {
            pthread_mutex_lock(&j->mu);
            if (!j->failed++)
                snprintf(j->why, sizeof j->why, "%.300s%s%.590s", r ? ss->paths[s] : "", r ? ": " : "", why);
            pthread_mutex_unlock(&j->mu);
        } else if (rc == -2) {
            pthread_mutex_lock(&j->mu);
            j->failed++;
            j->why[0] = 0;
            pthread_mutex_unlock(&j->mu);
        }
    }
}

int kl_shards_prepare(kl_dataset *d, char *note, size_t n)
{
    kl_shard_set *ss = d->shards;
    /* Every sample has the used fields (the index knows). */
    for (int64_t id = 0; id < ss->total; id++) {
        for (int f = 0; f < d->nfields; f++) {
            if (!d->field[f].used || (ss->has[id] >> f & 1) || ss->bad[id])
                continue;
            const char *key = ss->keys[id];
            char *why = kl_xasprintf("%s: member %s.%s: missing (sample %s has no field %s)",
                                     ss->paths[kl_shard_of(ss, id)], key, d->field[f].name, key, d->field[f].name);
            int rc = bad_sample(ss, id, why);
            free(why);
            if (rc)
                return -1;
        }
    }
    d->count = 0;
    for (int64_t id = 0; id < ss->total; id++)
        d->count += !ss->bad[id];
    int64_t per = 0;
    for (int f = 0; f < d->nfields; f++)
        if (d->field[f].used)
            per += d->field[f].decoded_bytes;
    int64_t bytes = kl_size_mul(ss->total, per);
    char sz[32];
    kl_format_bytes(sz, sizeof sz, bytes);
    if (!ss->cached_wanted) {
        snprintf(note, n, "streamed (cache = none)");
        return 0;
    }
    /* The cache may take a quarter of the machine's memory. */
    int64_t budget = kl_machine_memory() / 4;
    if (bytes < 0 || bytes > budget) {
        char b[32];
        kl_format_bytes(b, sizeof b, budget);
        snprintf(note, n, "cache = memory: %s decoded does not fit (budget %s, a quarter of memory): streamed", sz, b);
        return 0;
    }
    for (int f = 0; f < d->nfields; f++)
        if (d->field[f].used)
            d->data[f] = kl_xcalloc((size_t)ss->total, (size_t)d->field[f].decoded_bytes);
    cache_job j = {.d = d};
    pthread_mutex_init(&j.mu, NULL);
    int nw = ss->workers < 1 ? 1 : ss->workers;
    pthread_t th[64];
    if (nw > 64)
        nw = 64;
    for (int i = 0; i < nw; i++)
        if (kl_thread_create(&th[i], cache_worker, &j))
            kl_panic("cannot start a data worker");
    for (int i = 0; i < nw; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.mu);
    if (j.failed) {
        if (j.why[0])
            kl_error("%s", j.why);
        return -1;
    }
    d->count = 0;
    for (int64_t id = 0; id < ss->total; id++)
        d->count += !ss->bad[id];
    ss->cached = true;
    snprintf(note, n, "cache = memory: %s decoded, fits (kept in memory; read from the shards once)", sz);
    return 0;
}

int kl_shards_count(const kl_dataset *d)
{
    return d->shards ? d->shards->nshards : 0;
}

int64_t kl_shards_skipped(const kl_dataset *d, const char **first)
{
    *first = d->shards && d->shards->skipped ? d->shards->first_skip : NULL;
    return d->shards ? d->shards->skipped : 0;
}

void kl_augment_apply(const kl_augment *a, const kl_field *f, const uint8_t *src, uint8_t *dst, bool random,
                      uint64_t seed, int64_t epoch, int64_t id)
{
    int64_t C = f->decoded.shape[0], H = f->decoded.shape[1], W = f->decoded.shape[2];
    int64_t p = random ? a->crop_pad : 0, dy = p, dx = p;
    bool flip = false;
    if (random) {
        uint64_t r = kl_mix(seed ^ kl_mix((uint64_t)epoch + 1) ^ kl_mix(0xa5a5u + (uint64_t)id));
        if (p > 0) {
            dy = (int64_t)(r % (uint64_t)(2 * p + 1));
            dx = (int64_t)((r >> 20) % (uint64_t)(2 * p + 1));
        }
        flip = a->hflip && (r >> 50 & 1);
    }
    bool norm = a->nmean > 0;
    for (int64_t c = 0; c < C; c++) {
        double mean = norm ? a->mean[a->nmean == 1 ? 0 : c] : 0, std = norm ? a->std[a->nstd == 1 ? 0 : c] : 1;
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                /* The flip of the crop: column W-1-x of the crop. */
                int64_t sy = y + dy - p, sx = (flip ? W - 1 - x : x) + dx - p;
                uint8_t v = sy >= 0 && sy < H && sx >= 0 && sx < W ? src[(c * H + sy) * W + sx] : 0;
                int64_t o = (c * H + y) * W + x;
                if (norm)
                    ((float *)dst)[o] = (float)(((double)v / 255.0 - mean) / std);
                else
                    dst[o] = v;
            }
    }
}
