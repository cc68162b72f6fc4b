/* Cluster descriptions for kiln plan (cluster.h): the built-in device
 * tables, the cluster file format and the CPU this runs on, measured. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "cluster.h"
#include "runtime/data/values.h"
#include "base/support.h"
#include "runtime/exec/backend.h"
#include "runtime/observe/bottleneck.h"

#define T 1e12
#define G 1e9

/* Dense peaks (no structured sparsity: the datasheets' starred figures
 * are sparse and twice these), memory, SMs and NVLink per GPU. NVLink's
 * datasheet figure is both directions together; a ring's step sends one
 * way, so the table holds half of it. */
static const kl_device devices[] = {
    /* NVIDIA H200 Tensor Core GPU datasheet (2024), "H200 SXM" column:
     * FP64 34 TFLOPS, FP64 Tensor Core 67, FP32 67, TF32 Tensor Core
     * 989 (sparse; 494.5 dense), BF16 and FP16 Tensor Core 1,979 (sparse;
     * 989.5 dense), 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s. SMs: the
     * same GH100 as the H100 SXM5 (132). */
    {"H200 SXM", true, 67 * T, 67 * T, 494.5 * T, 989.5 * T, 989.5 * T, 4.8e12, 141e9, 132, 450 * G},
    /* NVIDIA H100 Tensor Core GPU datasheet (2023), "H100 SXM" column:
     * FP64 Tensor Core 67 TFLOPS, FP32 67, TF32 989 sparse (494.5
     * dense), BF16 and FP16 1,979 sparse (989.5 dense), 80 GB HBM3 at
     * 3.35 TB/s, NVLink 900 GB/s; 132 SMs: NVIDIA H100 Tensor Core GPU
     * Architecture whitepaper, table 3 (H100 SXM5). */
    {"H100 SXM", true, 67 * T, 67 * T, 494.5 * T, 989.5 * T, 989.5 * T, 3.35e12, 80e9, 132, 450 * G},
    /* NVIDIA A100 Tensor Core GPU datasheet (2021), "A100 80GB SXM":
     * FP64 Tensor Core 19.5 TFLOPS, FP32 19.5, TF32 156 (312 sparse),
     * BF16 and FP16 312 (624 sparse), 80 GB HBM2e at 2,039 GB/s, NVLink
     * 600 GB/s; 108 SMs: NVIDIA A100 Tensor Core GPU Architecture
     * whitepaper, table 1. */
    {"A100 SXM", true, 19.5 * T, 19.5 * T, 156 * T, 312 * T, 312 * T, 2.039e12, 80e9, 108, 300 * G},
};

/* Inter-node bandwidth per GPU, one direction: DGX H100 and DGX H200
 * datasheets, 8 x ConnectX-7 400 Gb/s InfiniBand (one per GPU): 50 GB/s;
 * DGX A100 datasheet, 8 x ConnectX-6 200 Gb/s HDR: 25 GB/s. */
static const double inter_bw[] = {50 * G, 50 * G, 25 * G};

/* The cost model's defaults on a GPU. Assumptions, not measurements
 * (no GPU has run kiln plan's calibration; every output says so):
 * - gemm 0.70: large cuBLAS bf16 GEMMs on H100 reach about 70% of the
 *   dense peak; Megatron-LM (Narayanan et al. 2021, table 1) reports 44-52%
 *   of A100 peak for whole GPT steps, which this with attention and
 *   memory-bound kernels reproduces.
 * - attention 0.45: FlashAttention-2 (Dao 2023, fig. 5/6) 50-73% forward,
 *   lower backward on A100.
 * - kernel 0.75 of HBM bandwidth: elementwise kernels near STREAM's.
 * - link 0.80: NCCL's bus bandwidth against the link's (nccl-tests).
 * - launch 3 us per kernel or GEMM (stream-ordered launches).
 * - 50 us a micro-batch for the host's loop (feeding the inputs, reading
 *   the loss back). */
static const kl_cost_eff gpu_eff = {0.70, 0.45, 0.75, 0.80, 3e-6, 50e-6};

