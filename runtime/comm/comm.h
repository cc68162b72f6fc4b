/* Ranks and collectives: the communicator of a run.
 *
 * A process started by an MPI launcher (mpirun, srun) is one rank of a
 * world; any other process is the only rank of a world of one, and MPI is
 * never opened. The launcher is detected from the variables it sets for
 * its processes (kl_comm_launcher), not by calling MPI_Init: an
 * MPI_Init outside a launcher starts a singleton runtime, which is slow,
 * may fail on machines without a network, and would tie every run to
 * MPI. libmpi is opened with dlopen (RTLD_GLOBAL, which Open MPI's plugins
 * need), so executables link nothing new and start where MPI is missing.
 *
 * A collective waits at most a timeout (kl_comm_set_timeout; default
 * KL_COMM_TIMEOUT_DEFAULT seconds) for the other ranks: then the ranks
 * that waited tell each other so, and the error names the collective and
 * the ranks that did not arrive before the job is aborted (a watchdog as
 * NCCL's and PyTorch's: a stopped rank must not hang the job forever).
 *
 * Every collective is checked: an error names the rank, the collective,
 * what it carried and MPI's message, and the job is aborted (a rank that
 * stops while the others wait in a collective would hang them). A world
 * of one makes every collective the identity. */
#ifndef KILN_COMM_H
#define KILN_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/support.h"
#include "ir/ir.h"

#define KL_COMM_TIMEOUT_DEFAULT 300.0

typedef enum kl_reduce_op { KL_REDUCE_SUM, KL_REDUCE_MAX } kl_reduce_op;

typedef struct kl_comm kl_comm;

/* One collective of a plan, as the backends run it (backend.h's
 * collective): in and out are the backend's memory (host memory for the
 * CPU, device memory for CUDA). all_reduce and broadcast: out gets in
 * combined over the ranks (in == out: in place); reduce_scatter: out gets
 * this rank's shard (kl_comm_shard_count) of the padded sum; all_gather:
 * out gets every rank's in, rank after rank. comm NULL: a world of one
 * (out gets in). */
typedef enum kl_coll_kind { KL_COLL_ALL_REDUCE, KL_COLL_REDUCE_SCATTER, KL_COLL_ALL_GATHER, KL_COLL_BROADCAST } kl_coll_kind;
typedef struct kl_coll {
    kl_coll_kind kind;
    kl_comm *comm;
    const void *in;
    void *out;
    int64_t count; /* elements of in */
    ir_dtype dt;
    kl_reduce_op op; /* all_reduce */
    int root;        /* broadcast */
    const char *what; /* the operand's name, for errors */
} kl_coll;

/* The launcher whose variables are in the environment ("mpirun (Open
 * MPI)", "srun/mpiexec (PMI)", "srun (PMIx)"), or NULL: then the process
 * is one rank. KILN_MPI=0 makes it NULL whatever the environment says. */
const char *kl_comm_launcher(void);
/* The run's communicator: MPI's world under a launcher, else a world of
 * one. NULL after an error (reported: libmpi missing or not Open MPI's,
 * MPI_Init failing). */
kl_comm *kl_comm_open(void);
int kl_comm_rank(const kl_comm *c);
int kl_comm_world(const kl_comm *c);
/* Whether a second thread may call MPI (MPI_THREAD_SERIALIZED or more,
 * asked for by kl_comm_open): the communication thread's condition. True
 * for a world of one. */
bool kl_comm_serialized(const kl_comm *c);
/* "world 4 (mpirun (Open MPI))" or "world 1 (no MPI launcher)". */
const char *kl_comm_desc(const kl_comm *c);

/* In place over count elements of buf (f32, bf16, f16, f64 or i64;
 * 16-bit floats are summed in f32 and rounded once). what names the data
 * in an error. The collectives abort the job after an error (reported),
 * so they return only when they succeeded. */
void kl_comm_all_reduce(kl_comm *c, void *buf, int64_t count, ir_dtype dt, kl_reduce_op op, const char *what);
/* One rank's share of count elements split over ranks: ceil(count /
 * ranks) (the last ranks' shares are padded with zeros). */
int64_t kl_comm_shard_count(int64_t count, int ranks);
/* reduce_scatter (sum): in (count elements, f32, bf16 or f16) is padded
 * with zeros to world x shard (kl_comm_shard_count), summed over the
 * ranks (16-bit floats in f32, rounded once), and rank r receives
 * elements [r shard, (r + 1) shard) of the sum in out (shard elements).
 * A world of one copies in to out. */
