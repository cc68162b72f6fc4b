/* The CUDA backend's tiled attention kernels: codegen/cuda_attn.cuh's
 * templates instantiated for one attention kernel's geometry, with the
 * generated kernel's name and parameters, so that everything that runs,
 * compiles or checks CUDA kernels (runtime/exec/backend_cuda.c, tests/cuda's
 * NVRTC, emulation and occupancy checks, `kiln build --cuda-arch`) takes
 * them as it takes the generated ones. One block of KL_FA_THREADS threads
 * per tile, block-stride over the tiles. KILN_CUDA_ATTENTION=generated
 * keeps the generated kernel (for comparisons). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_native.h"
#include "emit_cuda.h"
#include "base/support.h"
#include "cuda_attn_text.h"

enum { FA_THREADS = 128, FA_FORWARD_ROWS = 64, FA_MAX_HEAD = 128 };

/* q, k, v (and dout) all f32 or all bf16: the template's one operand type. */
static bool operands_alike(const cg_attn_native *a)
{
    int n = a->kind == CG_ATTN_FORWARD ? 3 : 4;
    for (int i = 1; i < n; i++)
        if (a->bf16[i] != a->bf16[0])
            return false;
    return true;
}

bool cg_cuda_attention_fits(const cg_attn_native *a, int nbufs, char *why, size_t n)
{
    const char *env = getenv("KILN_CUDA_ATTENTION");
    if (a->kind == CG_ATTN_NONE)
        snprintf(why, n, "not an attention kernel with f32 results and f32 or bf16 operands");
    else if (env && !strcmp(env, "generated"))
        snprintf(why, n, "KILN_CUDA_ATTENTION=generated");
    else if (!operands_alike(a))
        snprintf(why, n, "q, k, v and dout of different dtypes (f32 and bf16)");
    else if (a->d > FA_MAX_HEAD || a->dv > FA_MAX_HEAD)
        snprintf(why, n, "head size d = %lld, dv = %lld: the tiled kernel takes at most %d", (long long)a->d,
                 (long long)a->dv, FA_MAX_HEAD);
    else if ((a->tq > a->tk ? a->tq : a->tk) * (a->d > a->dv ? a->d : a->dv) >= INT32_MAX)
        snprintf(why, n, "a head of %lld x %lld elements: the tiled kernel indexes a head with 32-bit integers",
                 (long long)(a->tq > a->tk ? a->tq : a->tk), (long long)(a->d > a->dv ? a->d : a->dv));
    else if (a->batch * (a->tq > a->tk ? a->tq : a->tk) >= INT32_MAX)
        snprintf(why, n, "%lld heads of %lld rows: the tiled kernel counts tiles with 32-bit integers", (long long)a->batch,
                 (long long)(a->tq > a->tk ? a->tq : a->tk));
    else if (nbufs != a->nargs)
        snprintf(why, n, "the kernel has %d parameters, not the op's %d", nbufs, a->nargs);
    else
        return true;
    return false;
}

/* Rows per tile (codegen/cuda_attn.cuh's R of each kernel). */
static int64_t tile_rows(const cg_attn_native *a)
{
    bool wide = a->d > 64 || a->dv > 64;
    switch (a->kind) {
    case CG_ATTN_FORWARD: return FA_FORWARD_ROWS;
    case CG_ATTN_GRAD_Q: return wide ? 32 : 64;
    default: return wide ? 16 : 32;
    }
}

bool cg_cuda_attention(const cg_attn_native *a, const char *name, kir_cuda *c)
{
    char why[160];
    if (!cg_cuda_attention_fits(a, c->nbufs, why, sizeof why))
        return false;
    static const char *const fn[] = {[CG_ATTN_FORWARD] = "kl_fa_forward", [CG_ATTN_GRAD_Q] = "kl_fa_grad_q",
                                     [CG_ATTN_GRAD_KV] = "kl_fa_grad_kv"};
    kl_buf b = {0};
    kl_buf_printf(&b, "%s\n/* tiled attention: %s, [%lld x %lld queries, %lld keys, d %lld, dv %lld]%s */\n",
                  KIR_CUDA_ATTN_TEXT, fn[a->kind], (long long)a->batch, (long long)a->tq, (long long)a->tk,
                  (long long)a->d, (long long)a->dv, a->causal ? ", causal" : "");
    char fn_name[sizeof c->launches[0].fn];
    snprintf(fn_name, sizeof fn_name, "%s_tiled", name);
    /* Each kernel parameter's C type: bf16 operands as their bits. */
    const char *type[CG_ATTN_MAX_ARGS];
    for (int i = 0; i < c->nbufs; i++)
        type[i] = "float";
    for (int i = 0; i < a->nargs; i++)
        if (a->bf16[i])
            type[a->arg[i]] = "unsigned short";
    kl_buf_printf(&b, "extern \"C\" __global__ void __launch_bounds__(%d, 3) %s(", FA_THREADS, fn_name);
    for (int i = 0; i < c->nbufs; i++)
        kl_buf_printf(&b, "%s *b%d, ", type[i], i);
    kl_buf_puts(&b, "const kl_kargs *ka)\n{\n    (void)ka;\n");
    kl_buf_printf(&b, "    %s<%lld, %lld, %s, %s>(", fn[a->kind], (long long)a->d, (long long)a->dv, a->causal ? "true" : "false",
                  a->bf16[0] ? "unsigned short" : "float");
    for (int i = 0; i < a->nargs; i++)
        kl_buf_printf(&b, "b%d, ", a->arg[i]);
    kl_buf_printf(&b, "%d, %d, %d, %.9gf);\n}\n", (int)a->batch, (int)a->tq, (int)a->tk, a->scale);
    kl_buf_printf(&b, "#ifdef KL_EMULATION\nextern \"C\" void kl_emu_%s(void *const *kb, const kl_kargs *ka)\n{\n    %s(", fn_name,
                  fn_name);
    for (int i = 0; i < c->nbufs; i++)
        kl_buf_printf(&b, "(%s *)kb[%d], ", type[i], i);
    kl_buf_puts(&b, "ka);\n}\n#endif\n");
    int nbufs = c->nbufs;
    kir_cuda_free(c);
    c->src = kl_buf_take(&b);
    c->nbufs = nbufs;
    c->nlaunches = 1;
    c->launches = kl_xcalloc(2, sizeof *c->launches);
    kir_cuda_launch *L = &c->launches[0];
    snprintf(L->fn, sizeof L->fn, "%s", fn_name);
    L->map = KIR_CUDA_BLOCK;
    int64_t rows = a->kind == CG_ATTN_GRAD_KV ? a->tk : a->tq;
    L->units = a->batch * ((rows + tile_rows(a) - 1) / tile_rows(a));
    L->inner = FA_THREADS;
    L->vector = 1;
    L->threads = FA_THREADS;
    return true;
}
