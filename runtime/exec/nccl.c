/* NCCL through dlopen (nccl.h). */
#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"
#include "nvrtc.h"

#define NCCL_FUNCS(X)                                                                                      \
    X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy)     \
    X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather) X(ncclBroadcast)

/* Found once per process; read-only afterwards. */
static struct nccl_api {
    bool tried;
    int rc;
    char why[600];
    char version[32];
#define X(f) __typeof__(&f) f;
    NCCL_FUNCS(X)
#undef X
} api;

static const char *const entry_points[] = {
#define X(f) #f,
    NCCL_FUNCS(X)
#undef X
    NULL};

const char *const *kl_nccl_entry_points(void) { return entry_points; }
const char *kl_nccl_version(void) { return api.version; }

static void load(const char *path)
{
    const char *env = getenv("KILN_NCCL_LIB");
    const char *names[] = {path ? path : env && *env ? env : "libnccl.so.2", path || (env && *env) ? NULL : "libnccl.so",
                           NULL};
    char err[512];
    void *h = kl_cuda_dlopen(names, err, sizeof err);
    if (!h) {
        snprintf(api.why, sizeof api.why, "cannot open %s (%s); install NCCL (Debian: libnccl2 from NVIDIA's CUDA repository)",
                 names[0], err);
        api.rc = -1;
        return;
    }
#define X(f)                                                                                   \
    if (!(api.f = (__typeof__(&f))dlsym(h, #f))) {                                             \
        snprintf(api.why, sizeof api.why, "%s has no %s (NCCL 2.x expected)", names[0], #f);   \
        api.rc = -1;                                                                           \
        return;                                                                                \
    }
    NCCL_FUNCS(X)
#undef X
    int v = 0;
    if (api.ncclGetVersion(&v) != ncclSuccess) {
        snprintf(api.why, sizeof api.why, "%s: ncclGetVersion failed", names[0]);
        api.rc = -1;
        return;
    }
    /* NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9. */
    snprintf(api.version, sizeof api.version, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

int kl_nccl_load(const char *path, char *why, size_t n)
{
    if (!api.tried) {
        api.tried = true;
        load(path);
    }
    if (api.rc)
        snprintf(why, n, "%s", api.why);
    return api.rc;
}

struct kl_nccl {
    kl_comm *c;
    ncclComm_t nc;
};

/* Every NCCL call: a failure names the rank, the call, the collective and
 * its operand, and NCCL's message, then ends the job. */
static void check(const kl_nccl *nc, ncclResult_t r, const char *call, const char *coll, const char *what, int64_t count,
                  ir_dtype dt)
{
    if (r == ncclSuccess)
        return;
    kl_error("rank %d of %d: %s (%s of %s, %lld %s) failed: %s", kl_comm_rank(nc->c), kl_comm_world(nc->c), call, coll,
             what, (long long)count, ir_dtype_name(dt), api.ncclGetErrorString(r));
    kl_comm_abort(nc->c, 1);
}

kl_nccl *kl_nccl_open(kl_comm *c)
{
    char why[600];
    if (kl_nccl_load(NULL, why, sizeof why)) {
        kl_error("rank %d of %d: collectives on the GPU need NCCL: %s", kl_comm_rank(c), kl_comm_world(c), why);
        kl_comm_abort(c, 1);
    }
    kl_nccl *nc = kl_xcalloc(1, sizeof *nc);
    nc->c = c;
    /* The id travels as int64s: kl_comm_broadcast's bits as sent. */
    _Static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0, "ncclUniqueId is whole int64s");
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (kl_comm_rank(c) == 0)
        check(nc, api.ncclGetUniqueId(&id), "ncclGetUniqueId", "the communicator's start", "its id", 1, IR_I64);
    kl_comm_broadcast(c, &id, (int64_t)(sizeof id / sizeof(int64_t)), IR_I64, 0, "NCCL's unique id");
    /* Every rank here before any waits in ncclCommInitRank, which has no
     * timeout of its own: a rank that stopped is reported by this
     * agreement's comm_timeout (the broadcast does not wait at its root). */
    kl_comm_sum_startup(c, 1, "the ranks' arrival at NCCL's start");
    check(nc, api.ncclCommInitRank(&nc->nc, kl_comm_world(c), id, kl_comm_rank(c)), "ncclCommInitRank",
          "the communicator's start", "its id", 1, IR_I64);
    return nc;
}

void kl_nccl_close(kl_nccl *nc)
{
    if (!nc)
        return;
    check(nc, api.ncclCommDestroy(nc->nc), "ncclCommDestroy", "the communicator's end", "it", 0, IR_I64);
    free(nc);
}

kl_comm *kl_nccl_comm(const kl_nccl *nc) { return nc->c; }

static ncclDataType_t nccl_type(ir_dtype dt)
{
    switch (dt) {
    case IR_F32:
        return ncclFloat32;
    case IR_F64:
        return ncclFloat64;
    case IR_BF16:
        return ncclBfloat16;
    case IR_F16:
        return ncclFloat16;
    default:
        kl_panic("NCCL collective on %s (only f32, f64, bf16 and f16 are planned)", ir_dtype_name(dt));
    }
}

void kl_nccl_all_reduce(kl_nccl *nc, const void *in, void *out, int64_t count, ir_dtype dt, kl_reduce_op op,
                        void *stream, const char *what)
{
    bool sum = op == KL_REDUCE_SUM;
    check(nc, api.ncclAllReduce(in, out, (size_t)count, nccl_type(dt), sum ? ncclSum : ncclMax, nc->nc, stream),
          "ncclAllReduce", sum ? "all_reduce sum" : "all_reduce max", what, count, dt);
}

void kl_nccl_reduce_scatter(kl_nccl *nc, const void *in, void *out, int64_t shard, ir_dtype dt, void *stream,
                            const char *what)
{
    check(nc, api.ncclReduceScatter(in, out, (size_t)shard, nccl_type(dt), ncclSum, nc->nc, stream),
          "ncclReduceScatter", "reduce_scatter sum", what, shard * kl_comm_world(nc->c), dt);
}

void kl_nccl_all_gather(kl_nccl *nc, const void *in, void *out, int64_t count, ir_dtype dt, void *stream,
                        const char *what)
{
    check(nc, api.ncclAllGather(in, out, (size_t)count, nccl_type(dt), nc->nc, stream), "ncclAllGather", "all_gather",
          what, count, dt);
}

void kl_nccl_broadcast(kl_nccl *nc, const void *in, void *out, int64_t count, ir_dtype dt, int root, void *stream,
                       const char *what)
{
    check(nc, api.ncclBroadcast(in, out, (size_t)count, nccl_type(dt), root, nc->nc, stream), "ncclBroadcast",
          "rank_broadcast", what, count, dt);
}
