/* kiln counters: deterministic performance counters of a model's plans,
 * computed from the plans alone (no timing), for the CI guard
 * (tests/perf/guard.sh) and for anyone comparing two compilers' output.
 *
 * Per optimizer step of the training plan (forward and backward run once
 * per micro-batch, `accumulate` times; the update once) and per batch of
 * the evaluation plan:
 *   kernels       distinct generated kernels in the plan
 *   launches      kernel launches
 *   gemm_calls    GEMM library calls (matmuls, convolutions' GEMMs)
 *   gemm_flops    their floating-point operations (2 m n k per product)
 *   kernel_bytes  bytes the generated kernels move at least (each input
 *                 read once, each output written once)
 *   gemm_bytes    the same for the GEMMs
 *   arena_bytes   the memory plan's arena
 *   persistent_bytes  params, optimizer state, statistics
 *   h2d_bytes     host -> device copies: the batch's inputs
 *   d2h_bytes     device -> host copies: the loss and the reported values
 * Every counter is "lower is better"; the guard fails when one grows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "driver/compile.h"
#include "ir/train_config.h"

#define COUNTERS(X)                                                                                                    \
    X(kernels) X(launches) X(gemm_calls) X(gemm_flops) X(kernel_bytes) X(gemm_bytes) X(arena_bytes)    \
        X(persistent_bytes) X(h2d_bytes) X(d2h_bytes)

typedef struct plan_counters {
#define FIELD(name) double name;
    COUNTERS(FIELD)
#undef FIELD
} plan_counters;

/* Counts one plan; micro: how many times forward and backward run per
 * optimizer step (the update phase runs once). */
static plan_counters count_plan(const kl_plan *p, int64_t micro)
{
    plan_counters c = {0};
    const ir_graph *g = p->g;
    c.kernels = p->kernels.n;
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *s = &p->steps.v[i];
        double times = s->phase == IR_PHASE_UPDATE ? 1 : (double)micro;
        if (s->kind == KL_STEP_GEMM) {
            c.gemm_calls += times;
            c.gemm_flops += times * s->flops;
            c.gemm_bytes += times * (double)s->bytes;
        } else {
            c.launches += times;
            c.kernel_bytes += times * (double)s->bytes;
        }
    }
    c.arena_bytes = (double)p->arena_bytes;
    for (int i = 0; i < p->buffers.n; i++)
        if (p->buffers.v[i].region == KL_REGION_PERSISTENT)
            c.persistent_bytes += (double)p->buffers.v[i].bytes;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind == IR_VAL_INPUT)
            c.h2d_bytes += (double)micro * (double)ir_type_bytes(&v->type);
    }
    if (g->loss >= 0)
        c.d2h_bytes += (double)micro * (double)ir_type_bytes(&ir_val(g, g->loss)->type);
    for (int i = 0; i < g->reports.n; i++)
        c.d2h_bytes += (double)micro * (double)ir_type_bytes(&ir_val(g, g->reports.v[i].value)->type);
    return c;
}

static int compile_counters(const char *file, const char *const *kv, bool no_fusion, kl_mode mode,
                            plan_counters *out, char **precision, int64_t *batch)
{
    kl_compile_opts co = {.kv = kv, .mode = mode, .no_fusion = no_fusion};
    kl_compiled *c = kl_compile_file(file, &co);
    if (!c)
        return -1;
    kl_train_config cfg;
    kl_train_read(&c->g->train, &cfg);
    if (precision)
        *precision = kl_xstrdup(kl_precision_name(cfg.precision));
    if (batch)
        *batch = cfg.batch;
    *out = count_plan(c->plan, mode == KL_MODE_TRAIN && cfg.accumulate > 1 ? cfg.accumulate : 1);
    kl_train_config_free(&cfg);
    kl_compiled_free(c);
    return 0;
}

