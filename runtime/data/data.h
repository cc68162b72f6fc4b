/* Datasets and the loader that feeds training.
 *
 * A dataset is samples of u8 features plus an integer label each, held in
 * host memory (Fashion-MNIST is 55 MB). The loader's threads assemble
 * batches ahead of the step into a ring of buffers, in a seeded shuffled
 * order per epoch, so the step never waits on I/O. */
#ifndef KILN_DATA_H
#define KILN_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "decode.h"

/* A sample is a few named fields, each an array of one dtype and shape
 * (idx: "image" u8[28, 28] and "label" i32; shards: the members' fields,
 * "png" u8[1, 28, 28], "cls" i64 ...). */
#define KL_MAX_FIELDS 8

typedef struct kl_field {
    char *name;
    kl_field_type type; /* a sample as the data gives it (after augmentation) */
    int64_t bytes;      /* per sample */
    kl_field_type decoded; /* as decoded: type unless augmentation normalises it */
    int64_t decoded_bytes;
    bool augmented;     /* an image (u8[C, H, W]) the augmentation applies to */
    bool used;          /* bound to an input: the loader fills it */
    int64_t classes;    /* > 0: a class label, checked to be in [0, classes) */
    /* Bound to an input (kl_dataset_bind_field): the input's dtype, and
     * the bytes of a sample in it. The loader's workers write the field
     * so, and the step copies the batch into the input as it is.
     * feed_bytes 0: not bound, written as type. */
    ir_dtype feed;
    int64_t feed_bytes;
} kl_field;

typedef struct kl_shard_set kl_shard_set;
typedef struct kl_tokens kl_tokens;

typedef struct kl_dataset {
    char *name;
    int64_t count;
    int nfields;
    kl_field field[KL_MAX_FIELDS];
    /* In memory (idx, synthetic, a cached shard set): count samples of
     * each field; NULL for a field of a streamed set. */
    uint8_t *data[KL_MAX_FIELDS];
    /* idx and synthetic: the first two fields, as the old loader had
     * them (features = data[0], labels = (int32_t *)data[1]). */
    int64_t sample_bytes;
    int64_t shape[3];
    int rank;
    uint8_t *features;
    int32_t *labels;
    int32_t max_label;
    char *label_path; /* the file the labels came from (idx), for errors */
    /* Shards: the index and the reading settings; NULL otherwise. */
    kl_shard_set *shards;
    /* Token files (tokens(...)): the mapped file; NULL otherwise. A
     * sample is a window of context + 1 tokens, given as two fields,
     * "tokens" (window[0:context]) and "targets" (window[1:context+1]),
     * both i32[context]. In training, sample p of epoch e is the random
     * window of index e * count + p (kl_tokens_window: a function of the
     * seed and that index alone); in evaluation, sample j is the fixed
     * window starting at (j * windows / count) * context, count evenly
     * spaced windows out of the file's `windows`. */
    kl_tokens *tokens;
    int64_t context;
    int64_t windows;
} kl_dataset;

/* Reads the IDX files of split "train" or "t10k" from dir (gzip or not):
 * {split}-images-idx3-ubyte[.gz] and {split}-labels-idx1-ubyte[.gz].
 * Errors name the file and what is wrong; returns 0 or -1. */
int kl_idx_load(const char *dir, const char *split, kl_dataset *out);
/* A deterministic synthetic set of 28x28 images whose label is learnable
 * (it follows the position of a bright patch). Returns -1 (reported)
 * when count samples do not fit in memory. */
int kl_synthetic(int64_t count, uint64_t seed, kl_dataset *out);
void kl_dataset_free(kl_dataset *d);
/* 0 when every label is below classes (0: no classes to check); else
 * prints which file, sample and label, and returns -1. */
int kl_dataset_check_labels(const kl_dataset *d, int classes);

/* shards(augment = [...]): applied to every image field (u8[C, H, W])
 * in the loader, after decoding (and after the cache): a random crop of
 * the image padded with crop_pad zeros on each side, a horizontal flip
 * with probability 1/2 (training only: the crop offset and the flip are
 * drawn from the seed, the epoch and the sample's number), then
 * (x / 255 - mean[c]) / std[c] to f32 (training and test). */
typedef struct kl_augment {
    int64_t crop_pad;     /* 0: no crop */
    bool hflip;
    int nmean, nstd;      /* 0: no normalisation; 1 or one per channel */
    double mean[8], std[8];
} kl_augment;

/* Writes the augmented sample of field f (src: f->decoded_bytes) into dst
 * (f->bytes); random: crop and flip (training), drawn from (seed, epoch,
 * id). */
void kl_augment_apply(const kl_augment *a, const kl_field *f, const uint8_t *src, uint8_t *dst, bool random,
                      uint64_t seed, int64_t epoch, int64_t id);

/* shards(...) of the train block. */
typedef struct kl_shards_opts {
    const char *pattern;  /* brace ranges expanded (wds_tar.h) */
    int workers, prefetch;
    int64_t shuffle_buffer;
    bool cache;           /* cache = memory */
    bool skip;            /* on_error = skip */
    kl_augment augment;
} kl_shards_opts;

