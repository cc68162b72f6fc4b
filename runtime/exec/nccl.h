/* NCCL for the CUDA backend's collectives (runtime/exec/nccl.c).
 *
 * libnccl is opened with dlopen like the other CUDA libraries (the
 * executable starts where it is missing), every entry point is found once
 * (kl_nccl_load), and every call is checked: an error names the rank, the
 * collective, what it carried and ncclGetErrorString's message, and ends
 * the job (kl_comm_abort: a rank that stops while the others wait in a
 * collective would hang them).
 *
 * A communicator is bootstrapped over the kl_comm it serves (MPI):
 * ncclGetUniqueId on its rank 0, broadcast to the others, then
 * ncclCommInitRank on every rank, on the device current to the calling
 * thread. Collectives are enqueued on the stream given (the CUDA backend's
 * communication stream); the caller orders that stream against compute. */
#ifndef KILN_NCCL_H
#define KILN_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/comm/comm.h"

/* Finds every entry point Kiln uses in path, or (NULL) in $KILN_NCCL_LIB,
 * else libnccl.so.2 where the loader or the CUDA toolkit has it. 0, or -1
 * with the reason in why. Once per process: later calls answer the first's
 * result (path ignored). */
int kl_nccl_load(const char *path, char *why, size_t n);
/* The names of those entry points, NULL-terminated (for tests). */
const char *const *kl_nccl_entry_points(void);
/* NCCL's version as major.minor.patch ("2.27.7"); after kl_nccl_load. */
const char *kl_nccl_version(void);

typedef struct kl_nccl kl_nccl;

/* The NCCL communicator of c's ranks (c may be a world of one). The job
 * ends after an error (reported). */
kl_nccl *kl_nccl_open(kl_comm *c);
void kl_nccl_close(kl_nccl *nc);
kl_comm *kl_nccl_comm(const kl_nccl *nc);

/* Device memory, enqueued on stream (a CUstream). Counts in elements of
 * dt (f32, bf16, f16). */
void kl_nccl_all_reduce(kl_nccl *nc, const void *in, void *out, int64_t count, ir_dtype dt, kl_reduce_op op,
                        void *stream, const char *what);
/* in holds world x shard elements (the caller pads); out gets this rank's
 * shard of the sum. */
void kl_nccl_reduce_scatter(kl_nccl *nc, const void *in, void *out, int64_t shard, ir_dtype dt, void *stream,
                            const char *what);
/* out gets every rank's count elements of in, rank after rank. */
void kl_nccl_all_gather(kl_nccl *nc, const void *in, void *out, int64_t count, ir_dtype dt, void *stream,
                        const char *what);
void kl_nccl_broadcast(kl_nccl *nc, const void *in, void *out, int64_t count, ir_dtype dt, int root, void *stream,
                       const char *what);

#endif