static const char usage[] =
    "usage: kiln counters FILE [--json] [--set KEY=VALUE]... [--batch N] [--no-fusion]\n"
    "\n"
    "Prints deterministic counters of the model's training plan (per optimizer\n"
    "step) and evaluation plan (per batch), computed from the plans without\n"
    "running anything: distinct kernels, kernel launches, GEMM calls and FLOPs,\n"
    "bytes the generated kernels and the GEMMs move, arena and persistent\n"
    "bytes, host<->device copy bytes. tests/perf/guard.sh compares them with\n"
    "tests/perf/baseline.json in CI.\n"
    "\n"
    "  --json           one JSON object (model, precision, batch, counters)\n"
    "  --set KEY=VALUE  override a train setting (precision=bf16, batch=64, ...)\n"
    "  --batch N        the same as --set batch=N\n"
    "  --no-fusion      the unfused plans (one kernel per op)\n"
    "\n"
    "KILN_FUSION_OFF=PATTERN[,PATTERN] (a debug switch of the fusion pass)\n"
    "turns single fusion patterns off.\n";

int kl_counters_main(int argc, char **argv)
{
    const char *file = NULL;
    bool json = false, no_fusion = false;
    const char *kv[66] = {NULL};
    char *owned[32];
    int nkv = 0, nowned = 0, rc = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            rc = 0;
            goto done;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--no-fusion")) {
            no_fusion = true;
        } else if ((!strcmp(a, "--set") || !strcmp(a, "--batch")) && i + 1 < argc) {
            const char *arg = argv[++i];
            if (nkv + 2 >= (int)KL_ARRAY_LEN(kv) || nowned == (int)KL_ARRAY_LEN(owned)) {
                kl_error("kiln counters: too many --set flags");
                goto done;
            }
            if (!strcmp(a, "--batch")) {
                kv[nkv++] = "batch";
                kv[nkv++] = arg;
                continue;
            }
            const char *eq = strchr(arg, '=');
            if (!eq || eq == arg) {
                kl_error("kiln counters: --set needs KEY=VALUE, got '%s'", arg);
                goto done;
            }
            owned[nowned] = kl_xstrndup(arg, (size_t)(eq - arg));
            if (kl_train_check_set(owned[nowned++], eq + 1))
                goto done;
            kv[nkv++] = owned[nowned - 1];
            kv[nkv++] = eq + 1;
        } else if (a[0] == '-' && a[1]) {
            kl_error("kiln counters: unknown option or missing value: %s (see kiln counters --help)", a);
            goto done;
        } else if (!file) {
            file = a;
        } else {
            kl_error("kiln counters: more than one input file");
            goto done;
        }
    }
    if (!file) {
        kl_error("kiln counters: no input file (see kiln counters --help)");
        goto done;
    }
    plan_counters tr, ev;
    char *precision = NULL;
    int64_t batch = 0;
    if (compile_counters(file, nkv ? kv : NULL, no_fusion, KL_MODE_TRAIN, &tr, &precision, &batch))
        goto done;
    if (compile_counters(file, nkv ? kv : NULL, no_fusion, KL_MODE_EVAL, &ev, NULL, NULL)) {
        free(precision);
        goto done;
    }
    if (json) {
        printf("{\"model\": \"%s\", \"precision\": \"%s\", \"batch\": %lld, \"fusion\": %s, \"counters\": {",
               file, precision, (long long)batch, no_fusion ? "false" : "true");
        const char *sep = "";
#define JSON(name)                                                                                                     \
    printf("%s\"train.%s\": %.0f, \"eval.%s\": %.0f", sep, #name, tr.name, #name, ev.name);                            \
    sep = ", ";
        COUNTERS(JSON)
#undef JSON
        printf("}}\n");
    } else {
        printf("%s (precision %s, batch %lld%s)\n", file, precision, (long long)batch, no_fusion ? ", unfused" : "");
        printf("%-18s %22s %22s\n", "counter", "train (per step)", "eval (per batch)");
#define ROW(name) printf("%-18s %22.0f %22.0f\n", #name, tr.name, ev.name);
        COUNTERS(ROW)
#undef ROW
    }
    free(precision);
    rc = fflush(stdout) ? 1 : 0;
done:
    for (int i = 0; i < nowned; i++)
        free(owned[i]);
    return rc;
}
