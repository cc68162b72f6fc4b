/* A static occupancy and launch check of every generated CUDA kernel, no
 * GPU needed (issue 17). For each __global__ function of the given models
 * (train and eval, fused and unfused, the chosen precisions):
 *
 * - NVRTC compiles it for sm_90 and sm_80; ptxas's report gives its
 *   registers and static shared memory;
 * - a model of each GPU (H200: 132 SMs, A100: 108 SMs; the limits of
 *   CUDA's occupancy calculator, cuda_occupancy.h, for compute capability
 *   9.0 and 8.0) answers what the driver's occupancy API would: the block
 *   size cuOccupancyMaxPotentialBlockSize suggests, the most threads a
 *   block may have, and the active blocks per SM at a block size;
 * - the backend's own launch rules (runtime/exec/cuda_launch.h, as
 *   runtime/exec/backend_cuda.c calls them) give the block and the grid.
 *
 * A launch passes when its grid has at least 2 blocks per SM and its
 * theoretical occupancy (active warps per SM over 64) is at least 50%, or
 * when it says why not: its work is too small to fill 2 blocks per SM (a
 * reason this check states itself), or a line of the reasons file names
 * it. A launch whose work would fill the device but whose grid does not
 * (one block per output of a reduction over few outputs: one block per
 * channel of a batch norm's statistics) fails unless the reasons file
 * states why.
 *
 *   occupancy_check [--reasons FILE] [--batch N] [--precisions fp32,bf16]
 *                   [--table] MODEL.kl...
 *
 * The reasons file: one `OP | reason` per line (# comments); a launch
 * whose kernel computes OP (one of the op names of its "what") takes the
 * reason. --table prints the README's table (Markdown) of every launch.
 * Exits 1 on a failure, 77 (a skip for ctest) when NVRTC cannot be opened. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plans.h"
#include "runtime/exec/cuda_launch.h"
#include "runtime/exec/nvrtc.h"

/* The per-SM limits of one GPU (CUDA C Programming Guide, "Technical
 * Specifications per Compute Capability"; cuda_occupancy.h). */
typedef struct gpu_model {
    const char *name, *arch;
    int sms;
    int regs_per_sm, regs_per_block, reg_unit, subpartitions;
    int max_threads_sm, max_blocks_sm, max_threads_block;
    int smem_per_sm, smem_reserved, smem_unit;
} gpu_model;

static const gpu_model gpus[] = {
    {"H200", "sm_90", 132, 65536, 65536, 256, 4, 2048, 32, 1024, 233472, 1024, 128},
    {"A100", "sm_80", 108, 65536, 65536, 256, 4, 2048, 32, 1024, 167936, 1024, 128},
};
#define NGPUS (int)(sizeof gpus / sizeof gpus[0])

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

/* Active blocks of `block` threads per SM for a function of `regs`
 * registers per thread and `smem` bytes of static shared memory; 0 when
 * such a block cannot launch (cudaOccMaxActiveBlocksPerMultiprocessor). */
static int blocks_per_sm(const gpu_model *g, int regs, int smem, int block)
{
    int warps = (block + 31) / 32;
    int by_warps = g->max_threads_sm / 32 / warps;
    int by_regs = g->max_blocks_sm;
    if (regs > 0) {
        int per_warp = round_up(regs * 32, g->reg_unit);
        /* The hardware assumes allocations on every sub-partition. */
        if (per_warp * round_up(warps, g->subpartitions) > g->regs_per_block || regs > 255)
            return 0;
        by_regs = g->regs_per_sm / g->subpartitions / per_warp * g->subpartitions / warps;
    }
    int by_smem = g->smem_per_sm / round_up(smem + g->smem_reserved, g->smem_unit);
    int n = g->max_blocks_sm;
    if (by_warps < n)
        n = by_warps;
    if (by_regs < n)
        n = by_regs;
    if (by_smem < n)
        n = by_smem;
    return n;
}

/* CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: the largest block that fits. */
static int max_threads(const gpu_model *g, int regs, int smem)
{
    for (int b = g->max_threads_block; b >= 32; b -= 32)
        if (blocks_per_sm(g, regs, smem, b) > 0)
            return b;
    return 0;
}

/* cuOccupancyMaxPotentialBlockSize: the block size of the most active
 * threads per SM, the largest on a tie (it searches downwards and keeps
 * only a strictly better one). */
static int suggested_block(const gpu_model *g, int regs, int smem)
{
    int best = 0, best_b = 32;
    for (int b = max_threads(g, regs, smem); b >= 32; b -= 32) {
        int occ = blocks_per_sm(g, regs, smem, b) * b;
        if (occ > best) {
            best = occ;
            best_b = b;
        }
        if (best == g->max_threads_sm)
            break;
    }
    return best_b;
}

