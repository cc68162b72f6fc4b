/* The communicator (comm.h): Open MPI through dlopen, or a world of one.
 *
 * Open MPI's handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, ...) are the
 * addresses of globals in libmpi, so they are found with dlsym; MPICH's
 * are integers in its header, which this file does not use, so a libmpi
 * without Open MPI's globals is refused with that reason. */
#include <dlfcn.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "base/scalar.h"

/* Sanitizer builds: what Open MPI allocates in MPI_Init and MPI_Finalize
 * and keeps for the process's life is no leak of Kiln's, and
 * tests/lsan.supp cannot name it (the allocations' stacks end in the
 * plugins MPI_Finalize unloads, "<unknown module>"): LeakSanitizer
 * ignores what this thread allocates in those two calls, and in the
 * calls that make the communicators kept until MPI_Finalize (the
 * watchdog's duplicates, the groups' splits). */
#if defined(__SANITIZE_ADDRESS__)
#include <fcntl.h>
#include <sanitizer/lsan_interface.h>
#include <sys/syscall.h>
#include <unistd.h>
#define LEAKS_IGNORED_BEGIN() __lsan_disable()
#define LEAKS_IGNORED_END() __lsan_enable()

/* Open MPI's own threads (its progress loop) allocate too, with stacks
 * that the fast unwinder cuts in the unloaded plugins: a process started
 * by mpirun unwinds fully at each allocation (about twice as slow), so
 * that tests/lsan.supp's names match. ASan asks for these defaults before
 * it or the C library is up: no instrumentation, no intercepted call,
 * the environment read with raw system calls. ASAN_OPTIONS still wins. */
const char *__asan_default_options(void);
__attribute__((no_sanitize("address", "undefined"))) const char *__asan_default_options(void)
{
    static char env[65536];
    static const char key[] = "OMPI_COMM_WORLD_SIZE=";
    long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/environ", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return "";
    long n = syscall(SYS_read, fd, env, sizeof env - 1);
    syscall(SYS_close, fd);
    for (long i = 0; n > 0 && i + (long)sizeof key - 1 <= n; i++) {
        if (i > 0 && env[i - 1] != 0)
            continue;
        long k = 0;
        while (k < (long)sizeof key - 1 && env[i + k] == key[k])
            k++;
        if (k == (long)sizeof key - 1)
            return "fast_unwind_on_malloc=0";
    }
    return "";
}
#else
#define LEAKS_IGNORED_BEGIN() ((void)0)
#define LEAKS_IGNORED_END() ((void)0)
#endif

typedef void *mpi_handle;

typedef struct mpi_api {
    void *lib;
    int (*Initialized)(int *);
    int (*Init)(int *, char ***);
    int (*Init_thread)(int *, char ***, int, int *);
    int (*Query_thread)(int *);
    int (*Comm_rank)(mpi_handle, int *);
    int (*Comm_size)(mpi_handle, int *);
    int (*Comm_set_errhandler)(mpi_handle, mpi_handle);
    int (*Comm_split)(mpi_handle, int, int, mpi_handle *);
    int (*Comm_split_type)(mpi_handle, int, int, mpi_handle, mpi_handle *);
    int (*Comm_free)(mpi_handle *);
    int (*Reduce_scatter_block)(const void *, void *, int, mpi_handle, mpi_handle, mpi_handle);
    int (*Allgather)(const void *, int, mpi_handle, void *, int, mpi_handle, mpi_handle);
    int (*Bcast)(void *, int, mpi_handle, int, mpi_handle);
    int (*Iallreduce)(const void *, void *, int, mpi_handle, mpi_handle, mpi_handle, mpi_handle *);
    int (*Ireduce_scatter_block)(const void *, void *, int, mpi_handle, mpi_handle, mpi_handle, mpi_handle *);
    int (*Iallgather)(const void *, int, mpi_handle, void *, int, mpi_handle, mpi_handle, mpi_handle *);
    int (*Ibcast)(void *, int, mpi_handle, int, mpi_handle, mpi_handle *);
    int (*Test)(mpi_handle *, int *, void *);
    int (*Isend)(const void *, int, mpi_handle, int, int, mpi_handle, mpi_handle *);
    int (*Iprobe)(int, int, mpi_handle, int *, void *);
    int (*Recv)(void *, int, mpi_handle, int, int, mpi_handle, void *);
    int (*Irecv)(void *, int, mpi_handle, int, int, mpi_handle, mpi_handle *);
    int (*Comm_dup)(mpi_handle, mpi_handle *);
    int (*Error_string)(int, char *, int *);
    int (*Abort)(mpi_handle, int);
    int (*Finalize)(void);
    mpi_handle world, errors_return, f32, f64, i64, u16, byte, sum, max, info_null;
} mpi_api;

