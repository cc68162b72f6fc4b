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

typedef struct kl_dataset {
    char *name;
    int64_t count;
    int64_t sample_bytes;  /* bytes of features per sample */
    int64_t shape[3];      /* per-sample shape (rank 1 to 3) */
    int rank;
    uint8_t *features;     /* count * sample_bytes */
    int32_t *labels;       /* count */
    int32_t max_label;
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

typedef struct kl_batch {
    int64_t index;     /* batch number within the epoch */
    int64_t size;
    uint8_t *features; /* size * sample_bytes */
    int32_t *labels;
} kl_batch;

typedef struct kl_loader kl_loader;

/* batch: samples per batch; the last partial batch of an epoch is dropped
 * when drop_last, else delivered short. */
kl_loader *kl_loader_new(const kl_dataset *d, int64_t batch, bool shuffle, bool drop_last, uint64_t seed, int depth);
void kl_loader_free(kl_loader *l);
int64_t kl_loader_batches(const kl_loader *l);
/* Starts epoch e (0-based): the order is a function of the seed and e. */
void kl_loader_start(kl_loader *l, int64_t epoch);
/* The next batch of the epoch, or NULL at its end; waits when the loader
 * is behind (the wait is counted in kl_loader_wait_seconds). */
const kl_batch *kl_loader_next(kl_loader *l);
void kl_loader_release(kl_loader *l, const kl_batch *b);
double kl_loader_wait_seconds(const kl_loader *l);

double kl_now(void);

#endif
