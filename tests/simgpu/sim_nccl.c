/* The simulated device's NCCL: the calls runtime/exec/nccl.c makes
 * (ncclGetVersion, ncclGetErrorString, ncclGetUniqueId, ncclCommInitRank,
 * ncclCommDestroy, ncclAllReduce, ncclReduceScatter, ncclAllGather,
 * ncclBroadcast), plus ncclCommGetAsyncError, ncclCommAbort and
 * ncclGroupStart/ncclGroupEnd, across the ranks (processes) of a job on
 * one machine.
 *
 * A communicator is a POSIX shared memory object named by its unique id
 * (ncclGetUniqueId: a magic, the pid, random bits), which the ranks pass
 * between them as with NCCL (Kiln: over MPI). The first rank to open it
 * sizes it (zero-filled: zero is its initial state); each rank takes its
 * slot (its pid, the collective it is in, a chunk of staging memory);
 * rank 0 unlinks the name once every rank has joined.
 *
 * A collective is queued on the stream given (sim_enqueue: it runs in
 * the stream's order, and is recorded while the stream captures a graph)
 * and runs on its worker chunk by chunk: each rank copies its chunk into
 * its slot and posts it; once every rank posted, each reads the slots in
 * rank order (sums the same on every rank; 16-bit floats summed in f32
 * and rounded once, as Kiln's CPU collectives) into its receive buffer,
 * marks the chunk done and waits until every rank did. Each round also
 * compares the ranks' calls (the collective's number, kind, count, data
 * type, op, root): when they disagree every rank sees it in the same
 * round and fails (ncclInvalidUsage, a sticky device error with the
 * message) instead of hanging or mixing the data. The waits check the
 * peers' pids: a rank that ended is reported (ncclRemoteError) within a
 * second. A rank that is alive but stopped is not detected here: Kiln's
 * comm_timeout (backend_cuda.c's wait for the device) covers it, and
 * ncclCommAbort ends the waits. */
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

#define ID_MAGIC "kiln-simnccl"
/* Staging per rank and round. */
#define CHUNK_BYTES ((size_t)1 << 20)
#define MAX_RANKS 1024

enum { K_ALL_REDUCE, K_REDUCE_SCATTER, K_ALL_GATHER, K_BROADCAST };
static const char *const kind_names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast"};

/* What a rank calls in a round: compared across the ranks. */
typedef struct call_meta {
    uint64_t seq; /* the communicator's collective number, from 1 */
    int32_t kind, dtype, op, root;
    uint64_t count; /* count (all-reduce, broadcast), recvcount, sendcount */
} call_meta;

typedef struct slot {
    int32_t pid;
    int32_t pad;
    uint64_t posted, done; /* rounds */
    call_meta meta;
    char pad2[64];
} slot;

typedef struct shared {
    int32_t nranks; /* set by the first rank (compare-and-swap from 0) */
    int32_t joined;
    char pad[56];
    slot slots[]; /* nranks of them, then nranks staging chunks */
} shared;

struct ncclComm {
    shared *sh;
    size_t map_bytes;
    int nranks, rank;
    char name[64];
    uint64_t seq, round;      /* run on the stream's worker */
    volatile int aborted;     /* ncclCommAbort */
    volatile int async_error; /* ncclResult_t of a failed collective */
};

static char *staging(ncclComm_t c, int r) { return (char *)&c->sh->slots[c->nranks] + (size_t)r * CHUNK_BYTES; }

/* ---- errors ---- */

SIM_EXPORT ncclResult_t ncclGetVersion(int *version)
{
    SIM_FAULT(ncclResult_t, "ncclGetVersion");
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

SIM_EXPORT const char *ncclGetErrorString(ncclResult_t r)
{
    /* NCCL's own strings. */
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

/* A failure inside a queued collective: the message, the communicator's
 * asynchronous error, and a sticky device error (every later CUDA call
 * returns it, so the host's next synchronisation sees it). */
static void fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char line[768];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    c->async_error = r;
    sim_fail(CUDA_ERROR_LAUNCH_FAILED, "NCCL rank %d of %d: %s (%s)", c->rank, c->nranks, line, ncclGetErrorString(r));
}

/* ---- waiting for the peers ---- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Whether process pid is gone (or a zombie not yet reaped). */
static bool pid_gone(int pid)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) && errno == ESRCH)
        return true;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    return p && (p[1] == ' ') && (p[2] == 'Z' || p[2] == 'X');
}