/* Open MPI's MPI_THREAD_SERIALIZED: any thread may call MPI, one at a
 * time (the communication thread, runtime/comm/comm_thread.h). */
#define MPI_THREAD_SERIALIZED_OMPI 2
/* Open MPI's MPI_COMM_TYPE_SHARED: the ranks that share memory (a node). */
#define MPI_COMM_TYPE_SHARED_OMPI 0

struct kl_comm {
    int rank, world;
    int local_rank, local_size; /* among the ranks on this machine */
    int hosts;                  /* machines the world runs on */
    int thread_level;           /* what MPI provides (MPI_THREAD_*) */
    int64_t calls, fail_call;   /* collectives so far; KILN_FAULT_COLLECTIVE's (0: none) */
    char desc[200];
    mpi_api *mpi; /* NULL: a world of one */
    /* kl_comm_split_tp: a data-parallel group holds its world (parent,
     * which it closes) and its rank's tensor-parallel group (tp). */
    kl_comm *parent, *tp;
    /* kl_comm_split_pp: a data-parallel group holds its rank's pipeline
     * group (pp); sends not yet complete (kl_comm_send), with their copies. */
    kl_comm *pp;
    KL_VEC(mpi_handle) sends;
    KL_VEC(void *) sent;
    bool group; /* made by split: MPI_Finalize is the world's */
    /* The watchdog (comm_wait): a collective waits at most timeout
     * seconds (0: forever); side is a duplicate of the communicator for
     * the ranks' reports after a timeout; world_rank[i] is the world's
     * index of this communicator's rank i; seq numbers the collectives. */
    double timeout;
    mpi_handle side;
    int *world_rank;
    int64_t seq;
};

#define MPI_IN_PLACE_OMPI ((void *)1)

const char *kl_comm_launcher(void)
{
    const char *off = getenv("KILN_MPI");
    if (off && !strcmp(off, "0"))
        return NULL;
    /* Each is set by a launcher for the processes it starts, and only
     * there: Open MPI's mpirun, Hydra's mpiexec or srun with PMI-2, srun
     * or prterun with PMIx. SLURM_* alone is not enough: a batch script
     * runs with them, outside any srun. */
    if (getenv("OMPI_COMM_WORLD_SIZE"))
        return "mpirun (Open MPI)";
    if (getenv("PMIX_RANK"))
        return "srun/prterun (PMIx)";
    if (getenv("PMI_SIZE"))
        return "srun/mpiexec (PMI)";
    return NULL;
}

static int open_mpi(mpi_api *m, char *why, size_t n)
{
    const char *names[] = {"libmpi.so.40", "libmpi.so", NULL};
    for (int i = 0; names[i] && !m->lib; i++)
        m->lib = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (!m->lib) {
        snprintf(why, n, "cannot open libmpi.so.40 (%s); install Open MPI (Debian: openmpi-bin libopenmpi-dev)", dlerror());
        return -1;
    }
#define SYM(field, name)                                                                       \
    if (!(*(void **)&m->field = dlsym(m->lib, name))) {                                        \
        snprintf(why, n, "libmpi has no %s (Kiln uses Open MPI's library; MPICH is not supported yet)", name); \
        return -1;                                                                             \
    }
    SYM(Initialized, "MPI_Initialized")
    SYM(Init, "MPI_Init")
    SYM(Init_thread, "MPI_Init_thread")
    SYM(Query_thread, "MPI_Query_thread")
    SYM(Comm_rank, "MPI_Comm_rank")
    SYM(Comm_size, "MPI_Comm_size")
    SYM(Comm_set_errhandler, "MPI_Comm_set_errhandler")
    SYM(Comm_split, "MPI_Comm_split")
    SYM(Comm_split_type, "MPI_Comm_split_type")
    SYM(Comm_free, "MPI_Comm_free")
    SYM(Reduce_scatter_block, "MPI_Reduce_scatter_block")
    SYM(Allgather, "MPI_Allgather")
    SYM(Bcast, "MPI_Bcast")
    SYM(Iallreduce, "MPI_Iallreduce")
    SYM(Ireduce_scatter_block, "MPI_Ireduce_scatter_block")
    SYM(Iallgather, "MPI_Iallgather")
    SYM(Ibcast, "MPI_Ibcast")
    SYM(Test, "MPI_Test")
    SYM(Isend, "MPI_Isend")
    SYM(Iprobe, "MPI_Iprobe")
    SYM(Recv, "MPI_Recv")
    SYM(Irecv, "MPI_Irecv")
    SYM(Comm_dup, "MPI_Comm_dup")
    SYM(Error_string, "MPI_Error_string")
    SYM(Abort, "MPI_Abort")
    SYM(Finalize, "MPI_Finalize")
    SYM(world, "ompi_mpi_comm_world")
    SYM(errors_return, "ompi_mpi_errors_return")
    SYM(f32, "ompi_mpi_float")
    SYM(f64, "ompi_mpi_double")
    SYM(i64, "ompi_mpi_int64_t")
    SYM(u16, "ompi_mpi_uint16_t")
    SYM(byte, "ompi_mpi_byte")
    SYM(sum, "ompi_mpi_op_sum")
    SYM(max, "ompi_mpi_op_max")
    SYM(info_null, "ompi_mpi_info_null")
#undef SYM
    return 0;
}

