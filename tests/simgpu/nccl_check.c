/* The simulated device's NCCL on its own (simgpu.nccl.*): ranks are forked
 * processes, each on its own device, sharing the parent's unique id.
 *   nccl_check LIBRARY CASE RANKS   (KILN_SIMULATED_GPU set by the test)
 * CASE:
 *   collectives  all-reduce (sum, max), reduce-scatter, all-gather and
 *                broadcast in f32, f64, bf16 and f16, over more than one
 *                staging chunk, each against the sums computed here
 *                (small integers: exact in every type); two all-reduces
 *                in a group; an all-reduce in
 *                place recorded in a graph on a second stream joined to
 *                the capture, replayed twice; a capture whose joined
 *                stream is not waited for is refused (UNJOINED).
 *   mismatch     rank 1 calls with another count, then another data type:
 *                every rank fails with ncclInvalidUsage and a message
 *                naming both calls, none hangs.
 *   dead         the last rank exits before the collective: the others
 *                fail with ncclRemoteError naming a rank that ended (the
 *                last, or one that failed so first) within 5 s.
 *   abort        the last rank never arrives (it sleeps): ncclCommAbort
 *                from another thread ends the others' wait. */
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FUNCS(X)                                                                                                       \
    X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuMemAlloc) X(cuMemcpyHtoDAsync)         \
    X(cuMemcpyDtoHAsync) X(cuStreamCreate) X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuEventCreate)               \
    X(cuEventRecord) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch)             \
    X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather) \
    X(ncclBroadcast) X(ncclCommGetAsyncError) X(ncclCommAbort) X(ncclGetErrorString) X(ncclGroupStart)           \
    X(ncclGroupEnd)

#define STR_(x) #x
#define STR(x) STR_(x)
#define X(f) static __typeof__(&f) p_##f;
FUNCS(X)
#undef X

static int fails, rank, world;
static char errpath[64];

static void check(int ok, const char *fmt, const char *what)
{
    printf("%s: rank %d: %s%s\n", ok ? "ok" : "FAIL", rank, fmt, what);
    fflush(stdout);
    fails += !ok;
}

/* ---- values in each type (small integers: exact) ---- */

static const ncclDataType_t types[] = {ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat16};
static const char *const type_names[] = {"f32", "f64", "bf16", "f16"};
static const size_t sizes[] = {4, 8, 2, 2};

static void put(void *p, int t, size_t i, double v)
{
    float f = (float)v;
    uint32_t u;
    _Float16 h = (_Float16)v;
    switch (t) {
    case 0: ((float *)p)[i] = f; break;
    case 1: ((double *)p)[i] = v; break;
    case 2:
        memcpy(&u, &f, 4);
        ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        break;
    default: memcpy((char *)p + 2 * i, &h, 2);
    }
}

static double get(const void *p, int t, size_t i)
{
    uint32_t u;
    float f;
    _Float16 h;
    switch (t) {
    case 0: return ((const float *)p)[i];
    case 1: return ((const double *)p)[i];
    case 2:
        u = (uint32_t)((const uint16_t *)p)[i] << 16;
        memcpy(&f, &u, 4);
        return f;
    default: memcpy(&h, (const char *)p + 2 * i, 2); return (double)h;
    }
}

/* Rank r's element i. */
static double val(int r, size_t i) { return (double)((i * 7 + (size_t)r * 3) % 11) - 5; }

static CUdeviceptr dev_alloc(size_t bytes)
{
    CUdeviceptr d = 0;
    p_cuMemAlloc(&d, bytes);
    return d;
}

static ncclComm_t comm;
static CUstream s1, s2;