/* Waits until field(slot r) >= want for every rank (posted or done), or
 * a peer ended, or the communicator was aborted: 0, or -1 (reported). */
static int wait_all(ncclComm_t c, size_t field, uint64_t want, const char *call)
{
    double last_check = now_s();
    for (int spins = 0;; spins++) {
        int missing = -1;
        for (int r = 0; r < c->nranks; r++) {
            uint64_t v = __atomic_load_n((uint64_t *)((char *)&c->sh->slots[r] + field), __ATOMIC_ACQUIRE);
            if (v < want) {
                missing = r;
                break;
            }
        }
        if (missing < 0)
            return 0;
        if (c->aborted) {
            fail(c, ncclInvalidUsage, "%s (collective %llu) ended by ncclCommAbort", call, (unsigned long long)c->seq);
            return -1;
        }
        if (spins < 200) {
            sched_yield();
            continue;
        }
        struct timespec d = {0, 200000};
        nanosleep(&d, NULL);
        double t = now_s();
        if (t - last_check > 0.05) {
            last_check = t;
            for (int r = 0; r < c->nranks; r++) {
                int pid = __atomic_load_n(&c->sh->slots[r].pid, __ATOMIC_ACQUIRE);
                if (r != c->rank && pid_gone(pid)) {
                    fail(c, ncclRemoteError, "rank %d (pid %d) ended while rank %d waited in %s (collective %llu)", r,
                         pid, c->rank, call, (unsigned long long)c->seq);
                    return -1;
                }
            }
        }
    }
}

/* ---- the communicator ---- */

SIM_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    SIM_FAULT(ncclResult_t, "ncclGetUniqueId");
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    static unsigned counter;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    unsigned long long bits = (unsigned long long)t.tv_nsec ^ ((unsigned long long)t.tv_sec << 30) ^
                              ((unsigned long long)__atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST) << 52);
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        unsigned long long r = 0;
        if (read(fd, &r, sizeof r) == (ssize_t)sizeof r)
            bits ^= r;
        close(fd);
    }
    snprintf(id->internal, sizeof id->internal, "%s /kiln-simnccl-%d-%016llx", ID_MAGIC, (int)getpid(), bits);
    return ncclSuccess;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char line[768];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sim_say("NCCL: %s", line);
}

SIM_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
    SIM_FAULT(ncclResult_t, "ncclCommInitRank");
    if (!out)
        return ncclInvalidArgument;
    *out = NULL;
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) {
        say("ncclCommInitRank: rank %d of %d ranks is out of range", rank, nranks);
        return ncclInvalidArgument;
    }
    id.internal[sizeof id.internal - 1] = 0;
    const char *name = strchr(id.internal, ' ');
    if (strncmp(id.internal, ID_MAGIC " ", strlen(ID_MAGIC) + 1) || !name || strlen(name + 1) >= 64) {
        say("ncclCommInitRank: the unique id is not one ncclGetUniqueId made");
        return ncclInvalidArgument;
    }
    name++;
    ncclComm_t c = calloc(1, sizeof *c);
    c->nranks = nranks, c->rank = rank;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->map_bytes = sizeof(shared) + (size_t)nranks * (sizeof(slot) + CHUNK_BYTES);
    int fd = shm_open(c->name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) {
        say("ncclCommInitRank: shm_open %s: %s", c->name, strerror(errno));
        free(c);
        return ncclSystemError;
    }
    struct stat st;
    /* Grown, never shrunk: a rank told of more ranks sees the mismatch below. */
    if (fstat(fd, &st) || ((size_t)st.st_size < c->map_bytes && ftruncate(fd, (off_t)c->map_bytes))) {
        say("ncclCommInitRank: sizing %s: %s", c->name, strerror(errno));
        close(fd);
        free(c);
        return ncclSystemError;
    }
    c->sh = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c->sh == MAP_FAILED) {
        say("ncclCommInitRank: mapping %s: %s", c->name, strerror(errno));
        free(c);
        return ncclSystemError;
    }
    int32_t zero = 0;
    if (!__atomic_compare_exchange_n(&c->sh->nranks, &zero, nranks, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) &&
        zero != nranks) {
        say("ncclCommInitRank: rank %d was told of %d ranks, another rank of %d", rank, nranks, zero);
        munmap(c->sh, c->map_bytes);
        free(c);
        return ncclInvalidUsage;
    }
    int32_t none = 0;
    if (!__atomic_compare_exchange_n(&c->sh->slots[rank].pid, &none, (int32_t)getpid(), false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST)) {
        say("ncclCommInitRank: rank %d joined twice (pids %d and %d)", rank, none, (int)getpid());
        munmap(c->sh, c->map_bytes);
        free(c);
        return ncclInvalidUsage;
    }
    __atomic_add_fetch(&c->sh->joined, 1, __ATOMIC_SEQ_CST);
    /* Every rank joins (NCCL's bootstrap blocks the same way); a rank
     * that ended before joining ends the wait after 300 s. */
    double t0 = now_s();
    while (__atomic_load_n(&c->sh->joined, __ATOMIC_SEQ_CST) < nranks) {
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
        bool gone = false;
        for (int r = 0; r < nranks; r++)
            gone |= r != rank && pid_gone(__atomic_load_n(&c->sh->slots[r].pid, __ATOMIC_ACQUIRE));
        /* (A rank that ended after every rank joined is the collectives' to see.) */
        if ((gone || now_s() - t0 > 300) && __atomic_load_n(&c->sh->joined, __ATOMIC_SEQ_CST) < nranks) {
            say("ncclCommInitRank: rank %d: %s before every rank joined", rank,
                gone ? "a rank ended" : "300 s passed");
            shm_unlink(c->name); /* the communicator is dead: no rank joins it later */
            munmap(c->sh, c->map_bytes);
            free(c);
            return gone ? ncclRemoteError : ncclSystemError;
        }
    }
    /* Every rank has it mapped: the name is no longer needed. */
    if (!rank)
        shm_unlink(c->name);
    *out = c;
    return ncclSuccess;
}