/* Latencies (alpha of the alpha-beta model) per ring or tree step:
 * assumptions of the order nccl-tests' small-message times show. */
static const double gpu_intra_lat = 3e-6, gpu_inter_lat = 8e-6;

static const char *const device_keys[] = {"h200", "h100", "a100"};

/* The CPU's peaks, measured now with one thread (each rank runs one):
 * fp32 and bf16 GEMMs of 512^3 through the CPU backend (best of 5) and
 * memcpy's bandwidth (runtime/observe/bottleneck.h). */
static double cpu_gemm_peak(kl_backend *be, ir_dtype dt)
{
    const int64_t n = 512;
    kl_gemm g = {.dtype = dt, .out_dtype = IR_F32, .m = n, .n = n, .k = n, .batch = 1, .alpha = 1};
    size_t es = (size_t)ir_dtype_size(dt);
    void *a = kl_xmalloc((size_t)(n * n) * es), *b = kl_xmalloc((size_t)(n * n) * es);
    float *c = kl_xcalloc((size_t)(n * n), sizeof(float));
    for (int64_t i = 0; i < n * n; i++) {
        kl_store_as(dt, a, i, (double)((i * 7919) % 1000) / 1000.0 - 0.5);
        kl_store_as(dt, b, i, (double)((i * 104729) % 1000) / 1000.0 - 0.5);
    }
    double best = 0;
    for (int r = 0; r < 6; r++) {
        double t0 = kl_now();
        be->ops->gemm(be, &g, a, b, c);
        double dt_s = kl_now() - t0, f = 2.0 * (double)(n * n * n) / dt_s;
        if (r > 0 && dt_s > 0 && f > best)
            best = f;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

static int cpu_device(kl_cluster *c, int ranks)
{
    kl_cpu_options co = {.threads = 1, .threads_from = "kiln plan", .quiet = true};
    kl_backend *be = kl_cpu_backend_new(&co);
    if (!be)
        return -1;
    kl_device *d = &c->dev;
    d->name = "this CPU (one thread a rank, measured)";
    d->gpu = false;
    d->fp32 = d->tf32 = d->fp64 = cpu_gemm_peak(be, IR_F32);
    /* Whatever runs the backend's 16-bit GEMMs (oneDNN's bf16, the
     * widening f16 path) is what a training run gets. */
    d->bf16 = cpu_gemm_peak(be, IR_BF16);
    d->fp16 = cpu_gemm_peak(be, IR_F16);
    d->mem_bw = kl_copy_bandwidth() * 1e9;
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    d->mem_bytes = pages > 0 && size > 0 ? (double)pages * (double)size / (ranks > 0 ? ranks : 1) : 8e9;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    d->sms = cores > 0 ? (int)cores : 1;
    d->nvlink_bw = 0;
    be->ops->destroy(be);
    c->cores = d->sms;
    c->per_node = ranks > 0 ? ranks : 1;
    c->nodes = 1;
    /* MPI over shared memory: a copy through a shared segment (the
     * sender writes, the receiver reads: half the copy bandwidth), and a
     * few microseconds a message (assumptions: Open MPI's vader BTL). */
    c->intra_bw = d->mem_bw / 2;
    c->intra_lat = 5e-6;
    c->inter_bw = c->intra_bw;
    c->inter_lat = c->intra_lat;
    /* The CPU's efficiencies, from kiln bench on a Zen 4 core (docs/guides/plan.md):
     * small GEMMs of the examples at about 0.6 of the 512^3 peak; the
     * hand-written attention at 0.35 of it; generated kernels at about
     * 0.25 of memcpy's bandwidth (exp, tanh and reductions cost more
     * than their bytes); 2 us a step of dispatch (all of these only
     * without --calibrate's timings, which replace them); 0.1 ms of CPU
     * time a micro-batch for the training loop's host work (fit on the
     * CNN's one-rank rows of bench/plan_validate.sh: 64 x 1, 16 x 4 and
     * 4 x 16 took 23.2, 24.6 and 24.3 ms). */
    c->eff = (kl_cost_eff){0.60, 0.35, 0.25, 0.50, 2e-6, 0.1e-3};
    c->measured = true;
    /* Other work on the machine shares the cores with the measurement
     * (which times CPU time, so it is slowed less than the wall time). */
    double la[1];
    c->load = getloadavg(la, 1) == 1 ? la[0] : -1;
    return 0;
}

static int gpu_cluster(int k, int per_node, kl_cluster *c)
{
    c->dev = devices[k];
    c->per_node = per_node;
    c->nodes = 1;
    c->intra_bw = devices[k].nvlink_bw;
    c->intra_lat = gpu_intra_lat;
    c->inter_bw = inter_bw[k];
    c->inter_lat = gpu_inter_lat;
    c->cores = 0;
    c->eff = gpu_eff;
    return 0;
}

/* A number with a unit: unit is one of names[i] (scale[i]); bare numbers
 * take scale 1. -1 when the unit is unknown. */
static int parse_value(const char *s, const char *const *names, const double *scale, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return -1;
    while (*end == ' ' || *end == '\t')
        end++;
    if (!*end) {
        *out = v;
        return 0;
    }
    for (int i = 0; names[i]; i++)
        if (!strcmp(end, names[i])) {
            *out = v * scale[i];
            return 0;
        }
    return -1;
}

static const char *const bw_units[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s", "Gb/s", "Tb/s", NULL};
static const double bw_scale[] = {1, 1e3, 1e6, 1e9, 1e12, 1e9 / 8, 1e12 / 8};
static const char *const time_units[] = {"s", "ms", "us", "ns", NULL};
static const double time_scale[] = {1, 1e-3, 1e-6, 1e-9};
static const char *const size_units[] = {"B", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", NULL};
static const double size_scale[] = {1, 1e3, 1e6, 1e9, 1e12, 1024.0, 1048576.0, 1073741824.0};
static const char *const flops_units[] = {"FLOP/s", "GFLOP/s", "TFLOP/s", "GFLOPS", "TFLOPS", NULL};
static const double flops_scale[] = {1, 1e9, 1e12, 1e9, 1e12};
static const char *const no_units[] = {NULL};
static const double no_scale[] = {1};

/* The file's keys: what each sets, and its units. */
typedef struct file_key {
    const char *key;
    const char *const *units;
    const double *scale;
    const char *unit_hint;
} file_key;

static const file_key file_keys[] = {
    {"gpus_per_node", no_units, no_scale, "a count"},
    {"nodes", no_units, no_scale, "a count"},
    {"intra_bw", bw_units, bw_scale, "e.g. 450 GB/s"},
    {"intra_latency", time_units, time_scale, "e.g. 3 us"},
    {"inter_bw", bw_units, bw_scale, "e.g. 400 Gb/s"},
    {"inter_latency", time_units, time_scale, "e.g. 8 us"},
    {"memory", size_units, size_scale, "e.g. 80 GB"},
    {"mem_bw", bw_units, bw_scale, "e.g. 3.35 TB/s"},
    {"peak_fp32", flops_units, flops_scale, "e.g. 67 TFLOP/s"},
    {"peak_bf16", flops_units, flops_scale, "e.g. 989 TFLOP/s"},
    {"peak_fp16", flops_units, flops_scale, "e.g. 989 TFLOP/s"},
    {"eff_gemm", no_units, no_scale, "a share from 0 to 1"},
    {"eff_attention", no_units, no_scale, "a share from 0 to 1"},
    {"eff_kernel", no_units, no_scale, "a share from 0 to 1"},
    {"eff_link", no_units, no_scale, "a share from 0 to 1"},
    {"launch", time_units, time_scale, "e.g. 3 us"},
    {"micro_overhead", time_units, time_scale, "e.g. 50 us"},
    {"cores", no_units, no_scale, "a count"},
};

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        *--e = 0;
    return s;
}

static int set_key(kl_cluster *c, const char *key, double v)
{
    bool count = !strcmp(key, "gpus_per_node") || !strcmp(key, "nodes") || !strcmp(key, "cores");
    if (count && (v < 1 || v > 1 << 20 || v != floor(v)))
        return -1;
    if (!strncmp(key, "eff_", 4) && (v <= 0 || v > 1))
        return -1;
    if (!count && strncmp(key, "eff_", 4) && strcmp(key, "intra_latency") && strcmp(key, "inter_latency") &&
        strcmp(key, "launch") && strcmp(key, "micro_overhead") && v <= 0)
        return -1;
    if (!strcmp(key, "gpus_per_node")) c->per_node = (int)v;
    else if (!strcmp(key, "nodes")) c->nodes = (int)v;
    else if (!strcmp(key, "cores")) c->cores = (int)v;
    else if (!strcmp(key, "intra_bw")) c->intra_bw = v;
    else if (!strcmp(key, "intra_latency")) c->intra_lat = v;
    else if (!strcmp(key, "inter_bw")) c->inter_bw = v;
    else if (!strcmp(key, "inter_latency")) c->inter_lat = v;
    else if (!strcmp(key, "memory")) c->dev.mem_bytes = v;
    else if (!strcmp(key, "mem_bw")) c->dev.mem_bw = v;
    else if (!strcmp(key, "peak_fp32")) c->dev.fp32 = c->dev.tf32 = v;
    else if (!strcmp(key, "peak_bf16")) c->dev.bf16 = v;
    else if (!strcmp(key, "peak_fp16")) c->dev.fp16 = v;
    else if (!strcmp(key, "eff_gemm")) c->eff.gemm = v;
    else if (!strcmp(key, "eff_attention")) c->eff.attention = v;
    else if (!strcmp(key, "eff_kernel")) c->eff.kernel = v;
    else if (!strcmp(key, "eff_link")) c->eff.link = v;
    else if (!strcmp(key, "launch")) c->eff.launch_s = v;
    else if (!strcmp(key, "micro_overhead")) c->eff.micro_s = v;
    return 0;
}

static int builtin(const char *spec, kl_cluster *c, bool *found)
{
    *found = false;
    for (int k = 0; k < (int)KL_ARRAY_LEN(device_keys); k++) {
        size_t n = strlen(device_keys[k]);
        if (strncmp(spec, device_keys[k], n))
            continue;
        const char *rest = spec + n;
        int per = 8;
        if (*rest == 'x') {
            char *end;
            long v = strtol(rest + 1, &end, 10);
            if (*end || end == rest + 1 || v < 1 || v > 1024)
                return -1;
            per = (int)v;
        } else if (*rest) {
            continue;
        }
        *found = true;
        return gpu_cluster(k, per, c);
    }
    if (!strncmp(spec, "cpu", 3)) {
        const char *rest = spec + 3;
        int ranks = 1;
        if (*rest == 'x') {
            char *end;
            long v = strtol(rest + 1, &end, 10);
            if (*end || end == rest + 1 || v < 1 || v > 256)
                return -1;
            ranks = (int)v;
        } else if (*rest) {
            return 0;
        }
        *found = true;
        return cpu_device(c, ranks);
    }
    return 0;
}

/* A cluster file: `key = value` lines, `#` comments; `device = h100` (or
 * any built-in spec) first sets the defaults the other keys change. */
static int load_file(const char *path, kl_cluster *c)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        kl_error("kiln plan: --cluster %s: not a built-in cluster (h200x8, h100x8, a100x8, cpu, cpuxN) and no such "
                 "file",
                 path);
        return -1;
    }
    char line[512];
    int lineno = 0, rc = 0;
    bool have_device = false;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            kl_error("%s:%d: expected `key = value`, got '%s'", path, lineno, s);
            rc = -1;
            break;
        }
        *eq = 0;
        char *key = trim(s), *val = trim(eq + 1);
        if (!strcmp(key, "device")) {
            bool found = false;
            if (have_device) {
                kl_error("%s:%d: device given twice", path, lineno);
                rc = -1;
                break;
            }
            if (builtin(val, c, &found) || !found) {
                kl_error("%s:%d: unknown device '%s' (h200, h100, a100, cpu; xN for devices per node)", path, lineno,
                         val);
                rc = -1;
                break;
            }
            have_device = true;
            continue;
        }
        if (!have_device) {
            kl_error("%s:%d: the first key must be `device = h200|h100|a100|cpu` (the defaults the other keys change)",
                     path, lineno);
            rc = -1;
            break;
        }
        const file_key *fk = NULL;
        for (int i = 0; i < (int)KL_ARRAY_LEN(file_keys); i++)
            if (!strcmp(file_keys[i].key, key))
                fk = &file_keys[i];
        if (!fk) {
            kl_buf keys = {0};
            for (int i = 0; i < (int)KL_ARRAY_LEN(file_keys); i++)
                kl_buf_printf(&keys, "%s%s", i ? ", " : "", file_keys[i].key);
            kl_error("%s:%d: unknown key '%s' (device, %s)", path, lineno, key, keys.s);
            kl_buf_free(&keys);
            rc = -1;
            break;
        }
        double v;
        if (parse_value(val, fk->units, fk->scale, &v) || set_key(c, key, v)) {
            kl_error("%s:%d: %s: bad value '%s' (%s)", path, lineno, key, val, fk->unit_hint);
            rc = -1;
            break;
        }
    }
    fclose(f);
    if (!rc && !have_device) {
        kl_error("%s: no `device = ...` line", path);
        rc = -1;
    }
    return rc;
}