static void mpi_message(const mpi_api *m, int rc, char *msg, size_t n)
{
    char s[1024];
    int len = 0;
    if (m->Error_string(rc, s, &len) != 0)
        snprintf(s, sizeof s, "MPI error %d", rc);
    snprintf(msg, n, "%s", s);
}

kl_comm *kl_comm_open(void)
{
    kl_comm *c = kl_xcalloc(1, sizeof *c);
    c->world = c->local_size = c->hosts = 1;
    const char *launcher = kl_comm_launcher();
    if (!launcher) {
        snprintf(c->desc, sizeof c->desc, "world 1 (no MPI launcher)");
        return c;
    }
    mpi_api *m = kl_xcalloc(1, sizeof *m);
    char why[600];
    if (open_mpi(m, why, sizeof why)) {
        kl_error("started by %s, but %s", launcher, why);
        free(m);
        free(c);
        return NULL;
    }
    int inited = 0, rc = 0;
    m->Initialized(&inited);
    if (inited) {
        m->Query_thread(&c->thread_level);
    } else {
        LEAKS_IGNORED_BEGIN();
        rc = m->Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED_OMPI, &c->thread_level);
        LEAKS_IGNORED_END();
    }
    if (rc) {
        char msg[1024];
        mpi_message(m, rc, msg, sizeof msg);
        kl_error("MPI_Init under %s: %s", launcher, msg);
        free(m);
        free(c);
        return NULL;
    }
    /* Errors come back as codes, so that they are reported with the rank
     * and the collective before the job is aborted. */
    m->Comm_set_errhandler(m->world, m->errors_return);
    m->Comm_rank(m->world, &c->rank);
    m->Comm_size(m->world, &c->world);
    c->mpi = m;
    c->timeout = KL_COMM_TIMEOUT_DEFAULT;
    c->world_rank = kl_xmalloc((size_t)c->world * sizeof *c->world_rank);
    for (int r = 0; r < c->world; r++)
        c->world_rank[r] = r;
    LEAKS_IGNORED_BEGIN();
    rc = m->Comm_dup(m->world, &c->side);
    LEAKS_IGNORED_END();
    if (rc) {
        char msg[1024];
        mpi_message(m, rc, msg, sizeof msg);
        kl_error("rank %d of %d: MPI_Comm_dup (the watchdog's reports) failed: %s", c->rank, c->world, msg);
        kl_comm_abort(c, 1);
    }
    /* The ranks on this machine: local rank -> GPU. */
    mpi_handle node;
    if ((rc = m->Comm_split_type(m->world, MPI_COMM_TYPE_SHARED_OMPI, c->rank, m->info_null, &node)) != 0) {
        char msg[1024];
        mpi_message(m, rc, msg, sizeof msg);
        kl_error("rank %d of %d: MPI_Comm_split_type (the ranks on this machine) failed: %s", c->rank, c->world, msg);
        kl_comm_abort(c, 1);
    }
    m->Comm_rank(node, &c->local_rank);
    m->Comm_size(node, &c->local_size);
    m->Comm_free(&node);
    /* The machines: one per local rank 0 (the start-up line names them
     * when there are several). */
    unsigned char first = c->local_rank == 0, *firsts = kl_xmalloc((size_t)c->world);
    kl_comm_gather_startup(c, &first, 1, firsts, "the ranks' hosts");
    c->hosts = 0;
    for (int r = 0; r < c->world; r++)
        c->hosts += firsts[r];
    free(firsts);
    if (c->hosts > 1)
        snprintf(c->desc, sizeof c->desc, "world %d (%s, %d hosts)", c->world, launcher, c->hosts);
    else
        snprintf(c->desc, sizeof c->desc, "world %d (%s)", c->world, launcher);
    /* A fault for tests: KILN_FAULT_COLLECTIVE=R:N makes rank R's N-th
     * collective fail as a failed MPI call would. */
    const char *fault = getenv("KILN_FAULT_COLLECTIVE");
    int fr = -1;
    long long fn = 0;
    if (fault && sscanf(fault, "%d:%lld", &fr, &fn) == 2 && fr == c->rank && fn > 0)
        c->fail_call = fn;
    return c;
}

