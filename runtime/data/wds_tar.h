/* WebDataset shards: POSIX tar files read through libarchive, each sample
 * the run of consecutive members that share a key ("000123.png",
 * "000123.cls": key "000123", fields "png" and "cls"). The key is the
 * member's path up to the first dot of its file name; the field is the
 * rest, as WebDataset splits them. */
#ifndef KILN_WDS_TAR_H
#define KILN_WDS_TAR_H

#include <stddef.h>
#include <stdint.h>

/* Expands the brace ranges of a shard pattern as WebDataset writes them
 * ("train-{000000..000015}.tar"; a range keeps the width of its first
 * bound when that has leading zeros; several ranges multiply). Returns
 * the count of paths (malloc'd array in *out), or -1 with why. */
int kl_shard_expand(const char *pattern, char ***out, char *why, size_t n);

typedef struct kl_member {
    char *field;     /* "png", "cls", "input.npy" */
    uint8_t *data;   /* NULL when the reader only indexes */
    size_t size;
} kl_member;

typedef struct kl_raw_sample {
    char *key;
    int nmembers;
    kl_member *m;
} kl_raw_sample;

void kl_raw_sample_free(kl_raw_sample *s);
/* The member of field name, or NULL. */
const kl_member *kl_raw_sample_find(const kl_raw_sample *s, const char *field);

typedef struct kl_shard_reader kl_shard_reader;

/* Opens one shard; with_data false reads only the members' names and
 * sizes (the index pass: the data is skipped, by seeking where the file
 * allows). NULL with why when the file cannot be opened. */
kl_shard_reader *kl_shard_open(const char *path, int with_data, char *why, size_t n);
/* The next sample: 1, 0 at the shard's end, -1 with why (a truncated or
 * damaged archive names the member where it broke). */
int kl_shard_next(kl_shard_reader *r, kl_raw_sample *out, char *why, size_t n);
void kl_shard_close(kl_shard_reader *r);

#endif