SIM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    SIM_FAULT(ncclResult_t, "ncclCommDestroy");
    if (!c)
        return ncclInvalidArgument;
    /* NCCL finishes the communicator's queued work first. */
    sim_device_idle();
    munmap(c->sh, c->map_bytes);
    free(c);
    return ncclSuccess;
}

SIM_EXPORT ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!c)
        return ncclInvalidArgument;
    /* The worker in a wait sees it and ends the collective; the memory
     * stays mapped (the worker may still read it). */
    c->aborted = 1;
    return ncclSuccess;
}

SIM_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
    if (!c || !r)
        return ncclInvalidArgument;
    *r = (ncclResult_t)c->async_error;
    return ncclSuccess;
}

/* ---- the collectives ---- */

typedef struct coll_arg {
    ncclComm_t c;
    int kind;
    const char *send;
    char *recv;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t op;
    int root;
} coll_arg;

static size_t dtype_size(ncclDataType_t dt)
{
    switch (dt) {
    case ncclFloat32: return 4;
    case ncclFloat64: return 8;
    case ncclBfloat16:
    case ncclFloat16: return 2;
    default: return 0;
    }
}

static const char *dtype_name(int dt)
{
    switch (dt) {
    case ncclFloat32: return "f32";
    case ncclFloat64: return "f64";
    case ncclBfloat16: return "bf16";
    case ncclFloat16: return "f16";
    default: return "?";
    }
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);       /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float load(const char *p, int dt)
{
    if (dt == ncclFloat32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    if (dt == ncclBfloat16)
        return bf16_to_f32(h);
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}

static void store(char *p, int dt, float v)
{
    if (dt == ncclFloat32) {
        memcpy(p, &v, 4);
    } else if (dt == ncclBfloat16) {
        uint16_t h = f32_to_bf16(v);
        memcpy(p, &h, 2);
    } else {
        _Float16 x = (_Float16)v;
        memcpy(p, &x, 2);
    }
}

/* out[i] = op over the ranks' staging[off + i], in rank order. */
static void reduce_chunk(ncclComm_t c, char *out, size_t off, size_t n, int dt, int op)
{
    size_t esz = dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        if (dt == ncclFloat64) {
            double acc = 0;
            for (int r = 0; r < c->nranks; r++) {
                double v;
                memcpy(&v, staging(c, r) + (off + i) * esz, 8);
                acc = r == 0 ? v : op == ncclMax ? (v > acc ? v : acc) : acc + v;
            }
            memcpy(out + i * esz, &acc, 8);
            continue;
        }
        float acc = 0;
        for (int r = 0; r < c->nranks; r++) {
            float v = load(staging(c, r) + (off + i) * esz, dt);
            acc = r == 0 ? v : op == ncclMax ? (v > acc ? v : acc) : acc + v;
        }
        store(out + i * esz, dt, acc);
    }
}

