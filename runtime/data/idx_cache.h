/* gzip IDX files inflated once: their data kept in the private cache
 * folder's data/ (runtime/files/cache_dir.h), one entry per file, checked
 * against the file's identity and a CRC-32 before use (idx_cache.c).
 * Nothing here is an error: where the cache cannot be used, the caller
 * inflates the file as it would without one. */
#ifndef KILN_IDX_CACHE_H
#define KILN_IDX_CACHE_H

#include <stdint.h>

typedef struct idx_cache_head {
    char magic[8];
    uint64_t dev, ino, size;
    int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
    int64_t rank, dims[3];
    uint64_t bytes;    /* the data's, after the path */
    uint32_t crc;      /* of the data */
    uint32_t path_len; /* the file's real path follows the head */
} idx_cache_head;

typedef struct kl_idx_entry {
    char *path; /* the entry */
    char *real; /* the file's real path */
    idx_cache_head head;
} kl_idx_entry;

/* The entry of the gzip IDX file at path (open as fd) with rank
 * dimensions: 0 when the cache is on (KILN_DATA_CACHE is not 0) and the
 * file is large enough to gain from it, else -1 (nothing to close); -2
 * after printing why KILN_DATA_CACHE is refused. */
int kl_idx_cache_open(kl_idx_entry *e, int fd, const char *path, int rank);
/* The data from the entry when it is the file's: 0 with dims and data
 * (malloc'd) filled, else -1 and nothing allocated. */
int kl_idx_cache_read(const kl_idx_entry *e, int64_t *dims, uint8_t **data);
/* Writes the entry (after removing those whose file is gone or changed);
 * a failure leaves no entry. */
void kl_idx_cache_write(kl_idx_entry *e, const int64_t *dims, const uint8_t *data, int64_t total);
void kl_idx_cache_close(kl_idx_entry *e);

#endif