/* The index pass over every shard (names and sizes, no decoding), then
 * the first sample decoded: the fields and their types. Errors name the
 * shard, the member and the reason; returns 0 or -1. */
int kl_shards_load(const kl_shards_opts *o, kl_dataset *out);
/* After the inputs are bound (fields' used and classes set): every sample
 * must have the used fields (or is left out, on_error = skip); with
 * cache = memory, decodes them all when they fit in memory. The line
 * it writes into note says what it did. Returns 0 or -1 (reported). */
int kl_shards_prepare(kl_dataset *d, char *note, size_t n);
/* The shards of a shard set (0 for others); samples left out before
 * training (on_error = skip), and the first one's reason. */
int kl_shards_count(const kl_dataset *d);
int64_t kl_shards_skipped(const kl_dataset *d, const char **first);
/* A token file as a data set (see kl_dataset.tokens): train gives
 * (count - 1) / context random windows per epoch; otherwise limit (0:
 * all) evenly spaced fixed windows. Errors name the file (not a token
 * file, too short for the context); returns 0 or -1. */
int kl_tokens_dataset(const char *path, int64_t context, bool train, int64_t limit, kl_dataset *out);
/* Copies sample `id` (its position in the epoch's order) of a token data
 * set's epoch into tokens and targets (context i32 each, either NULL).
 * -1 with why (the file, what changed) when the file no longer holds the
 * window (truncated while the run reads it: kl_tokens_read). */
int kl_tokens_sample(const kl_dataset *d, bool train, uint64_t seed, int64_t epoch, int64_t id, int32_t *tokens,
                     int32_t *targets, char *why, size_t why_len);
/* The field named name, or -1. */
int kl_dataset_field(const kl_dataset *d, const char *name);
/* Field f feeds an input of dtype dt (u8 to any float, integers to
 * integers, floats to floats: the caller checks): the loader writes it in
 * dt (kl_field.feed) and fills it (used). -1 when an input bound before
 * reads it as another dtype (the field is written once per batch). */
int kl_dataset_bind_field(kl_dataset *d, int f, ir_dtype dt);

typedef struct kl_batch {
    int64_t index;     /* batch number within the epoch */
    int64_t size;      /* samples delivered: this rank's rows of the batch */
    /* Each used field's rows, in its feed dtype (kl_field.feed): the size
     * samples, then, in a short batch, the first ones again up to rows
     * (what an input of rows samples reads), ready to copy into the
     * step's inputs. */
    uint8_t *field[KL_MAX_FIELDS];
    int64_t rows;      /* the rows every field holds: kl_loader_opts.rows */
} kl_batch;

typedef struct kl_loader kl_loader;

typedef struct kl_loader_opts {
    int64_t batch;     /* samples per batch */
    bool shuffle;      /* in memory: a seeded permutation; shards: shard order and the shuffle buffer */
    bool drop_last;    /* the last partial batch of an epoch is dropped, else delivered short */
    uint64_t seed;
    int depth;         /* batches ready ahead (prefetch) */
    int workers;       /* decode threads */
    bool augment_random; /* training: shards' random augmentation; token files' random windows */
    /* One rank's share: rows [rows_first, rows_first + rows) of every
     * batch of the order above (rows = 0: all of them). The order is the
     * one global order, so N ranks with rows = batch / N see exactly the
     * samples one rank with the whole batch would; a rank decodes its
     * rows alone (the shards' bytes are still read past by every rank). */
    int64_t rows_first, rows;
} kl_loader_opts;

kl_loader *kl_loader_new_opts(const kl_dataset *d, const kl_loader_opts *o);
/* batch: samples per batch; the last partial batch of an epoch is dropped
 * when drop_last, else delivered short. One worker. */
kl_loader *kl_loader_new(const kl_dataset *d, int64_t batch, bool shuffle, bool drop_last, uint64_t seed, int depth);
void kl_loader_free(kl_loader *l);
int64_t kl_loader_batches(const kl_loader *l);
/* Starts epoch e (0-based): the order is a function of the seed and e. */
void kl_loader_start(kl_loader *l, int64_t epoch);
/* Starts epoch e at batch first: a resumed run; the batches before it
 * are not decoded. */
void kl_loader_start_at(kl_loader *l, int64_t epoch, int64_t first);
/* The next batch of the epoch, or NULL at its end or after an error
 * (kl_loader_failed); waits when the loader is behind (the wait is counted
 * in kl_loader_wait_seconds). */
const kl_batch *kl_loader_next(kl_loader *l);
void kl_loader_release(kl_loader *l, const kl_batch *b);
double kl_loader_wait_seconds(const kl_loader *l);
/* Bad data met while loading: with on_error = fail, the error (reported
 * by kl_loader_next's caller through this); NULL when none. */
const char *kl_loader_failed(const kl_loader *l);
/* Samples skipped so far (on_error = skip), and the first one's reason. */
int64_t kl_loader_skipped(const kl_loader *l, const char **first);

#endif