static void describe(char *s, size_t n, const call_meta *m)
{
    const char *op = m->kind == K_ALL_REDUCE || m->kind == K_REDUCE_SCATTER ? (m->op == ncclMax ? " max" : " sum") : "";
    if (m->kind == K_BROADCAST)
        snprintf(s, n, "%s from root %d of %llu %s elements", kind_names[m->kind], (int)m->root,
                 (unsigned long long)m->count, dtype_name(m->dtype));
    else
        snprintf(s, n, "%s%s of %llu %s elements", kind_names[m->kind], op, (unsigned long long)m->count,
                 dtype_name(m->dtype));
}

/* One round: post this rank's staging (filled by the caller), wait for
 * every rank, check that they call the same collective. 0 or -1. */
static int round_begin(ncclComm_t c, const call_meta *m)
{
    slot *me = &c->sh->slots[c->rank];
    me->meta = *m;
    c->round++;
    __atomic_store_n(&me->posted, c->round, __ATOMIC_RELEASE);
    if (wait_all(c, offsetof(slot, posted), c->round, kind_names[m->kind]))
        return -1;
    for (int r = 0; r < c->nranks; r++) {
        const call_meta *t = &c->sh->slots[r].meta;
        if (t->seq != m->seq || t->kind != m->kind || t->count != m->count || t->dtype != m->dtype ||
            (m->kind != K_ALL_GATHER && m->kind != K_BROADCAST && t->op != m->op) ||
            (m->kind == K_BROADCAST && t->root != m->root)) {
            const call_meta *lo = r < c->rank ? t : m, *hi = r < c->rank ? m : t;
            char a[160], b[160];
            describe(a, sizeof a, lo);
            describe(b, sizeof b, hi);
            fail(c, ncclInvalidUsage,
                 "the ranks disagree in collective %llu: rank %d calls %s, rank %d calls %s%s", (unsigned long long)m->seq,
                 r < c->rank ? r : c->rank, a, r < c->rank ? c->rank : r, b,
                 t->seq != m->seq ? " (a rank called a collective more or fewer times)" : "");
            return -1;
        }
    }
    return 0;
}

static int round_end(ncclComm_t c, const char *call)
{
    __atomic_store_n(&c->sh->slots[c->rank].done, c->round, __ATOMIC_RELEASE);
    return wait_all(c, offsetof(slot, done), c->round, call);
}

static void run_coll(void *p)
{
    coll_arg *a = p;
    ncclComm_t c = a->c;
    if (c->async_error)
        return;
    call_meta m = {++c->seq, a->kind, (int32_t)a->dt, (int32_t)a->op, a->root, a->count};
    size_t esz = dtype_size(a->dt), world = (size_t)c->nranks;
    /* The buffers' accesses, for the sanitizer's cross-stream check. */
    size_t send_n = a->kind == K_REDUCE_SCATTER ? a->count * world : a->count;
    size_t recv_n = a->kind == K_ALL_GATHER ? a->count * world : a->count;
    if (a->kind != K_BROADCAST || c->rank == a->root)
        sim_san_access(kind_names[a->kind], "the send buffer", a->send, send_n * esz, false);
    sim_san_access(kind_names[a->kind], "the receive buffer", a->recv, recv_n * esz, true);
    char *mine = staging(c, c->rank);
    /* Elements per round: all-reduce and broadcast move count, reduce-
     * scatter world blocks of recvcount, all-gather sendcount. */
    size_t per = CHUNK_BYTES / esz / (a->kind == K_REDUCE_SCATTER ? world : 1);
    size_t total = a->count;
    size_t off = 0;
    do {
        size_t n = total - off < per ? total - off : per;
        switch (a->kind) {
        case K_ALL_REDUCE:
        case K_ALL_GATHER: memcpy(mine, a->send + off * esz, n * esz); break;
        case K_BROADCAST:
            if (c->rank == a->root)
                memcpy(mine, a->send + off * esz, n * esz);
            break;
        case K_REDUCE_SCATTER:
            for (size_t d = 0; d < world; d++)
                memcpy(mine + d * n * esz, a->send + (d * total + off) * esz, n * esz);
            break;
        }
        if (round_begin(c, &m))
            return;
        switch (a->kind) {
        case K_ALL_REDUCE: reduce_chunk(c, a->recv + off * esz, 0, n, a->dt, a->op); break;
        case K_REDUCE_SCATTER: reduce_chunk(c, a->recv + off * esz, (size_t)c->rank * n, n, a->dt, a->op); break;
        case K_ALL_GATHER:
            for (size_t r = 0; r < world; r++)
                memcpy(a->recv + (r * total + off) * esz, staging(c, (int)r), n * esz);
            break;
        case K_BROADCAST: memcpy(a->recv + off * esz, staging(c, a->root), n * esz); break;
        }
        if (round_end(c, kind_names[a->kind]))
            return;
        off += n;
    } while (off < total);
}

