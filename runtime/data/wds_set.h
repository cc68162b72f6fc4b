/* A data set of WebDataset shards: the index the first pass builds, and
 * the settings of the train block's shards(...). Private to runtime/data/
 * (wds_data.c builds it, loader.c streams it). */
#ifndef KILN_WDS_SET_H
#define KILN_WDS_SET_H

#include "data.h"

struct kl_shard_set {
    int nshards;
    char **paths;
    int64_t *base;       /* nshards + 1: the first sample id of each shard */
    int64_t total;       /* samples in the shards, good or bad */
    char **keys;         /* per id */
    uint8_t *has;        /* per id: a bit per field of the data set present */
    uint8_t *bad;        /* per id: left out (on_error = skip) */
    bool skip;           /* on_error = skip */
    bool cached_wanted;  /* cache = memory */
    bool cached;         /* the used fields are decoded in the data set's data */
    int workers, prefetch;
    int64_t shuffle_buffer;
    kl_augment augment;
    int64_t skipped;     /* samples left out before training */
    char first_skip[700];
};

#include "wds_tar.h"

/* The shard of sample id. */
int kl_shard_of(const struct kl_shard_set *ss, int64_t id);
/* Decodes the used fields of raw sample id into dst[f] (each field's
 * bytes): each must be present, of the field's type, and a class label
 * in range. -1 with why: "SHARD: member KEY.FIELD: reason". */
int kl_shards_decode_sample(const kl_dataset *d, const kl_raw_sample *s, int64_t id, uint8_t *const *dst, char *why,
                            size_t n);

#endif
