/* TensorBoard event files, written by hand (runtime/observe/tboard.c): no
 * TensorFlow or protobuf library.
 *
 * A file is a sequence of TFRecords (length, masked CRC32C of the length,
 * the data, masked CRC32C of the data), each holding one Event protocol
 * buffer: first a file_version event, then one event per scalar (tag,
 * step, wall time, value). Each scalar is flushed when written, so
 * TensorBoard shows a run while it trains. */
#ifndef KILN_TBOARD_H
#define KILN_TBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct kl_tboard {
    FILE *f;
    char *path;
    int failed; /* a write failed (reported once) */
} kl_tboard;

/* Creates dir (and its parents) and opens a new event file in it,
 * events.out.tfevents.<seconds>.<host>.<pid>.kiln. NULL after an error
 * naming the folder. */
kl_tboard *kl_tboard_open(const char *dir);
/* One scalar at step, stamped with the wall time (NULL tb: nothing). */
void kl_tboard_scalar(kl_tboard *tb, const char *tag, int64_t step, double value);
/* Closes the file; -1 when any write failed (reported). NULL is fine. */
int kl_tboard_close(kl_tboard *tb);

/* CRC32C (Castagnoli) of n bytes, and TFRecord's mask of it (exposed for
 * the unit test against known values). */
uint32_t kl_crc32c(const void *p, size_t n);
uint32_t kl_crc32c_masked(const void *p, size_t n);

#endif