static ncclResult_t enqueue(int kind, const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                            int root, ncclComm_t c, cudaStream_t stream)
{
    const char *call = kind_names[kind];
    if (!c) {
        say("%s: no communicator", call);
        return ncclInvalidArgument;
    }
    size_t esz = dtype_size(dt);
    if (!esz) {
        say("%s: data type %d is not one Kiln sends (f32, f64, bf16, f16)", call, (int)dt);
        return ncclInvalidArgument;
    }
    if (op != ncclSum && op != ncclMax) {
        say("%s: reduction op %d is not sum or max", call, (int)op);
        return ncclInvalidArgument;
    }
    if (kind == K_BROADCAST && (root < 0 || root >= c->nranks)) {
        say("%s: root %d is not a rank of %d", call, root, c->nranks);
        return ncclInvalidArgument;
    }
    if (c->async_error)
        return (ncclResult_t)c->async_error;
    size_t world = (size_t)c->nranks;
    size_t send_n = kind == K_REDUCE_SCATTER ? count * world : count;
    size_t recv_n = kind == K_ALL_GATHER ? count * world : count;
    bool needs_send = kind != K_BROADCAST || root == c->rank;
    if (count && ((needs_send && !sim_mem_check(call, "the send buffer", send, send_n * esz)) ||
                  !sim_mem_check(call, "the receive buffer", recv, recv_n * esz))) {
        say("%s: the buffers (%zu and %zu %s elements) are not inside device allocations", call, send_n, recv_n,
            dtype_name(dt));
        return ncclInvalidArgument;
    }
    if (!count)
        return ncclSuccess;
    coll_arg a = {c, kind, send, recv, count, dt, op, root};
    return sim_enqueue((CUstream)stream, run_coll, &a, sizeof a) ? ncclUnhandledCudaError : ncclSuccess;
}

SIM_EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                      ncclComm_t c, cudaStream_t stream)
{
    SIM_FAULT(ncclResult_t, "ncclAllReduce");
    return enqueue(K_ALL_REDUCE, send, recv, count, dt, op, 0, c, stream);
}

SIM_EXPORT ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t dt,
                                          ncclRedOp_t op, ncclComm_t c, cudaStream_t stream)
{
    SIM_FAULT(ncclResult_t, "ncclReduceScatter");
    return enqueue(K_REDUCE_SCATTER, send, recv, recvcount, dt, op, 0, c, stream);
}

SIM_EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t dt, ncclComm_t c,
                                      cudaStream_t stream)
{
    SIM_FAULT(ncclResult_t, "ncclAllGather");
    return enqueue(K_ALL_GATHER, send, recv, sendcount, dt, ncclSum, 0, c, stream);
}

SIM_EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                                      ncclComm_t c, cudaStream_t stream)
{
    SIM_FAULT(ncclResult_t, "ncclBroadcast");
    return enqueue(K_BROADCAST, send, recv, count, dt, ncclSum, root, c, stream);
}

/* Group calls: NCCL launches a group's collectives together at
 * ncclGroupEnd. Here each is queued when called, in the order every rank
 * calls them (which NCCL requires too), so a group needs only its
 * nesting checked. */
static __thread int group_depth;

SIM_EXPORT ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

SIM_EXPORT ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0) {
        say("ncclGroupEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    group_depth--;
    return ncclSuccess;
}