void kl_comm_reduce_scatter(kl_comm *c, const void *in, int64_t count, void *out, ir_dtype dt, const char *what);
/* all_gather: every rank's in (count elements, f32, bf16 or f16), rank
 * after rank, in out (world x count elements, bits as sent). */
void kl_comm_all_gather(kl_comm *c, const void *in, int64_t count, void *out, ir_dtype dt, const char *what);
/* rank_broadcast: root's buf on every rank, in place (bits as sent). */
void kl_comm_broadcast(kl_comm *c, void *buf, int64_t count, ir_dtype dt, int root, const char *what);
/* Tensor parallelism: c's ranks in groups of tp consecutive ranks (the
 * tensor-parallel groups) and, across them, groups of the ranks of equal
 * index in theirs (the data-parallel groups). Returns this rank's
 * data-parallel group, which holds c (closed with it) and this rank's
 * tensor-parallel group (kl_comm_tp); c itself when tp is 1 or c a world
 * of one. tp must divide c's world. */
kl_comm *kl_comm_split_tp(kl_comm *c, int tp);
/* Pipeline parallelism: c's ranks as P stages (rank r of c is stage r
 * mod P of data-parallel replica r / P). Returns this rank's
 * data-parallel group (the ranks of its stage), which holds c (closed
 * with it), this rank's pipeline group (kl_comm_pp: one rank per stage,
 * ranked by stage) and c's tensor-parallel group when c is the
 * data-parallel group of kl_comm_split_tp (tensor parallel innermost: a
 * world rank w is tensor-parallel rank w mod T of stage (w / T) mod P);
 * c itself when P is 1 or c a world of one. P must divide c's world. */
kl_comm *kl_comm_split_pp(kl_comm *c, int pp);
kl_comm *kl_comm_pp(kl_comm *c);
/* Point-to-point transfers between a group's ranks: send copies bytes
 * and returns at once (send_wait waits for every send still in flight);
 * recv waits for its message at most the timeout, as a collective
 * (comm_timeout). Messages of one source and tag arrive in order.
 * Errors end the job (reported). */
void kl_comm_send(kl_comm *c, const void *buf, size_t bytes, int dest, int tag, const char *what);
void kl_comm_recv(kl_comm *c, void *buf, size_t bytes, int src, int tag, const char *what);
void kl_comm_send_wait(kl_comm *c);
/* The world a data-parallel group was split from (through every split);
 * c itself otherwise. */
kl_comm *kl_comm_whole(kl_comm *c);
/* The tensor-parallel group of a data-parallel group, or NULL. */
kl_comm *kl_comm_tp(kl_comm *c);
/* Ends the job: MPI_Abort with code under a launcher (every rank stops),
 * exit(code) otherwise. */
KL_NORETURN void kl_comm_abort(kl_comm *c, int code);
/* The sum over the ranks of mine: a start-up agreement (checked like the
 * collectives, but not numbered for KILN_FAULT_COLLECTIVE, which counts
 * the training's collectives). mine itself for a world of one. */
int64_t kl_comm_sum_startup(kl_comm *c, int64_t mine, const char *what);
/* Every rank's bytes of mine (bytes each, the same on every rank), rank
 * after rank, in all: a start-up agreement, not numbered for
 * KILN_FAULT_COLLECTIVE. */
void kl_comm_gather_startup(kl_comm *c, const void *mine, size_t bytes, void *all, const char *what);
/* The seconds a collective waits for the other ranks before the job is
 * aborted with the ranks that did not arrive (0: forever); for c and the
 * groups split from its world. */
void kl_comm_set_timeout(kl_comm *c, double seconds);
/* That timeout (KL_COMM_TIMEOUT_DEFAULT unless set). */
double kl_comm_timeout(const kl_comm *c);
/* A wait outside the collectives above timed out (the CUDA backend's
 * wait for work holding NCCL collectives): what did not complete ("the
 * GPU's queued work ..."); as a collective's timeout, this rank tells
 * c's other ranks, the error names the ranks that did not arrive, and
 * the job is aborted. */
KL_NORETURN void kl_comm_timed_out(kl_comm *c, const char *what);
/* Runs k on host memory with the calls above (the CPU backend's
 * collective). */
void kl_comm_run(const kl_coll *k);
/* This rank's index among the ranks on its machine
 * (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), and how many they are: the
 * GPU a rank takes. 0 and 1 for a world of one. */
int kl_comm_local_rank(const kl_comm *c);
int kl_comm_local_size(const kl_comm *c);
/* The machines the world runs on (the ranks whose local rank is 0): 1
 * for a world of one. */
int kl_comm_hosts(const kl_comm *c);
/* MPI_Finalize under a launcher; frees c. */
void kl_comm_close(kl_comm *c);

#endif
