/* runtime/exec/nccl.c without a GPU (tests/ranks/comm/nccl.sh):
 *
 *   nccl_check symbols [LIB]  loads LIB (default: $KILN_NCCL_LIB, else
 *                             libnccl.so.2) and prints its version and the
 *                             entry points resolved; exit 3 with the reason
 *                             when it cannot.
 *   nccl_check calls          a communicator of a world of one, then each
 *                             collective once (f32 sum, bf16 max, f16
 *                             reduce_scatter, f32 all_gather, bf16
 *                             broadcast) on fake pointers: for a fake
 *                             libnccl that prints what it is given.
 *   nccl_check device         on GPU 0 (tests/gpu/run.sh), a world of one,
 *                             or under mpirun each rank on GPU 0 of its own
 *                             simulated device (tests/simgpu/ranks.sh
 *                             nccl_device): each collective in f32, bf16
 *                             and f16 through the CUDA backend's collective
 *                             op (NCCL on its communication stream), its
 *                             operand written on the compute stream just
 *                             before; the results bit for bit against what
 *                             each means for the world's ranks (with one
 *                             rank: the operand). Exit 77 when there is no
 *                             GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/scalar.h"
#include "runtime/exec/backend_cuda.h"
#include "runtime/exec/nccl.h"

/* Element i of a (dt) times mul, rounded to dt once (as NCCL's sum of
 * mul equal operands: their f32 sum is exact here). */
static void put_scaled(char *dst, const char *src, int64_t i, ir_dtype dt, int mul)
{
    if (dt == IR_F32) {
        float x;
        memcpy(&x, src + i * 4, 4);
        x *= (float)mul;
        memcpy(dst, &x, 4);
        return;
    }
    uint16_t h;
    memcpy(&h, src + i * 2, 2);
    float x = (dt == IR_BF16 ? kl_bf16_to_f32(h) : kl_f16_to_f32(h)) * (float)mul;
    h = dt == IR_BF16 ? kl_f32_to_bf16(x) : kl_f32_to_f16(x);
    memcpy(dst, &h, 2);
}

/* Every collective kind in every dtype on be, every rank with the same
 * operand; the failures. The results against what each collective means
 * for world ranks: a sum is world times the operand, a max and a
 * broadcast (from rank 0) the operand, reduce_scatter this rank's shard
 * of the sum padded with zeros to world x shard, all_gather the operand
 * world times. */