static void collectives(void)
{
    /* Over the 1 MiB staging chunk in every type (f64: 2.4 MB). */
    size_t n = 300000;
    for (int t = 0; t < 4; t++) {
        size_t es = sizes[t], all = n * (size_t)world;
        char *h = malloc(all * es), *o = malloc(all * es);
        CUdeviceptr in = dev_alloc(all * es), out = dev_alloc(all * es);
        /* all-reduce sum and max: n elements. */
        for (size_t i = 0; i < n; i++)
            put(h, t, i, val(rank, i));
        p_cuMemcpyHtoDAsync(in, h, n * es, s1);
        for (int op = 0; op < 2; op++) {
            ncclRedOp_t rop = op ? ncclMax : ncclSum;
            int rc = p_ncclAllReduce((void *)in, (void *)out, n, types[t], rop, comm, s1);
            p_cuMemcpyDtoHAsync(o, out, n * es, s1);
            int sync = p_cuStreamSynchronize(s1);
            int ok = !rc && !sync;
            for (size_t i = 0; ok && i < n; i++) {
                double want = op ? -1e9 : 0;
                for (int r = 0; r < world; r++)
                    want = op ? (val(r, i) > want ? val(r, i) : want) : want + val(r, i);
                ok = get(o, t, i) == want;
            }
            check(ok, op ? "ncclAllReduce max " : "ncclAllReduce sum ", type_names[t]);
        }
        /* reduce-scatter: world x n in, n out (this rank's block of the sum). */
        for (size_t i = 0; i < all; i++)
            put(h, t, i, val(rank, i));
        p_cuMemcpyHtoDAsync(in, h, all * es, s1);
        int rc = p_ncclReduceScatter((void *)in, (void *)out, n, types[t], ncclSum, comm, s1);
        p_cuMemcpyDtoHAsync(o, out, n * es, s1);
        int ok = !rc && !p_cuStreamSynchronize(s1);
        for (size_t i = 0; ok && i < n; i++) {
            double want = 0;
            for (int r = 0; r < world; r++)
                want += val(r, (size_t)rank * n + i);
            ok = get(o, t, i) == want;
        }
        check(ok, "ncclReduceScatter ", type_names[t]);
        /* all-gather: n in, world x n out, rank after rank. */
        rc = p_ncclAllGather((void *)in, (void *)out, n, types[t], comm, s1);
        p_cuMemcpyDtoHAsync(o, out, all * es, s1);
        ok = !rc && !p_cuStreamSynchronize(s1);
        for (size_t i = 0; ok && i < all; i++)
            ok = get(o, t, i) == val((int)(i / n), i % n);
        check(ok, "ncclAllGather ", type_names[t]);
        /* broadcast from the last rank. */
        rc = p_ncclBroadcast((void *)in, (void *)out, n, types[t], world - 1, comm, s1);
        p_cuMemcpyDtoHAsync(o, out, n * es, s1);
        ok = !rc && !p_cuStreamSynchronize(s1);
        for (size_t i = 0; ok && i < n; i++)
            ok = get(o, t, i) == val(world - 1, i);
        check(ok, "ncclBroadcast ", type_names[t]);
        free(h);
        free(o);
    }
    /* A group: two all-reduces, then an unmatched ncclGroupEnd refused. */
    {
        float *g = malloc(8 * 4);
        for (int i = 0; i < 8; i++)
            g[i] = (float)(rank + i);
        CUdeviceptr a = dev_alloc(4 * 4), b = dev_alloc(4 * 4);
        p_cuMemcpyHtoDAsync(a, g, 16, s1);
        p_cuMemcpyHtoDAsync(b, g + 4, 16, s1);
        int rc = (int)p_ncclGroupStart();
        rc = rc ? rc : (int)p_ncclAllReduce((void *)a, (void *)a, 4, ncclFloat32, ncclSum, comm, s1);
        rc = rc ? rc : (int)p_ncclAllReduce((void *)b, (void *)b, 4, ncclFloat32, ncclSum, comm, s1);
        rc = rc ? rc : (int)p_ncclGroupEnd();
        p_cuMemcpyDtoHAsync(g, a, 16, s1);
        p_cuMemcpyDtoHAsync(g + 4, b, 16, s1);
        int sync = p_cuStreamSynchronize(s1);
        /* element i: sum over r of (r + i) = world i + world (world - 1) / 2 */
        int ok = !rc && !sync;
        for (int i = 0; ok && i < 8; i++)
            ok = g[i] == (float)(world * i + world * (world - 1) / 2);
        check(ok, "two all-reduces in a group", "");
        check(p_ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart is refused", "");
        free(g);
    }
    /* A graph: s2 joins s1's capture through an event, all-reduces in
     * place on s2, s1 waits for it. Each replay sums again. */
    size_t m = 1000;
    float *h = malloc(m * 4);
    for (size_t i = 0; i < m; i++)
        h[i] = (float)(rank + 1);
    CUdeviceptr x = dev_alloc(m * 4);
    p_cuMemcpyHtoDAsync(x, h, m * 4, s1);
    p_cuStreamSynchronize(s1);
    CUevent fork_ev, join_ev;
    p_cuEventCreate(&fork_ev, CU_EVENT_DISABLE_TIMING);
    p_cuEventCreate(&join_ev, CU_EVENT_DISABLE_TIMING);
    CUgraph g = NULL;
    CUgraphExec ex = NULL;
    p_cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL);
    p_cuEventRecord(fork_ev, s1);
    p_cuStreamWaitEvent(s2, fork_ev, 0);
    p_ncclAllReduce((void *)x, (void *)x, m, ncclFloat32, ncclSum, comm, s2);
    p_cuEventRecord(join_ev, s2);
    p_cuStreamWaitEvent(s1, join_ev, 0);
    int rc = (int)p_cuStreamEndCapture(s1, &g);
    /* Nothing ran while capturing. */
    p_cuMemcpyDtoHAsync(h, x, m * 4, s1);
    p_cuStreamSynchronize(s1);
    check(!rc && h[0] == (float)(rank + 1), "the captured all-reduce did not run at capture", "");
    rc = rc ? rc : (int)p_cuGraphInstantiate(&ex, g, 0);
    rc = rc ? rc : (int)p_cuGraphLaunch(ex, s1);
    rc = rc ? rc : (int)p_cuGraphLaunch(ex, s1);
    p_cuMemcpyDtoHAsync(h, x, m * 4, s1);
    rc = rc ? rc : (int)p_cuStreamSynchronize(s1);
    /* sum of (r + 1) is world (world + 1) / 2; twice: times world. */
    float want = (float)(world * (world + 1) / 2 * world);
    check(!rc && h[0] == want && h[m - 1] == want, "a graph with an all-reduce on a joined stream, replayed twice", "");
    /* s2 joins and is never waited for: refused. */
    p_cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL);
    p_cuEventRecord(fork_ev, s1);
    p_cuStreamWaitEvent(s2, fork_ev, 0);
    p_cuEventRecord(join_ev, s2);
    rc = (int)p_cuStreamEndCapture(s1, &g);
    check(rc == CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "a capture with an unjoined stream is refused", "");
    free(h);
}