bool kl_comm_serialized(const kl_comm *c) { return !c->mpi || c->thread_level >= MPI_THREAD_SERIALIZED_OMPI; }

int kl_comm_rank(const kl_comm *c) { return c->rank; }
int kl_comm_world(const kl_comm *c) { return c->world; }
int kl_comm_local_rank(const kl_comm *c) { return c->local_rank; }
int kl_comm_local_size(const kl_comm *c) { return c->local_size; }
int kl_comm_hosts(const kl_comm *c) { return c->hosts; }
const char *kl_comm_desc(const kl_comm *c) { return c->desc; }

static mpi_handle mpi_type(const kl_comm *c, ir_dtype dt)
{
    switch (dt) {
    case IR_F64:
        return c->mpi->f64;
    case IR_I64:
        return c->mpi->i64;
    default:
        return c->mpi->f32;
    }
}

static void check(kl_comm *c, int rc, const char *call, const char *coll, const char *what, int64_t count, ir_dtype dt)
{
    bool injected = rc == 0 && ++c->calls == c->fail_call;
    if (rc == 0 && !injected)
        return;
    char msg[1024];
    if (injected)
        snprintf(msg, sizeof msg, "a fault injected by KILN_FAULT_COLLECTIVE");
    else
        mpi_message(c->mpi, rc, msg, sizeof msg);
    kl_error("rank %d of %d: %s (%s of %s, %lld %s) failed: %s", c->rank, c->world, call, coll, what, (long long)count,
             ir_dtype_name(dt), msg);
    kl_comm_abort(c, 1);
}

/* MPI counts are ints: a longer buffer goes in pieces. */
#define COMM_CHUNK ((int64_t)1 << 28)

static bool half(ir_dtype dt) { return dt == IR_BF16 || dt == IR_F16; }

static float *widen(const void *buf, int64_t count, ir_dtype dt)
{
    float *w = kl_xmalloc((size_t)count * sizeof *w);
    const uint16_t *h = buf;
    for (int64_t i = 0; i < count; i++)
        w[i] = dt == IR_BF16 ? kl_bf16_to_f32(h[i]) : kl_f16_to_f32(h[i]);
    return w;
}

static void narrow(void *buf, const float *w, int64_t count, ir_dtype dt)
{
    uint16_t *h = buf;
    for (int64_t i = 0; i < count; i++)
        h[i] = dt == IR_BF16 ? kl_f32_to_bf16(w[i]) : kl_f32_to_f16(w[i]);
}