/* What the backend would launch, and how full the device would be. */
typedef struct launch_fit {
    int regs, smem;
    unsigned block, grid;
    int per_sm;       /* active blocks per SM at this block size */
    double occupancy; /* theoretical: active warps per SM / max warps */
    double grid_per_sm;
    int64_t threads_of_work; /* threads that have work (FLAT: units; BLOCK: units x inner) */
    bool fills;       /* >= 2 blocks per SM and >= 50% occupancy */
    bool work_allows; /* enough work for 2 full blocks per SM */
} launch_fit;

static launch_fit fit_launch(const gpu_model *g, const kir_cuda_launch *L, const kl_ptxas_info *pi)
{
    launch_fit f = {.regs = pi->registers, .smem = pi->smem_bytes};
    int maxt = max_threads(g, f.regs, f.smem);
    f.block = kl_cuda_block_size(L, g->sms, suggested_block(g, f.regs, f.smem), maxt);
    f.per_sm = blocks_per_sm(g, f.regs, f.smem, (int)f.block);
    f.grid = kl_cuda_grid_size(L, f.block, g->sms, f.per_sm);
    f.occupancy = (double)f.per_sm * ((f.block + 31) / 32) / (g->max_threads_sm / 32);
    f.grid_per_sm = (double)f.grid / g->sms;
    f.threads_of_work = L->map == KIR_CUDA_FLAT ? L->units : L->units * (L->inner > 0 ? L->inner : 1);
    f.fills = f.grid >= 2u * (unsigned)g->sms && f.occupancy >= 0.5;
    /* Enough work for 2 blocks per SM of the smallest block the backend
     * shrinks a flat launch to (not the block it chose: a backend that
     * picked huge blocks must not make the work look small). */
    f.work_allows = f.threads_of_work >= 2 * (int64_t)g->sms * KL_CUDA_FLAT_MIN_BLOCK;
    return f;
}

typedef struct reason {
    char *match, *why;
    bool used;
} reason;
typedef KL_VEC(reason) reason_vec;

static int read_reasons(const char *path, reason_vec *out)
{
    FILE *fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "occupancy_check: cannot open reasons file %s\n", path);
        return -1;
    }
    char line[1024];
    for (int ln = 1; fgets(line, sizeof line, fp); ln++) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0] || line[0] == '#')
            continue;
        char *bar = strstr(line, " | ");
        if (!bar || bar == line || !bar[3]) {
            fprintf(stderr, "%s:%d: expected `OP | reason`\n", path, ln);
            fclose(fp);
            return -1;
        }
        *bar = 0;
        reason r = {kl_xstrdup(line), kl_xstrdup(bar + 3), false};
        kl_vec_push(*out, r);
    }
    fclose(fp);
    return 0;
}

static void reasons_free(reason_vec *rs)
{
    for (int i = 0; i < rs->n; i++) {
        free(rs->v[i].match);
        free(rs->v[i].why);
    }
    kl_vec_free(*rs);
}

/* Whether "what" (op names joined by " + ") lists op. */
static bool lists_op(const char *what, const char *op)
{
    size_t n = strlen(op);
    for (const char *p = what; (p = strstr(p, op)); p += n)
        if ((p == what || p[-1] == ' ') && (!p[n] || p[n] == ' '))
            return true;
    return false;
}

/* Why launch L may leave the device part empty on g, or NULL: the check's
 * own reasons first (too little work), then the reasons file. */
