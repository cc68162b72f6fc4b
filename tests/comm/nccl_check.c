/* runtime/nccl.c without a GPU (tests/comm/nccl.sh):
 *
 *   nccl_check symbols [LIB]  loads LIB (default: $KILN_NCCL_LIB, else
 *                             libnccl.so.2) and prints its version and the
 *                             entry points resolved; exit 3 with the reason
 *                             when it cannot.
 *   nccl_check calls          a communicator of a world of one, then each
 *                             collective once (f32 sum, bf16 max, f16
 *                             reduce_scatter, f32 all_gather, bf16
 *                             broadcast) on fake pointers: for a fake
 *                             libnccl that prints what it is given. */
#include <stdio.h>
#include <string.h>

#include "runtime/nccl.h"

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
    fprintf(stderr, "usage: nccl_check symbols [LIB] | calls\n");
    return 2;
}
