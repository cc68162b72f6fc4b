/* A stand-in for a profiler's NVTX injection library (what Nsight Systems
 * loads through NVTX_INJECTION64_PATH): it takes over nvtxRangePushA and
 * nvtxRangePop and writes each to $KILN_NVTX_LOG, one line per call
 * ("push NAME", "pop"), so tests/observe/nvtx.sh sees the ranges a run makes. */
#include <stdio.h>
#include <stdlib.h>

#include <nvtx3/nvToolsExt.h>

static FILE *out;

static int NVTX_API push(const char *name)
{
    if (out) {
        fprintf(out, "push %s\n", name);
        fflush(out);
    }
    return 0;
}

static int NVTX_API pop(void)
{
    if (out) {
        fputs("pop\n", out);
        fflush(out);
    }
    return 0;
}

int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned size = 0;
    if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || size <= NVTX_CBID_CORE_RangePop)
        return 0;
    *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push;
    *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
    const char *path = getenv("KILN_NVTX_LOG");
    out = path ? fopen(path, "w") : NULL;
    return 1;
}