int kl_cluster_load(const char *spec, int nodes, kl_cluster *out)
{
    memset(out, 0, sizeof *out);
    bool found = false;
    if (builtin(spec, out, &found))
        return found ? -1 : (kl_error("kiln plan: --cluster %s: bad count after x (h200x8, cpux4)", spec), -1);
    if (!found && load_file(spec, out))
        return -1;
    snprintf(out->name, sizeof out->name, "%s", spec);
    if (nodes > 0)
        out->nodes = nodes;
    return 0;
}

double kl_cluster_peak(const kl_cluster *c, const char *precision)
{
    if (!strcmp(precision, "bf16"))
        return c->dev.bf16;
    if (!strcmp(precision, "fp16"))
        return c->dev.fp16;
    return c->dev.fp32;
}

char *kl_cluster_describe(const kl_cluster *c)
{
    const kl_device *d = &c->dev;
    int world = c->per_node * c->nodes;
    char *cpu = !c->cores ? kl_xstrdup("")
                : world > c->cores
                    ? kl_xasprintf("; %d ranks on %d cores: oversubscribed, the ranks share the cores (a step is at least "
                                   "every rank's busy time over %d cores)",
                                   world, c->cores, c->cores)
                    : kl_xasprintf("; %d rank%s on %d cores, a core each", world, world == 1 ? "" : "s", c->cores);
    if (c->measured && c->load >= 0) {
        char *with = kl_xasprintf("%s; load average %.2f while measured (other work on the machine)", cpu, c->load);
        free(cpu);
        cpu = with;
    }
    char *out = kl_xasprintf("%s: %d node%s x %d %s; peaks fp32 %.3g, bf16 %.3g, fp16 %.3g TFLOP/s, memory %.4g GB at "
                        "%.3g GB/s; links: within a node %.3g GB/s + %.3g us, across nodes %.3g GB/s + %.3g us "
                        "(per rank, one direction); efficiencies gemm %.2f, attention %.2f, kernels %.2f, links "
                        "%.2f, %.3g us a launch, %.3g us a micro-batch%s%s",
                        c->name, c->nodes, c->nodes == 1 ? "" : "s", c->per_node, d->name, d->fp32 / 1e12,
                        d->bf16 / 1e12, d->fp16 / 1e12, d->mem_bytes / 1e9, d->mem_bw / 1e9, c->intra_bw / 1e9,
                        c->intra_lat * 1e6, c->inter_bw / 1e9, c->inter_lat * 1e6, c->eff.gemm, c->eff.attention,
                        c->eff.kernel, c->eff.link, c->eff.launch_s * 1e6, c->eff.micro_s * 1e6,
                        d->gpu ? " (GPU efficiencies are assumptions: no GPU has been measured by kiln plan)" : "",
                        cpu);
    free(cpu);
    return out;
}