static int device_checks(kl_backend *be, kl_comm *c)
{
    const ir_dtype dts[] = {IR_F32, IR_BF16, IR_F16};
    const kl_coll_kind kinds[] = {KL_COLL_ALL_REDUCE, KL_COLL_ALL_REDUCE, KL_COLL_REDUCE_SCATTER, KL_COLL_ALL_GATHER,
                                  KL_COLL_BROADCAST};
    const char *names[] = {"all_reduce sum", "all_reduce max", "reduce_scatter", "all_gather", "broadcast"};
    const int64_t count = 1000003; /* odd, over a MiB of f32: padded on 2 and 3 ranks */
    int world = kl_comm_world(c), rank = kl_comm_rank(c);
    int64_t shard = kl_comm_shard_count(count, world);
    int failures = 0, runs = 0;
    for (size_t d = 0; d < KL_ARRAY_LEN(dts); d++) {
        size_t esz = (size_t)ir_dtype_size(dts[d]), bytes = (size_t)count * esz;
        char *want = kl_xmalloc(bytes), *got = kl_xmalloc(bytes * (size_t)world), *expect = kl_xmalloc(bytes * (size_t)world);
        for (int64_t i = 0; i < count; i++) {
            float x = (float)(i % 1999) * 0.25f - 200.0f;
            if (dts[d] == IR_F32)
                memcpy(want + i * 4, &x, 4);
            else {
                uint16_t h = dts[d] == IR_BF16 ? kl_f32_to_bf16(x) : kl_f32_to_f16(x);
                memcpy(want + i * 2, &h, 2);
            }
        }
        void *in = be->ops->alloc(be, bytes), *out = be->ops->alloc(be, bytes * (size_t)world);
        for (size_t k = 0; k < KL_ARRAY_LEN(kinds); k++) {
            int64_t n = kinds[k] == KL_COLL_ALL_GATHER ? count * world : kinds[k] == KL_COLL_REDUCE_SCATTER ? shard : count;
            for (int64_t i = 0; i < n; i++) {
                char *e = expect + (size_t)i * esz;
                if (k == 0)
                    put_scaled(e, want, i, dts[d], world);
                else if (kinds[k] == KL_COLL_REDUCE_SCATTER) {
                    int64_t at = (int64_t)rank * shard + i;
                    if (at < count)
                        put_scaled(e, want, at, dts[d], world);
                    else
                        memset(e, 0, esz);
                } else
                    memcpy(e, want + (size_t)(i % count) * esz, esz);
            }
            for (int inplace = 0; inplace < 2; inplace++) {
                if (inplace && (kinds[k] == KL_COLL_REDUCE_SCATTER || kinds[k] == KL_COLL_ALL_GATHER))
                    continue;
                be->ops->fill_zero(be, out, bytes * (size_t)world);
                be->ops->copy_in(be, in, want, bytes);
                kl_coll co = {.kind = kinds[k], .comm = c, .in = in, .out = inplace ? in : out, .count = count,
                              .dt = dts[d], .op = k == 1 ? KL_REDUCE_MAX : KL_REDUCE_SUM, .what = names[k]};
                be->ops->collective(be, &co);
                be->ops->collective_wait(be);
                be->ops->copy_out(be, got, co.out, (size_t)n * esz);
                runs++;
                if (memcmp(got, expect, (size_t)n * esz)) {
                    failures++;
                    int64_t i = 0;
                    while (i < n && !memcmp(got + (size_t)i * esz, expect + (size_t)i * esz, esz))
                        i++;
                    printf("FAIL: rank %d of %d: %s %s (%s): element %lld differs\n", rank, world, names[k],
                           ir_dtype_name(dts[d]), inplace ? "in place" : "out of place", (long long)i);
                }
            }
        }
        be->ops->free(be, in);
        be->ops->free(be, out);
        free(want);
        free(got);
        free(expect);
    }
    printf("%s: rank %d of %d: %d collectives through NCCL %s on the GPU, %d failures\n", failures ? "FAIL" : "ok", rank,
           world, runs, kl_nccl_version(), failures);
    return failures;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "symbols")) {
        char why[600];
        if (kl_nccl_load(argc > 2 ? argv[2] : NULL, why, sizeof why)) {
            fprintf(stderr, "nccl_check: %s\n", why);
            return 3;
        }
        int n = 0;
        for (const char *const *e = kl_nccl_entry_points(); *e; e++, n++)
            printf("%s\n", *e);
        printf("NCCL %s: %d entry points resolved\n", kl_nccl_version(), n);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "calls")) {
        kl_comm *c = kl_comm_open();
        if (!c)
            return 1;
        kl_nccl *nc = kl_nccl_open(c);
        char a[64], b[64];
        void *stream = (void *)0x5;
        kl_nccl_all_reduce(nc, a, b, 4, IR_F32, KL_REDUCE_SUM, stream, "w.grad");
        kl_nccl_all_reduce(nc, a, a, 3, IR_BF16, KL_REDUCE_MAX, stream, "found_inf");
        kl_nccl_reduce_scatter(nc, a, b, 5, IR_F16, stream, "bucket.0");
        kl_nccl_all_gather(nc, a, b, 6, IR_F32, stream, "w.shard");
        kl_nccl_broadcast(nc, a, b, 7, IR_BF16, 0, stream, "w.init");
        kl_nccl_close(nc);
        kl_comm_close(c);
        printf("nccl_check: done\n");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "device")) {
        char why[600];
        kl_backend *be = kl_cuda_backend_new(NULL, why, sizeof why);
        if (!be) {
            printf("SKIP: no GPU: %s\n", why);
            return 77;
        }
        kl_comm *c = kl_comm_open();
        if (!c)
            return 1;
        int failures = device_checks(be, c);
        be->ops->destroy(be);
        kl_comm_close(c);
        return failures ? 1 : 0;
    }
    fprintf(stderr, "usage: nccl_check symbols [LIB] | calls | device\n");
    return 2;
}