static const char *why_not(const plan_kernel *k, const kir_cuda_launch *L, const launch_fit *f,
                           reason_vec *reasons, char *buf, size_t n)
{
    if (!f->work_allows && f->occupancy >= 0.5) {
        if (L->map == KIR_CUDA_FLAT)
            snprintf(buf, n, "work: %lld units fill %u block(s) of %u threads", (long long)L->units, f->grid, f->block);
        else
            snprintf(buf, n, "work: %lld output(s) x %lld elements, under 2 blocks of %d threads per SM", (long long)L->units,
                     (long long)L->inner, KL_CUDA_FLAT_MIN_BLOCK);
        return buf;
    }
    for (int i = 0; i < reasons->n; i++)
        if (lists_op(k->what, reasons->v[i].match)) {
            reasons->v[i].used = true;
            return reasons->v[i].why;
        }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *batch = NULL, *precisions = "fp32,bf16", *reasons_path = NULL;
    bool table = false;
    KL_VEC(const char *) models = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = argv[++i];
        else if (!strcmp(argv[i], "--precisions") && i + 1 < argc)
            precisions = argv[++i];
        else if (!strcmp(argv[i], "--reasons") && i + 1 < argc)
            reasons_path = argv[++i];
        else if (!strcmp(argv[i], "--table"))
            table = true;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "occupancy_check: unknown option %s\n", argv[i]);
            return 2;
        } else
            kl_vec_push(models, argv[i]);
    }
    reason_vec reasons = {0};
    if (reasons_path && read_reasons(reasons_path, &reasons)) {
        reasons_free(&reasons);
        kl_vec_free(models);
        return 2;
    }
    char why[600];
    if (kl_nvrtc_load(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        reasons_free(&reasons);
        kl_vec_free(models);
        return 77;
    }
    plan_kernel_vec ks = {0};
    int plans = 0, failures = plan_collect_kernels(models.v, models.n, batch, precisions, &ks, &plans);
    for (int i = 0; i < ks.n; i++)
        if (ks.v[i].nl > 16)
            kl_panic("kernel %s has %d launches (at most 16 here)", ks.v[i].name, ks.v[i].nl);
    /* ptxas's report per architecture: fit[g][kernel][launch]. */
    launch_fit *fit[NGPUS];
    kl_nvrtc_job *jobs = kl_xcalloc((size_t)ks.n + 1, sizeof *jobs);
    for (int g = 0; g < NGPUS; g++) {
        fit[g] = kl_xcalloc((size_t)ks.n * 16 + 1, sizeof *fit[g]);
        for (int i = 0; i < ks.n; i++) {
            memset(&jobs[i], 0, sizeof jobs[i]);
            jobs[i].name = ks.v[i].name;
            jobs[i].src = ks.v[i].program;
        }
        kl_nvrtc_opts o = {.arch = gpus[g].arch, .quiet = true};
        failures += kl_nvrtc_compile(jobs, ks.n, &o);
        for (int i = 0; i < ks.n; i++) {
            for (int l = 0; l < ks.v[i].nl && !jobs[i].rc; l++) {
                kl_ptxas_info pi;
                if (kl_ptxas_info_of(jobs[i].log, ks.v[i].launches[l].fn, &pi)) {
                    printf("FAIL: no ptxas report for %s (%s) on %s\n", ks.v[i].launches[l].fn, ks.v[i].what, gpus[g].arch);
                    failures++;
                    continue;
                }
                fit[g][i * 16 + l] = fit_launch(&gpus[g], &ks.v[i].launches[l], &pi);
            }
            free(jobs[i].image);
            free(jobs[i].log);
        }
    }
    if (table) {
        printf("| kernel (ops) | launch | map: units x inner |");
        for (int g = 0; g < NGPUS; g++)
            printf(" %s grid x block | regs, smem | occupancy | blocks/SM |", gpus[g].name);
        printf(" verdict |\n|---|---|---|");
        for (int g = 0; g < NGPUS; g++)
            printf("---|---|---|---|");
        printf("---|\n");
    }
    int launches = 0, filled = 0, small = 0, stated = 0;
    for (int i = 0; i < ks.n; i++) {
        const plan_kernel *k = &ks.v[i];
        for (int l = 0; l < k->nl; l++) {
            const kir_cuda_launch *L = &k->launches[l];
            char verdict[400] = "fills", buf[300];
            bool bad = false;
            launches++;
            for (int g = 0; g < NGPUS && !bad; g++) {
                const launch_fit *f = &fit[g][i * 16 + l];
                if (f->fills)
                    continue;
                const char *w = why_not(k, L, f, &reasons, buf, sizeof buf);
                if (!w) {
                    bad = true;
                    snprintf(verdict, sizeof verdict,
                             "FAIL on %s: %u blocks (%.2f per SM), %.0f%% occupancy, for %lld threads of work",
                             gpus[g].name, f->grid, f->grid_per_sm, 100 * f->occupancy, (long long)f->threads_of_work);
                } else {
                    snprintf(verdict, sizeof verdict, "%s", w);
                }
            }
            if (bad) {
                failures++;
                printf("FAIL: %s (%s, from %s): %s\n", L->fn, k->what, k->where, verdict);
            } else if (!strcmp(verdict, "fills")) {
                filled++;
            } else if (!strncmp(verdict, "work:", 5)) {
                small++;
            } else {
                stated++;
            }
            if (table) {
                printf("| %s | %s | %s: %lld x %lld |", k->what, L->fn, L->map == KIR_CUDA_FLAT ? "flat" : "block",
                       (long long)L->units, (long long)L->inner);
                for (int g = 0; g < NGPUS; g++) {
                    const launch_fit *f = &fit[g][i * 16 + l];
                    printf(" %u x %u | %d, %d B | %.0f%% | %.2f |", f->grid, f->block, f->regs, f->smem, 100 * f->occupancy,
                           f->grid_per_sm);
                }
                printf(" %s |\n", verdict);
            }
        }
    }
    for (int i = 0; i < reasons.n; i++)
        if (!reasons.v[i].used) {
            printf("FAIL: %s: the reason for \"%s\" names no launch that needs one (remove it)\n", reasons_path,
                   reasons.v[i].match);
            failures++;
        }
    printf("%d kernels, %d launches on %s and %s: %d fill the device (>= 2 blocks/SM, >= 50%% occupancy), %d have too "
           "little work, %d have a stated reason, %d failed\n",
           ks.n, launches, gpus[0].name, gpus[1].name, filled, small, stated, failures);
    for (int g = 0; g < NGPUS; g++)
        free(fit[g]);
    free(jobs);
    plan_kernels_free(&ks);
    reasons_free(&reasons);
    kl_vec_free(models);
    return failures ? 1 : 0;
}
