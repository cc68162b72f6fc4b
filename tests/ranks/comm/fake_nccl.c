/* A stand-in libnccl for tests/ranks/comm/nccl.sh: every entry point Kiln uses
 * (runtime/exec/nccl.c), no GPU. Each call prints one line with its arguments
 * ("ncclAllReduce count=4 type=7 op=0") and succeeds, or returns
 * ncclInvalidUsage when $FAKE_NCCL_FAIL names it. Built with -DOMIT_BROADCAST
 * it lacks ncclBroadcast (a library too old or not NCCL's). */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ncclResult_t call(const char *name)
{
    const char *fail = getenv("FAKE_NCCL_FAIL");
    fflush(stdout);
    return fail && !strcmp(fail, name) ? ncclInvalidUsage : ncclSuccess;
}

ncclResult_t ncclGetVersion(int *version)
{
    *version = 21907; /* 2.19.7 */
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    return r == ncclInvalidUsage ? "invalid usage (fake NCCL)" : "unexpected code (fake NCCL)";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    strcpy(id->internal, "fake-id");
    printf("ncclGetUniqueId\n");
    return call("ncclGetUniqueId");
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    *comm = (ncclComm_t)(void *)0x1000;
    printf("ncclCommInitRank nranks=%d rank=%d id=%s\n", nranks, rank, id.internal);
    return call("ncclCommInitRank");
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    printf("ncclCommDestroy %s\n", comm == (ncclComm_t)(void *)0x1000 ? "ours" : "foreign");
    return call("ncclCommDestroy");
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st)
{
    (void)c;
    printf("ncclAllReduce count=%zu type=%d op=%d inplace=%d stream=%p\n", count, (int)t, (int)op, s == r, (void *)st);
    return call("ncclAllReduce");
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st)
{
    (void)s, (void)r, (void)c;
    printf("ncclReduceScatter recvcount=%zu type=%d op=%d stream=%p\n", count, (int)t, (int)op, (void *)st);
    return call("ncclReduceScatter");
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
{
    (void)s, (void)r, (void)c;
    printf("ncclAllGather sendcount=%zu type=%d stream=%p\n", count, (int)t, (void *)st);
    return call("ncclAllGather");
}

#ifndef OMIT_BROADCAST
ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t st)
{
    (void)s, (void)r, (void)c;
    printf("ncclBroadcast count=%zu type=%d root=%d stream=%p\n", count, (int)t, root, (void *)st);
    return call("ncclBroadcast");
}
#endif