void kl_comm_set_timeout(kl_comm *c, double seconds)
{
    for (; c; c = c->parent) {
        c->timeout = seconds;
        if (c->tp)
            c->tp->timeout = seconds;
        if (c->pp)
            c->pp->timeout = seconds;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The tag of the watchdog's reports on c->side. */
#define WATCHDOG_TAG 7341
/* Open MPI's MPI_ANY_SOURCE, and room for its MPI_Status (MPI_SOURCE is
 * its first field). */
#define MPI_ANY_SOURCE_OMPI (-1)
typedef struct { int source, tag, error, pad[13]; } mpi_status;

/* After a timeout: this rank tells every other rank of c which
 * collective it waits in (its number), then listens for theirs for a
 * grace period; the ranks not heard from did not arrive (stopped, hung,
 * or still working far behind). The lowest waiting rank reports at once
 * and aborts the job; the others report only if that abort has not
 * ended them a grace period later. */
static KL_NORETURN void timed_out_desc(kl_comm *c, const char *desc)
{
    mpi_api *m = c->mpi;
    int64_t *seen = kl_xmalloc((size_t)c->world * sizeof *seen);
    for (int r = 0; r < c->world; r++)
        seen[r] = -1;
    seen[c->rank] = c->seq;
    int64_t mine = c->seq;
    mpi_handle req;
    for (int r = 0; r < c->world; r++)
        if (r != c->rank)
            m->Isend(&mine, 1, m->i64, r, WATCHDOG_TAG, c->side, &req);
    double grace = c->timeout < 5 ? c->timeout : 5, t0 = now_s();
    int heard = 1;
    while (heard < c->world && now_s() - t0 < grace) {
        int flag = 0;
        mpi_status st;
        m->Iprobe(MPI_ANY_SOURCE_OMPI, WATCHDOG_TAG, c->side, &flag, &st);
        if (!flag) {
            sched_yield();
            continue;
        }
        int64_t theirs = -1;
        m->Recv(&theirs, 1, m->i64, st.source, WATCHDOG_TAG, c->side, &st);
        if (st.source >= 0 && st.source < c->world && seen[st.source] < 0)
            heard++;
        if (st.source >= 0 && st.source < c->world)
            seen[st.source] = theirs;
    }
    int lowest = c->rank;
    for (int r = 0; r < c->world; r++)
        if (seen[r] == c->seq && r < lowest)
            lowest = r;
    if (lowest != c->rank) {
        /* The lowest waiting rank reports and aborts; wait for it. */
        double t1 = now_s();
        while (now_s() - t1 < grace)
            sched_yield();
    }
    kl_buf missing = {0}, waiting = {0}, elsewhere = {0};
    int nmissing = 0, nwaiting = 0;
    for (int r = 0; r < c->world; r++) {
        int w = c->world_rank ? c->world_rank[r] : r;
        if (seen[r] == c->seq)
            kl_buf_printf(&waiting, "%s%d", nwaiting++ ? ", " : "", w);
        else if (seen[r] < 0)
            kl_buf_printf(&missing, "%s%d", nmissing++ ? ", " : "", w);
        else
            kl_buf_printf(&elsewhere, "; rank %d waits in collective %lld instead", w, (long long)seen[r]);
    }
    kl_error("rank %d: %s did not complete within %g s (comm_timeout): "
             "rank%s %s did not arrive (rank%s %s waited%s); aborting the job\n"
             "---> a rank stopped, hung or is far behind the others; raise --comm-timeout if it is only slow "
             "(e.g. a long first-step compile)",
             c->world_rank ? c->world_rank[c->rank] : c->rank, desc, c->timeout, nmissing == 1 ? "" : "s",
             nmissing ? missing.s : "none", nwaiting == 1 ? "" : "s", waiting.s, elsewhere.s ? elsewhere.s : "");
    kl_comm_abort(c, 1);
}

static KL_NORETURN void timed_out(kl_comm *c, const char *coll, const char *what, int64_t count, ir_dtype dt)
{
    char desc[400];
    snprintf(desc, sizeof desc, "%s of %s (%lld %s; collective %lld)", coll, what, (long long)count,
             ir_dtype_name(dt), (long long)c->seq);
    timed_out_desc(c, desc);
}

double kl_comm_timeout(const kl_comm *c) { return c->timeout; }

void kl_comm_timed_out(kl_comm *c, const char *what)
{
    if (!c->mpi) {
        kl_error("%s did not complete within %g s (comm_timeout); aborting", what, c->timeout);
        kl_comm_abort(c, 1);
    }
    timed_out_desc(c, what);
}

/* Waits for a non-blocking collective (MPI_Iallreduce and the like;
 * errors name them by their blocking forms, MPI_Allreduce, which they
 * stand for): MPI_Test in a loop (as MPI's
 * blocking calls poll), yielding the core after the first millisecond,
 * until it completes or the timeout passes (timed_out). */
static int comm_wait(kl_comm *c, int rc, mpi_handle *req, const char *coll, const char *what, int64_t count,
                     ir_dtype dt)
{
    if (rc != 0)
        return rc;
    c->seq++;
    double t0 = now_s();
    for (;;) {
        int done = 0;
        if ((rc = c->mpi->Test(req, &done, NULL)) != 0 || done)
            return rc;
        double t = now_s() - t0;
        if (c->timeout > 0 && t > c->timeout)
            timed_out(c, coll, what, count, dt);
        if (t > 1e-3)
            sched_yield();
    }
}

void kl_comm_all_reduce(kl_comm *c, void *buf, int64_t count, ir_dtype dt, kl_reduce_op op, const char *what)
{
    if (!c->mpi || count == 0)
        return;
    const char *coll = op == KL_REDUCE_SUM ? "all_reduce sum" : "all_reduce max";
    kl_check(dt == IR_F32 || dt == IR_F64 || dt == IR_I64 || half(dt));
    void *p = half(dt) ? widen(buf, count, dt) : buf;
    size_t esz = half(dt) ? 4 : (size_t)ir_dtype_size(dt);
    for (int64_t at = 0; at < count; at += COMM_CHUNK) {
        int64_t k = count - at < COMM_CHUNK ? count - at : COMM_CHUNK;
        mpi_handle req;
        int rc = c->mpi->Iallreduce(MPI_IN_PLACE_OMPI, (char *)p + (size_t)at * esz, (int)k, mpi_type(c, dt),
                                    op == KL_REDUCE_SUM ? c->mpi->sum : c->mpi->max, c->mpi->world, &req);
        rc = comm_wait(c, rc, &req, coll, what, count, dt);
        check(c, rc, "MPI_Allreduce", coll, what, count, dt);
    }
    if (half(dt)) {
        narrow(buf, p, count, dt);
        free(p);
    }
}

/* A count one MPI call carries (an int), or the job ends with the reason:
 * reduce_scatter's and all_gather's blocks are not cut in pieces. */
static int block_count(kl_comm *c, int64_t count, const char *coll, const char *what, ir_dtype dt)
{
    if (count <= INT32_MAX)
        return (int)count;
    kl_error("rank %d of %d: %s of %s: a block of %lld %s elements is over MPI's int count", c->rank, c->world, coll, what,
             (long long)count, ir_dtype_name(dt));
    kl_comm_abort(c, 1);
}

int64_t kl_comm_shard_count(int64_t count, int ranks) { return ranks > 1 ? (count + ranks - 1) / ranks : count; }

void kl_comm_reduce_scatter(kl_comm *c, const void *in, int64_t count, void *out, ir_dtype dt, const char *what)
{
    kl_check(dt == IR_F32 || half(dt));
    int world = c->world;
    int64_t shard = kl_comm_shard_count(count, world);
    size_t esz = (size_t)ir_dtype_size(dt);
    if (!c->mpi) {
        memcpy(out, in, (size_t)count * esz);
        return;
    }
    if (shard == 0)
        return;
    /* The operand padded with zeros to world x shard, in f32 (16-bit
     * floats are summed in f32 and rounded once, as by all_reduce). */
    float *pad = kl_xcalloc((size_t)(shard * world), sizeof *pad);
    if (half(dt)) {
        float *w = widen(in, count, dt);
        memcpy(pad, w, (size_t)count * sizeof *pad);
        free(w);
    } else {
        memcpy(pad, in, (size_t)count * sizeof *pad);
    }
    float *mine = half(dt) ? kl_xmalloc((size_t)shard * sizeof *mine) : out;
    int k = block_count(c, shard, "reduce_scatter", what, dt);
    mpi_handle req;
    int rc = c->mpi->Ireduce_scatter_block(pad, mine, k, c->mpi->f32, c->mpi->sum, c->mpi->world, &req);
    rc = comm_wait(c, rc, &req, "reduce_scatter sum", what, count, dt);
    check(c, rc, "MPI_Reduce_scatter_block", "reduce_scatter sum", what, count, dt);
    if (half(dt)) {
        narrow(out, mine, shard, dt);
        free(mine);
    }
    free(pad);
}

void kl_comm_all_gather(kl_comm *c, const void *in, int64_t count, void *out, ir_dtype dt, const char *what)
{
    kl_check(dt == IR_F32 || half(dt));
    size_t bytes = (size_t)count * (size_t)ir_dtype_size(dt);
    if (!c->mpi) {
        memcpy(out, in, bytes);
        return;
    }
    if (count == 0)
        return;
    int k = block_count(c, count, "all_gather", what, dt);
    mpi_handle t = half(dt) ? c->mpi->u16 : c->mpi->f32;
    mpi_handle req;
    int rc = c->mpi->Iallgather(in, k, t, out, k, t, c->mpi->world, &req);
    rc = comm_wait(c, rc, &req, "all_gather", what, count, dt);
    check(c, rc, "MPI_Allgather", "all_gather", what, count, dt);
}

void kl_comm_broadcast(kl_comm *c, void *buf, int64_t count, ir_dtype dt, int root, const char *what)
{
    kl_check(dt == IR_F32 || half(dt) || dt == IR_F64 || dt == IR_I64);
    if (!c->mpi || count == 0)
        return;
    kl_check(root >= 0 && root < c->world);
    size_t esz = (size_t)ir_dtype_size(dt);
    mpi_handle t = half(dt) ? c->mpi->u16 : mpi_type(c, dt);
    for (int64_t at = 0; at < count; at += COMM_CHUNK) {
        int64_t k = count - at < COMM_CHUNK ? count - at : COMM_CHUNK;
        mpi_handle req;
        int rc = c->mpi->Ibcast((char *)buf + (size_t)at * esz, (int)k, t, root, c->mpi->world, &req);
        rc = comm_wait(c, rc, &req, "rank_broadcast", what, count, dt);
        check(c, rc, "MPI_Bcast", "rank_broadcast", what, count, dt);
    }
}

int64_t kl_comm_sum_startup(kl_comm *c, int64_t mine, const char *what)
{
    int64_t calls = c->calls, fail = c->fail_call;
    c->fail_call = 0;
    kl_comm_all_reduce(c, &mine, 1, IR_I64, KL_REDUCE_SUM, what);
    c->calls = calls;
    c->fail_call = fail;
    return mine;
}

void kl_comm_gather_startup(kl_comm *c, const void *mine, size_t bytes, void *all, const char *what)
{
    if (!c->mpi) {
        memcpy(all, mine, bytes);
        return;
    }
    kl_check(bytes <= INT32_MAX);
    mpi_handle req;
    int rc = c->mpi->Iallgather(mine, (int)bytes, c->mpi->byte, all, (int)bytes, c->mpi->byte, c->mpi->world, &req);
    rc = comm_wait(c, rc, &req, "all_gather", what, (int64_t)bytes, IR_U8);
    int64_t calls = c->calls, fail = c->fail_call;
    c->fail_call = 0;
    check(c, rc, "MPI_Allgather", "all_gather", what, (int64_t)bytes, IR_U8);
    c->calls = calls;
    c->fail_call = fail;
}

void kl_comm_run(const kl_coll *k)
{
    size_t bytes = (size_t)k->count * (size_t)ir_dtype_size(k->dt);
    switch (k->kind) {
    case KL_COLL_ALL_REDUCE:
    case KL_COLL_BROADCAST:
        if (k->in != k->out)
            memcpy(k->out, k->in, bytes);
        if (!k->comm)
            return;
        if (k->kind == KL_COLL_BROADCAST)
            kl_comm_broadcast(k->comm, k->out, k->count, k->dt, k->root, k->what);
        else
            kl_comm_all_reduce(k->comm, k->out, k->count, k->dt, k->op, k->what);
        return;
    case KL_COLL_REDUCE_SCATTER:
    case KL_COLL_ALL_GATHER:
        kl_check(k->in != k->out);
        if (!k->comm)
            memcpy(k->out, k->in, bytes);
        else if (k->kind == KL_COLL_REDUCE_SCATTER)
            kl_comm_reduce_scatter(k->comm, k->in, k->count, k->out, k->dt, k->what);
        else
            kl_comm_all_gather(k->comm, k->in, k->count, k->out, k->dt, k->what);
        return;
    }
}

/* A group of c's ranks (MPI_Comm_split by color, ordered by c's rank):
 * its mpi_api is a copy whose world is the group's communicator, so the
 * collectives above run in the group unchanged. */
static kl_comm *split(kl_comm *c, int color, const char *what)
{
    kl_comm *g = kl_xcalloc(1, sizeof *g);
    g->group = true;
    g->mpi = kl_xmalloc(sizeof *g->mpi);
    *g->mpi = *c->mpi;
    LEAKS_IGNORED_BEGIN();
    int rc = c->mpi->Comm_split(c->mpi->world, color, c->rank, &g->mpi->world);
    LEAKS_IGNORED_END();
    check(c, rc, "MPI_Comm_split", "split", what, 0, IR_F32);
    g->mpi->Comm_set_errhandler(g->mpi->world, g->mpi->errors_return);
    g->mpi->Comm_rank(g->mpi->world, &g->rank);
    g->mpi->Comm_size(g->mpi->world, &g->world);
    g->timeout = c->timeout;
    LEAKS_IGNORED_BEGIN();
    rc = g->mpi->Comm_dup(g->mpi->world, &g->side);
    LEAKS_IGNORED_END();
    if (rc)
        check(c, rc, "MPI_Comm_dup", "split", what, 0, IR_F32);
    /* The world's index of each of the group's ranks, for the watchdog's
     * errors. */
    g->world_rank = kl_xmalloc((size_t)g->world * sizeof *g->world_rank);
    int me = c->world_rank ? c->world_rank[c->rank] : c->rank;
    kl_comm_gather_startup(g, &me, sizeof me, g->world_rank, "the group's ranks");
    snprintf(g->desc, sizeof g->desc, "%s %d of %d", what, g->rank, g->world);
    return g;
}

kl_comm *kl_comm_split_tp(kl_comm *c, int tp)
{
    kl_check(tp >= 1 && c->world % tp == 0);
    if (!c->mpi || tp == 1)
        return c;
    kl_comm *dp = split(c, c->rank % tp, "data-parallel rank");
    dp->tp = split(c, c->rank / tp, "tensor-parallel rank");
    dp->parent = c;
    snprintf(dp->desc, sizeof dp->desc, "%.96s, tensor-parallel groups of %d, data-parallel groups of %d", c->desc, tp,
             dp->world);
    return dp;
}

kl_comm *kl_comm_tp(kl_comm *c) { return c ? c->tp : NULL; }

kl_comm *kl_comm_split_pp(kl_comm *c, int pp)
{
    kl_check(pp >= 1 && c->world % pp == 0);
    if (!c->mpi || pp == 1)
        return c;
    /* Rank r of c is stage r mod P of data-parallel replica r / P. c
     * may be the data-parallel group of a tensor-parallel split (the
     * ranks of one tensor-parallel index): its tensor-parallel group
     * moves to the new data-parallel group, which closes it. */
    kl_comm *dp = split(c, c->rank % pp, "data-parallel rank");
    dp->pp = split(c, c->rank / pp, "stage");
    dp->parent = c;
    dp->tp = c->tp;
    c->tp = NULL;
    if (dp->tp)
        snprintf(dp->desc, sizeof dp->desc, "%.96s, %d stages, tensor-parallel groups of %d, data-parallel groups of %d",
                 c->parent->desc, pp, dp->tp->world, dp->world);
    else
        snprintf(dp->desc, sizeof dp->desc, "%.96s, %d stages, data-parallel groups of %d", c->desc, pp, dp->world);
    return dp;
}

kl_comm *kl_comm_pp(kl_comm *c) { return c ? c->pp : NULL; }

/* The tag of point-to-point messages is the caller's; MPI keeps the
 * order of messages with the same source, tag and communicator. */
void kl_comm_send(kl_comm *c, const void *buf, size_t bytes, int dest, int tag, const char *what)
{
    kl_check(c->mpi && dest >= 0 && dest < c->world && dest != c->rank);
    int k = block_count(c, (int64_t)bytes, "send", what, IR_U8);
    void *copy = kl_xmalloc(bytes + 1);
    memcpy(copy, buf, bytes);
    mpi_handle req;
    int rc = c->mpi->Isend(copy, k, c->mpi->byte, dest, tag, c->mpi->world, &req);
    check(c, rc, "MPI_Isend", "send", what, (int64_t)bytes, IR_U8);
    kl_vec_push(c->sends, req);
    kl_vec_push(c->sent, copy);
}

void kl_comm_recv(kl_comm *c, void *buf, size_t bytes, int src, int tag, const char *what)
{
    kl_check(c->mpi && src >= 0 && src < c->world && src != c->rank);
    int k = block_count(c, (int64_t)bytes, "recv", what, IR_U8);
    mpi_handle req;
    int rc = c->mpi->Irecv(buf, k, c->mpi->byte, src, tag, c->mpi->world, &req);
    rc = comm_wait(c, rc, &req, "recv", what, (int64_t)bytes, IR_U8);
    check(c, rc, "MPI_Recv", "recv", what, (int64_t)bytes, IR_U8);
}

void kl_comm_send_wait(kl_comm *c)
{
    for (int i = 0; i < c->sends.n; i++) {
        int rc = comm_wait(c, 0, &c->sends.v[i], "send", "a pipeline transfer", 0, IR_U8);
        check(c, rc, "MPI_Send", "send", "a pipeline transfer", 0, IR_U8);
        free(c->sent.v[i]);
    }
    c->sends.n = c->sent.n = 0;
}
kl_comm *kl_comm_whole(kl_comm *c)
{
    while (c->parent)
        c = c->parent;
    return c;
}

#ifdef KILN_COVERAGE_BUILD
/* gcov's counts are written at exit; MPI_Abort ends the rank without
 * one, so a coverage build (tests/simgpu/coverage.sh) writes them first. */
extern void __gcov_dump(void);
#endif

void kl_comm_abort(kl_comm *c, int code)
{
    fflush(stdout);
    fflush(stderr);
#ifdef KILN_COVERAGE_BUILD
    __gcov_dump();
#endif
    if (c && c->mpi)
        c->mpi->Abort(c->mpi->world, code);
    exit(code);
}

void kl_comm_close(kl_comm *c)
{
    if (!c)
        return;
    if (c->group) {
        /* Its communicator goes with the world's MPI_Finalize. */
        kl_comm_close(c->tp);
        if (c->pp) {
            kl_comm_send_wait(c->pp);
            kl_vec_free(c->pp->sends);
            kl_vec_free(c->pp->sent);
        }
        kl_comm_close(c->pp);
        kl_comm_close(c->parent);
        free(c->world_rank);
        free(c->mpi);
        free(c);
        return;
    }
    if (c->mpi) {
        LEAKS_IGNORED_BEGIN();
        c->mpi->Finalize();
        LEAKS_IGNORED_END();
        /* libmpi stays open: Open MPI's atexit handlers live in it. */
        free(c->world_rank);
        free(c->mpi);
    }
    free(c);
}