/* Whether this rank's stderr has text. */
static int said(const char *text)
{
    fflush(stderr);
    FILE *f = fopen(errpath, "r");
    char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    int ok = strstr(buf, text) != NULL;
    if (!ok)
        printf("rank %d's stderr: %s\n", rank, buf);
    return ok;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *abort_later(void *arg)
{
    (void)arg;
    struct timespec d = {0, 300000000};
    nanosleep(&d, NULL);
    p_ncclCommAbort(comm);
    return NULL;
}

static int child(const char *which, ncclUniqueId id)
{
    snprintf(errpath, sizeof errpath, "/tmp/nccl_check.%d.err", (int)getpid());
    if (!freopen(errpath, "w", stderr))
        return 1;
    setvbuf(stderr, NULL, _IONBF, 0);
    CUdevice d;
    CUcontext ctx;
    if (p_cuInit(0) || p_cuDeviceGet(&d, rank) || p_cuDevicePrimaryCtxRetain(&ctx, d) || p_cuCtxSetCurrent(ctx)) {
        check(0, "device ", "start");
        return 1;
    }
    p_cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING);
    p_cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
    if (!strcmp(which, "dead") && rank == world - 1) {
        /* Joins, then ends before the collective. */
        p_ncclCommInitRank(&comm, world, id, rank);
        unlink(errpath);
        _exit(0);
    }
    int rc = p_ncclCommInitRank(&comm, world, id, rank);
    check(!rc, "ncclCommInitRank", "");
    if (rc) {
        unlink(errpath);
        return 1;
    }
    if (!strcmp(which, "collectives")) {
        collectives();
    } else if (!strcmp(which, "mismatch")) {
        CUdeviceptr a = dev_alloc(4096), b = dev_alloc(4096);
        size_t n = rank == 1 ? 100 : 200;
        p_ncclAllReduce((void *)a, (void *)b, n, ncclFloat32, ncclSum, comm, s1);
        int sync = p_cuStreamSynchronize(s1);
        ncclResult_t ar = ncclSuccess;
        p_ncclCommGetAsyncError(comm, &ar);
        check(sync != 0 && ar == ncclInvalidUsage, "a count mismatch fails with ncclInvalidUsage", "");
        check(said("the ranks disagree in collective 1: rank 0 calls ncclAllReduce sum of 200 f32 elements, rank 1 calls "
                   "ncclAllReduce sum of 100 f32 elements"),
              "the message names both calls", "");
    } else if (!strcmp(which, "mismatch_type")) {
        CUdeviceptr a = dev_alloc(4096), b = dev_alloc(4096);
        p_ncclAllGather((void *)a, (void *)b, 100, rank == 1 ? ncclBfloat16 : ncclFloat32, comm, s1);
        int sync = p_cuStreamSynchronize(s1);
        ncclResult_t ar = ncclSuccess;
        p_ncclCommGetAsyncError(comm, &ar);
        check(sync != 0 && ar == ncclInvalidUsage, "a data type mismatch fails with ncclInvalidUsage", "");
        check(said("rank 0 calls ncclAllGather of 100 f32 elements, rank 1 calls ncclAllGather of 100 bf16 elements"),
              "the message names both types", "");
    } else if (!strcmp(which, "dead")) {
        CUdeviceptr a = dev_alloc(4096);
        double t0 = now();
        p_ncclAllReduce((void *)a, (void *)a, 100, ncclFloat32, ncclSum, comm, s1);
        int sync = p_cuStreamSynchronize(s1);
        ncclResult_t ar = ncclSuccess;
        p_ncclCommGetAsyncError(comm, &ar);
        double took = now() - t0;
        char what[96];
        snprintf(what, sizeof what, " (%.2f s)", took);
        check(sync != 0 && ar == ncclRemoteError && took < 5, "a peer that ended: ncclRemoteError", what);
        /* The last rank, or one that already failed and ended. */
        char want[96];
        snprintf(want, sizeof want, "ended while rank %d waited in ncclAllReduce (collective 1)", rank);
        check(said(" (pid ") && said(want), "the message names the rank that ended", "");
    } else if (!strcmp(which, "abort")) {
        CUdeviceptr a = dev_alloc(4096);
        if (rank == world - 1) {
            /* Never arrives: sleeps until the others are done. */
            sleep(3);
            unlink(errpath);
            _exit(0);
        }
        pthread_t th;
        pthread_create(&th, NULL, abort_later, NULL);
        p_ncclAllReduce((void *)a, (void *)a, 100, ncclFloat32, ncclSum, comm, s1);
        int sync = p_cuStreamSynchronize(s1);
        pthread_join(th, NULL);
        check(sync != 0 && said("ended by ncclCommAbort"), "ncclCommAbort ends a wait for a rank that never arrives", "");
        unlink(errpath);
        _exit(fails ? 1 : 0); /* the communicator's worker is stopped: no destroy */
    }
    if (!strcmp(which, "collectives"))
        check(!p_ncclCommDestroy(comm), "ncclCommDestroy", "");
    unlink(errpath);
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    void *h = argc > 3 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        printf("FAIL: usage: nccl_check LIBRARY CASE RANKS (%s)\n", argc > 3 ? dlerror() : "too few arguments");
        return 1;
    }
#define X(f)                                                                                                           \
    if (!(p_##f = (__typeof__(&f))dlsym(h, STR(f)))) {                                                                 \
        printf("FAIL: no %s\n", STR(f));                                                                               \
        return 1;                                                                                                      \
    }
    FUNCS(X)
#undef X
    world = atoi(argv[3]);
    ncclUniqueId id;
    if (world < 2 || p_ncclGetUniqueId(&id)) {
        printf("FAIL: ranks %s, or no unique id\n", argv[3]);
        return 1;
    }
    pid_t pids[16];
    for (rank = 0; rank < world && rank < 16; rank++) {
        pids[rank] = fork();
        if (pids[rank] == 0) {
            alarm(60); /* never a hang */
            _exit(child(argv[2], id));
        }
    }
    int bad = 0;
    for (int r = 0; r < world && r < 16; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            printf("FAIL: rank %d ended with status %#x\n", r, st);
            bad = 1;
        }
    }
    printf("%s: %s on %d ranks\n", bad ? "FAIL" : "ok", argv[2], world);
    return bad;
}
