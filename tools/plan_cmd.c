/* kiln plan: enumerates the layouts of a model on a cluster (shard dp /
 * zero1 / zero2 / zero3, tensor parallel T, pipeline P and its schedule,
 * micro-batch x accumulation, recomputation, precision), compiles each
 * one's training plan for its world (driver/compile.c, as the training
 * executable does), drops those whose memory per rank (params and state +
 * the arena, with pipeline stages the largest rank's own: kl_check_budget's
 * sum, which the suggested command enforces with --memory-limit) does not
 * fit, predicts the step of the others
 * (tools/plan_cost.h) and prints them ranked, with the command lines of
 * the best. Layouts the training executable refuses for other reasons
 * (driver/train_pipeline.c's not_built and train_pipeline_check; a
 * compile error) are dropped with the reason. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "plan_cmd.h"
#include "plan_cost.h"
#include "driver/budget.h"
#include "driver/compile.h"
#include "ir/train_config.h"
#include "passes/passes.h"

static const char usage[] =
    "usage: kiln plan MODEL --cluster SPEC --global-batch B [--nodes N] [--json]\n"
    "                 [--precision LIST] [--shard LIST] [--tensor-parallel LIST]\n"
    "                 [--pipeline LIST] [--micro LIST] [--memory BYTES] [--top K]\n"
    "                 [--all] [--no-calibrate] [--set KEY=VALUE]...\n"
    "\n"
    "Chooses the parallel layout, micro-batch and precision of a training run\n"
    "from the model's plans alone (nothing runs): every layout's training plan\n"
    "is compiled for its world, those whose memory per rank (params and state\n"
    "plus the arena, the training executable's --memory-limit check) does not\n"
    "fit are dropped, and the others are ranked by predicted step time\n"
    "(docs/guides/plan.md: the cost model and what it assumes).\n"
    "\n"
    "  --cluster SPEC   h200x8, h100x8, a100x8 (xN: GPUs per node), cpu or cpuxN\n"
    "                   (N ranks of one thread on this machine, peaks measured\n"
    "                   now), or a cluster file (docs/guides/plan.md)\n"
    "  --nodes N        nodes (default: the cluster's, 1 for the built-ins)\n"
    "  --global-batch B samples per optimizer step over all ranks\n"
    "  --json           one JSON object instead of the table\n"
    "  --precision LIST fp32,bf16,fp16 (default: all three; cpu: fp32,bf16)\n"
    "  --shard LIST     dp,zero1,zero2,zero3 (default: all)\n"
    "  --tensor-parallel LIST  sizes T to try (default: divisors of the GPUs per\n"
    "                   node, when the model has split matmuls)\n"
    "  --pipeline LIST  stage counts P to try (default: divisors of the world up to 8)\n"
    "  --micro LIST     micro-batches to try (default: powers of two dividing the\n"
    "                   per-replica batch, and that batch)\n"
    "  --memory BYTES   memory per rank (default: the device's; e.g. 80GB, 2MiB)\n"
    "  --top K          rows of the table (default 12) and commands (3)\n"
    "  --all            also rank layouts this build does not train (marked)\n"
    "  --no-calibrate   on cpu clusters, the roofline's default efficiencies instead\n"
    "                   of the steps timed on this CPU (one rank, each micro-batch)\n"
    "  --calibrate      time them (the default on cpu clusters)\n"
    "  --set KEY=VALUE  a train setting for every layout (not one plan varies)\n";

typedef struct cand {
    kl_layout L;
    char shard[8], sched[8], prec[8];
    int64_t mem, persistent, arena, held; /* held: pipeline's saved activations in flight (mem - persistent - arena) */
    bool compiled, fits, built;
    char *why;            /* why it is dropped or not built, or NULL */
    char *zero;           /* params, gradients and state per rank against ZeRO's formulas (D > 1, one stage) */
    kl_cost cost;
    double useful_flops;  /* every rank's GEMM and attention FLOPs a step, without recomputation */
    double mfu, samples_s, tokens_s;
} cand;

typedef struct opts {
    const char *file, *cluster;
    int nodes, top;
    int64_t global, memory;
    bool json, all, calibrate, no_calibrate;
    bool elsewhere; /* the cluster is not this machine: plans not checked against its memory */
    const char *prec, *shard, *tp, *pp, *micro;
    const char *kv[72];
    int nkv;
    char *owned[32];
    int nowned;
} opts;

/* Comma-separated integers; -1 after a bad one. */
static int parse_ints(const char *flag, const char *s, int64_t *out, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1 || (*end && *end != ',') || n == max) {
            kl_error("kiln plan: %s needs positive integers separated by commas, got '%s'", flag, s);
            return -1;
        }
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    if (!n)
        kl_error("kiln plan: %s needs positive integers separated by commas, got '%s'", flag, s);
    return n ? n : -1;
}

/* Comma-separated names from allowed; -1 after an unknown one. */
static int parse_names(const char *flag, const char *s, const char *const *allowed, const char **out, int max)
{
    int n = 0;
    char *copy = kl_xstrdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = -1;
        for (int i = 0; allowed[i]; i++)
            if (!strcmp(allowed[i], t))
                k = i;
        if (k < 0 || n == max) {
            kl_buf list = {0};
            for (int i = 0; allowed[i]; i++)
                kl_buf_printf(&list, "%s%s", i ? ", " : "", allowed[i]);
            kl_error("kiln plan: %s: unknown '%s' (%s)", flag, t, list.s);
            kl_buf_free(&list);
            free(copy);
            return -1;
        }
        out[n++] = allowed[k];
    }
    free(copy);
    if (!n)
        kl_error("kiln plan: %s needs a list, got '%s'", flag, s);
    return n ? n : -1;
}

static const char *const precisions[] = {"fp32", "bf16", "fp16", NULL};
static const char *const shards[] = {"dp", "zero1", "zero2", "zero3", NULL};
/* Keys each layout sets: --set may not. */
static const char *const layout_keys[] = {"batch", "accumulate", "precision", "shard", "tensor_parallel",
                                           "pipeline_parallel", "pipeline_schedule", "recompute", NULL};

/* Whether layout L (NULL: the model as given, one stage) takes --set
 * KEY: pipeline_virtual_stages is the interleaved layouts' only. */
static bool takes_setting(const kl_layout *L, const char *key)
{
    return strcmp(key, "pipeline_virtual_stages") || (L && L->P > 1 && !strcmp(L->schedule, "interleaved"));
}

/* The --set pairs layout L takes, into kv; their count (keys and values). */
static int layout_settings(const opts *o, const kl_layout *L, const char **kv)
{
    int n = 0;
    for (int i = 0; i < o->nkv; i += 2)
        if (takes_setting(L, o->kv[i])) {
            kv[n++] = o->kv[i];
            kv[n++] = o->kv[i + 1];
        }
    return n;
}

/* The compiled plan of a layout; the diagnostics of a failed compile in
 * *why (the first line). */
static kl_compiled *compile_layout(const opts *o, const kl_layout *L, char **why)
{
    char bs[24], as[24], ts[12], ps[12];
    snprintf(bs, sizeof bs, "%lld", (long long)L->micro);
    snprintf(as, sizeof as, "%lld", (long long)L->accumulate);
    snprintf(ts, sizeof ts, "%d", L->T);
    snprintf(ps, sizeof ps, "%d", L->P);
    const char *kv[100];
    int n = layout_settings(o, L, kv);
    const char *mine[] = {"batch", bs, "accumulate", as, "precision", L->precision, "shard", L->shard,
                          "tensor_parallel", ts, "pipeline_parallel", ps, "recompute", L->recompute ? "auto" : "copies"};
    for (int i = 0; i < (int)KL_ARRAY_LEN(mine); i++)
        kv[n++] = mine[i];
    if (L->P > 1) {
        kv[n++] = "pipeline_schedule";
        kv[n++] = L->schedule;
    }
    kv[n] = NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    FILE *prev = kl_diag_stream();
    kl_diag_set_stream(m);
    /* For another machine (a GPU cluster): not checked against this
     * one's memory, and without the plan checker, whose map of the arena
     * grows with it (training runs it where the plan runs). */
    kl_compile_opts co = {.kv = kv, .mode = KL_MODE_TRAIN, .ranks = L->T * L->P * L->D, .elsewhere = o->elsewhere,
                          .stop_after = o->elsewhere ? "memplan" : NULL};
    kl_compiled *c = kl_compile_file(o->file, &co);
    kl_diag_set_stream(prev);
    fclose(m);
    if (!c) {
        char *nl = buf ? strchr(buf, '\n') : NULL;
        if (nl)
            *nl = 0;
        *why = kl_xstrdup(buf && *buf ? buf : "the plan did not compile");
    }
    free(buf);
    return c;
}

/* What the training executable refuses before it plans: the reason, or
 * NULL (driver/train_pipeline.c, not_built and train_pipeline_check). */
static const char *not_built(const kl_layout *L, const kl_cluster *c)
{
    if (L->P > 1 && c->dev.gpu)
        return "pipeline_parallel runs on the CPU backend in this build";
    return NULL;
}

/* Every rank's GEMM and attention FLOPs of a step: the plan's (one rank's
 * share with tensor parallelism; the whole replica with pipeline stages,
 * which compile the whole plan) times the ranks that share it. */
static double useful_flops(const kl_plan *p, const kl_layout *L)
{
    double f = 0, m = (double)(L->accumulate > 1 ? L->accumulate : 1);
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *st = &p->steps.v[i];
        double times = st->phase == IR_PHASE_UPDATE ? 1 : st->phase == IR_PHASE_STARTUP ? 0 : m;
        if (st->kind == KL_STEP_GEMM)
            f += times * st->flops;
        else if (st->kind == KL_STEP_KERNEL)
            f += times * kl_attention_flops(&p->kernels.v[st->kernel]);
    }
    return f * L->T * L->D;
}

/* Tokens per sample: the second dim of the first integer input of rank
 * 2 (a language model's [batch, context]), else 0. */
static int64_t tokens_per_sample(const ir_graph *g)
{
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind == IR_VAL_INPUT && v->type.rank == 2 && (v->type.dtype == IR_I32 || v->type.dtype == IR_I64))
            return v->type.dim[1];
    }
    return 0;
}

/* The micro-batches of a replica's batch per: the --micro list's that
 * divide it, else the powers of two dividing it and per itself. */
static int micro_list(int64_t per, const int64_t *micv, int nmic, int64_t *out)
{
    int nm = 0;
    if (nmic) {
        for (int i = 0; i < nmic; i++)
            if (per % micv[i] == 0)
                out[nm++] = micv[i];
        return nm;
    }
    for (int64_t b = 1; b < per && nm < 63; b *= 2)
        if (per % b == 0)
            out[nm++] = b;
    out[nm++] = per;
    return nm;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static bool graph_has_split(const ir_graph *g)
{
    for (int i = 0; i < g->nodes.n; i++)
        if (!ir_nd(g, i)->dead && ir_attr_str(&ir_nd(g, i)->attrs, "split", NULL))
            return true;
    return false;
}

/* A rank's arena: the plan's, or with pipeline stages the largest of
 * the ranks' (each places its own stages' buffers); held: the most a
 * rank needs beside (the saved activations of its micro-batches in
 * flight: arena plus held is the largest of the ranks' sums). */
static int64_t rank_arena(kl_plan *p, const kl_layout *L, int64_t *held)
{
    *held = 0;
    if (L->P <= 1)
        return p->arena_bytes;
    int64_t most, need;
    kl_pipeline_rank_needs(p, L->P, &most, &need);
    *held = need - most;
    return most;
}

/* Evaluates one layout: compiles it, checks its memory (then with
 * recomputation when it does not fit), predicts its step. */
static void evaluate(const opts *o, const kl_cluster *c, const kl_calib *calib, int64_t tps, cand *k)
{
    const char *nb = not_built(&k->L, c);
    k->built = !nb;
    if (nb && !o->all) {
        k->why = kl_xstrdup(nb);
        return;
    }
    char *why = NULL;
    kl_compiled *cp = compile_layout(o, &k->L, &why);
    if (!cp) {
        k->why = why;
        return;
    }
    k->compiled = true;
    double capacity = o->memory > 0 ? (double)o->memory : c->dev.mem_bytes;
    k->persistent = kl_persistent_bytes(cp->g), k->arena = rank_arena(cp->plan, &k->L, &k->held);
    k->mem = k->persistent + k->arena + k->held;
    k->useful_flops = useful_flops(cp->plan, &k->L);
    if (k->L.D > 1 && k->L.P == 1)
        k->zero = pass_rank_memory(cp->g, k->L.T * k->L.D);
    if ((double)k->mem > capacity) {
        /* Recomputation of cheap activations (recompute = auto), the
         * training executable's own suggestion. */
        kl_layout R = k->L;
        R.recompute = true;
        char *rwhy = NULL;
        kl_compiled *rc = compile_layout(o, &R, &rwhy);
        free(rwhy);
        int64_t rheld = 0, rarena = rc ? rank_arena(rc->plan, &R, &rheld) : 0,
                rmem = rc ? kl_persistent_bytes(rc->g) + rarena + rheld : -1;
        if (rc && (double)rmem <= capacity) {
            kl_compiled_free(cp);
            cp = rc;
            k->L = R;
            k->persistent = kl_persistent_bytes(cp->g), k->arena = rarena, k->held = rheld;
            k->mem = rmem;
        } else {
            kl_compiled_free(rc);
            char with[80] = "";
            if (rmem > 0)
                snprintf(with, sizeof with, "; %.2f MB with recompute = auto", rmem / 1e6);
            char lim[40];
            char held[80] = "";
            if (k->held)
                snprintf(held, sizeof held, " + saved activations in flight %.2f MB", k->held / 1e6);
            k->why = kl_xasprintf("needs %.2f MB a rank (params and state %.2f MB + arena %.2f MB%s%s), over %s",
                                  k->mem / 1e6, k->persistent / 1e6, k->arena / 1e6, held, with,
                                  kl_limit_text(lim, sizeof lim, (int64_t)capacity));
            kl_compiled_free(cp);
            return;
        }
    }
    k->fits = true;
    if (nb)
        k->why = kl_xstrdup(nb);
    kl_plan_cost(cp->plan, c, calib, &k->L, &k->cost);
    int world = k->L.T * k->L.P * k->L.D;
    double peak = kl_cluster_peak(c, k->L.precision);
    k->mfu = k->cost.step_s > 0 && peak > 0 ? k->useful_flops / (k->cost.step_s * world * peak) : 0;
    k->samples_s = k->cost.step_s > 0 ? (double)o->global / k->cost.step_s : 0;
    k->tokens_s = k->samples_s * (double)tps;
    kl_compiled_free(cp);
}

static void layout_text(const cand *k, char *buf, size_t n)
{
    const kl_layout *L = &k->L;
    int off = snprintf(buf, n, "T%d P%d D%d %s", L->T, L->P, L->D, L->shard);
    if (L->P > 1)
        snprintf(buf + off, n - (size_t)off, " %s", L->schedule);
}

/* A word of a shell command: as it is when it holds only characters no
 * shell treats specially, else in single quotes (data=synthetic(600)). */
static void shell_word(kl_buf *b, const char *w)
{
    bool plain = *w != 0;
    for (const char *p = w; *p && plain; p++)
        plain = isalnum((unsigned char)*p) || strchr("_./=:,+-@%", *p);
    if (plain) {
        kl_buf_puts(b, w);
        return;
    }
    kl_buf_putc(b, '\'');
    for (const char *p = w; *p; p++)
        if (*p == '\'')
            kl_buf_puts(b, "'\\''");
        else
            kl_buf_putc(b, *p);
    kl_buf_putc(b, '\'');
}

static char *command_line(const opts *o, const kl_cluster *c, const cand *k)
{
    const kl_layout *L = &k->L;
    const char *base = strrchr(o->file, '/');
    base = base ? base + 1 : o->file;
    char *exe = kl_xstrdup(base);
    char *dot = strrchr(exe, '.');
    if (dot && dot != exe)
        *dot = 0;
    int world = L->T * L->P * L->D;
    kl_buf b = {0};
    kl_buf_printf(&b, "kiln build %s -o %s && ", o->file, exe);
    if (world > 1)
        kl_buf_printf(&b, "mpirun -np %d ", world);
    kl_buf_printf(&b, "./%s --batch %lld --accumulate %lld --precision %s", exe, (long long)L->micro,
                  (long long)L->accumulate, L->precision);
    if (L->D > 1)
        kl_buf_printf(&b, " --shard %s", L->shard);
    if (L->T > 1)
        kl_buf_printf(&b, " --tensor-parallel %d", L->T);
    if (L->P > 1)
        kl_buf_printf(&b, " --set pipeline_parallel=%d --set pipeline_schedule=%s", L->P, L->schedule);
    if (L->recompute)
        kl_buf_puts(&b, " --set recompute=auto");
    for (int i = 0; i < o->nkv; i += 2) {
        if (!takes_setting(L, o->kv[i]))
            continue;
        char *kv = kl_xasprintf("%s=%s", o->kv[i], o->kv[i + 1]);
        kl_buf_puts(&b, " --set ");
        shell_word(&b, kv);
        free(kv);
    }
    if (!c->dev.gpu)
        kl_buf_puts(&b, " --device cpu --threads 1");
    double cap = o->memory > 0 ? (double)o->memory : c->dev.mem_bytes;
    kl_buf_printf(&b, " --memory-limit %.0f --plan-predict %.4g", floor(cap), k->cost.step_s * 1e3);
    free(exe);
    return kl_buf_take(&b);
}

static int by_step(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->fits != y->fits)
        return x->fits ? -1 : 1;
    if (x->built != y->built)
        return x->built ? -1 : 1;
    if (!x->fits)
        return 0;
    return x->cost.step_s < y->cost.step_s ? -1 : x->cost.step_s > y->cost.step_s;
}

static const char assumptions_gpu[] =
    "the GPU's kernel, attention and link efficiencies are assumptions (no GPU has been measured by kiln plan); "
    "data loading is not modelled";
static const char assumptions_cpu[] =
    "peaks measured now on this CPU (one thread a rank); efficiencies from kiln bench on one machine; "
    "data loading is not modelled";

static void print_json(const opts *o, const kl_cluster *c, cand *v, int n, int64_t tps)
{
    printf("{\"model\": ");
    kl_fput_json_str(stdout, o->file);
    printf(", \"cluster\": {\"name\": ");
    kl_fput_json_str(stdout, c->name);
    printf(", \"device\": ");
    kl_fput_json_str(stdout, c->dev.name);
    printf(", \"gpus_per_node\": %d, \"nodes\": %d, \"peak_fp32\": %.6g, \"peak_bf16\": %.6g, \"peak_fp16\": %.6g, "
           "\"mem_bw\": %.6g, \"memory\": %.6g, \"intra_bw\": %.6g, \"intra_latency\": %.6g, \"inter_bw\": %.6g, "
           "\"inter_latency\": %.6g, \"measured\": %s}, \"global_batch\": %lld, \"tokens_per_sample\": %lld, "
           "\"capacity\": %.0f, \"assumptions\": ",
           c->per_node, c->nodes, c->dev.fp32, c->dev.bf16, c->dev.fp16, c->dev.mem_bw, c->dev.mem_bytes, c->intra_bw,
           c->intra_lat, c->inter_bw, c->inter_lat, c->measured ? "true" : "false", (long long)o->global,
           (long long)tps, o->memory > 0 ? (double)o->memory : c->dev.mem_bytes);
    kl_fput_json_str(stdout, c->dev.gpu ? assumptions_gpu : assumptions_cpu);
    char *desc = kl_cluster_describe(c);
    printf(", \"cores\": %d, \"load_average\": %.2f, \"description\": ", c->cores, c->measured ? c->load : -1.0);
    kl_fput_json_str(stdout, desc);
    free(desc);
    printf(", \"layouts\": [");
    for (int i = 0; i < n; i++) {
        const cand *k = &v[i];
        const kl_layout *L = &k->L;
        printf("%s\n  {\"T\": %d, \"P\": %d, \"D\": %d, \"shard\": \"%s\", \"schedule\": \"%s\", \"micro\": %lld, "
               "\"accumulate\": %lld, \"precision\": \"%s\", \"recompute\": %s, \"fits\": %s, \"built\": %s",
               i ? "," : "", L->T, L->P, L->D, L->shard, L->P > 1 ? L->schedule : "none", (long long)L->micro,
               (long long)L->accumulate, L->precision, L->recompute ? "true" : "false", k->fits ? "true" : "false",
               k->built ? "true" : "false");
        if (k->compiled)
            printf(", \"memory\": %lld, \"persistent\": %lld, \"arena\": %lld, \"held\": %lld", (long long)k->mem,
                   (long long)k->persistent, (long long)k->arena, (long long)k->held);
        if (k->fits) {
            const kl_cost *q = &k->cost;
            printf(", \"step_s\": %.9g, \"samples_s\": %.6g, \"tokens_s\": %.6g, \"mfu\": %.9g, \"compute_s\": %.9g, "
                   "\"memory_s\": %.9g, \"launch_s\": %.9g, \"intra_s\": %.9g, \"inter_s\": %.9g, \"exposed_intra_s\": "
                   "%.9g, \"exposed_inter_s\": %.9g, \"intra_bytes\": %.0f, \"inter_bytes\": %.0f, \"flops\": %.6g, "
                   "\"useful_flops\": %.6g, \"bubble\": %.6g, \"bound\": \"%s\", \"critical_s\": %.9g, \"cores_s\": %.9g",
                   q->step_s, k->samples_s, k->tokens_s, k->mfu, q->compute_s, q->memory_s, q->launch_s, q->intra_s,
                   q->inter_s, q->exposed_intra_s, q->exposed_inter_s, q->intra_bytes, q->inter_bytes, q->flops,
                   k->useful_flops, q->bubble, q->bound, q->critical_s, q->cores_s);
            char *cmd = command_line(o, c, k);
            printf(", \"command\": ");
            kl_fput_json_str(stdout, cmd);
            free(cmd);
        }
        if (k->why) {
            printf(", \"why\": ");
            kl_fput_json_str(stdout, k->why);
        }
        if (k->zero) {
            printf(", \"zero_memory\": ");
            kl_fput_json_str(stdout, k->zero);
        }
        printf("}");
    }
    printf("\n]}\n");
}

static void bytes_text(double b, char *buf, size_t n)
{
    if (b >= 1e9)
        snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6)
        snprintf(buf, n, "%.2f MB", b / 1e6);
    else
        snprintf(buf, n, "%.0f kB", b / 1e3);
}

static void print_table(const opts *o, const kl_cluster *c, cand *v, int n, int64_t tps)
{
    char *desc = kl_cluster_describe(c);
    double cap = o->memory > 0 ? (double)o->memory : c->dev.mem_bytes;
    printf("kiln plan %s: global batch %lld on %s\n", o->file, (long long)o->global, desc);
    free(desc);
    int fit = 0, mem = 0, refused = 0;
    for (int i = 0; i < n; i++)
        fit += v[i].fits, mem += v[i].compiled && !v[i].fits, refused += !v[i].compiled;
    char capt[32];
    bytes_text(cap, capt, sizeof capt);
    printf("%d layouts: %d fit in %s a rank, %d dropped for memory, %d refused (not built, or no plan)\n\n", n, fit,
           capt, mem, refused);
    printf("%3s  %-24s %13s %5s %4s %11s %12s %6s %10s %10s %10s %6s  %s\n", "#", "layout", "micro x acc", "prec",
           "rec", "step ms", tps ? "tokens/s" : "samples/s", "MFU", "mem/rank", "intra/step", "inter/step", "bubble",
           "bound");
    int shown = 0;
    for (int i = 0; i < n && shown < o->top; i++) {
        const cand *k = &v[i];
        if (!k->fits)
            continue;
        char lay[64], ma[32], memt[32], ib[32], xb[32];
        layout_text(k, lay, sizeof lay);
        snprintf(ma, sizeof ma, "%lld x %lld", (long long)k->L.micro, (long long)k->L.accumulate);
        bytes_text((double)k->mem, memt, sizeof memt);
        bytes_text(k->cost.intra_bytes, ib, sizeof ib);
        bytes_text(k->cost.inter_bytes, xb, sizeof xb);
        printf("%3d%s %-24s %13s %5s %4s %11.3f %12.4g %5.1f%% %10s %10s %10s %5.1f%%  %s\n", i + 1,
               k->built ? " " : "*", lay, ma, k->L.precision, k->L.recompute ? "auto" : "-", k->cost.step_s * 1e3,
               tps ? k->tokens_s : k->samples_s, 100 * k->mfu, memt, ib, xb, 100 * k->cost.bubble, k->cost.bound);
        shown++;
    }
    if (!fit) {
        printf("\nno layout fits in %s a rank\n", capt);
    } else {
        printf("\nbest layouts (predicted; --memory-limit enforces the same check at start-up):\n");
        int cmds = 0;
        for (int i = 0; i < n && cmds < 3; i++) {
            if (!v[i].fits || !v[i].built)
                continue;
            char *cmd = command_line(o, c, &v[i]);
            printf("  %d. %s\n", i + 1, cmd);
            free(cmd);
            cmds++;
        }
    }
    /* The dropped ones, by reason (the first of each). */
    bool head = false;
    for (int i = 0; i < n; i++) {
        if (v[i].fits && v[i].built)
            continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = (!v[j].fits || !v[j].built) && v[j].why && v[i].why && v[j].compiled == v[i].compiled &&
                   !strcmp(v[j].why, v[i].why);
        if (seen || !v[i].why)
            continue;
        if (!head)
            printf("\ndropped or marked (*):\n");
        head = true;
        char lay[64];
        layout_text(&v[i], lay, sizeof lay);
        printf("  %s, micro %lld x %lld, %s: %s\n", lay, (long long)v[i].L.micro, (long long)v[i].L.accumulate,
               v[i].L.precision, v[i].why);
    }
    printf("\nassumptions: %s\n", c->dev.gpu ? assumptions_gpu : assumptions_cpu);
}

static int parse_args(int argc, char **argv, opts *o, bool *help)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            *help = true;
            return 0;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--all")) {
            o->all = true;
        } else if (!strcmp(a, "--calibrate")) {
            o->calibrate = true;
        } else if (!strcmp(a, "--no-calibrate")) {
            o->no_calibrate = true;
        } else if (!strcmp(a, "--cluster") && has) {
            o->cluster = argv[++i];
        } else if ((!strcmp(a, "--nodes") || !strcmp(a, "--top")) && has) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 1 || v > 1 << 16) {
                kl_error("kiln plan: %s needs a count from 1 to %d, got '%s'", a, 1 << 16, argv[i]);
                return -1;
            }
            if (!strcmp(a, "--nodes"))
                o->nodes = (int)v;
            else
                o->top = (int)v;
        } else if (!strcmp(a, "--global-batch") && has) {
            char *end;
            long long v = strtoll(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 1) {
                kl_error("kiln plan: --global-batch needs a positive count, got '%s'", argv[i]);
                return -1;
            }
            o->global = v;
        } else if (!strcmp(a, "--memory") && has) {
            o->memory = kl_parse_bytes(argv[++i]);
            if (o->memory <= 0) {
                kl_error("kiln plan: --memory needs bytes (e.g. 80GB, 512MiB), got '%s'", argv[i]);
                return -1;
            }
        } else if (!strcmp(a, "--precision") && has) {
            o->prec = argv[++i];
        } else if (!strcmp(a, "--shard") && has) {
            o->shard = argv[++i];
        } else if (!strcmp(a, "--tensor-parallel") && has) {
            o->tp = argv[++i];
        } else if (!strcmp(a, "--pipeline") && has) {
            o->pp = argv[++i];
        } else if (!strcmp(a, "--micro") && has) {
            o->micro = argv[++i];
        } else if (!strcmp(a, "--set") && has) {
            const char *arg = argv[++i], *eq = strchr(arg, '=');
            if (!eq || eq == arg) {
                kl_error("kiln plan: --set needs KEY=VALUE, got '%s'", arg);
                return -1;
            }
            if (o->nowned == (int)KL_ARRAY_LEN(o->owned) || o->nkv + 2 >= (int)KL_ARRAY_LEN(o->kv)) {
                kl_error("kiln plan: too many --set flags");
                return -1;
            }
            char *key = kl_xstrndup(arg, (size_t)(eq - arg));
            o->owned[o->nowned++] = key;
            for (int k = 0; layout_keys[k]; k++)
                if (!strcmp(layout_keys[k], key)) {
                    kl_error("kiln plan: --set %s: kiln plan chooses %s for each layout (restrict it with --precision, "
                             "--shard, --tensor-parallel, --pipeline or --micro)",
                             key, key);
                    return -1;
                }
            if (kl_train_check_set(key, eq + 1))
                return -1;
            o->kv[o->nkv++] = key;
            o->kv[o->nkv++] = eq + 1;
        } else if (a[0] == '-' && a[1]) {
            kl_error("kiln plan: unknown option or missing value: %s (see kiln plan --help)", a);
            return -1;
        } else if (!o->file) {
            o->file = a;
        } else {
            kl_error("kiln plan: more than one model file");
            return -1;
        }
    }
    if (!o->file) {
        kl_error("kiln plan: no model file (see kiln plan --help)");
        return -1;
    }
    if (!o->cluster) {
        kl_error("kiln plan: no --cluster (h200x8, h100x8, a100x8, cpu, cpuxN or a cluster file)");
        return -1;
    }
    if (o->calibrate && o->no_calibrate) {
        kl_error("kiln plan: --calibrate and --no-calibrate together");
        return -1;
    }
    if (!o->global) {
        kl_error("kiln plan: no --global-batch (samples per optimizer step over all ranks)");
        return -1;
    }
    return 0;
}

int kl_plan_main(int argc, char **argv)
{
    opts o = {.top = 12};
    bool help = false;
    int rc = 1;
    cand *v = NULL;
    int n = 0, cap = 0;
    kl_compiled *base = NULL;
    kl_calib *calib = NULL;
    if (parse_args(argc, argv, &o, &help))
        goto done;
    if (help) {
        fputs(usage, stdout);
        rc = 0;
        goto done;
    }
    kl_cluster c;
    if (kl_cluster_load(o.cluster, o.nodes, &c))
        goto done;
    int world = c.per_node * c.nodes;
    o.elsewhere = !c.measured;
    /* The model as given: its settings, whether it has split matmuls. */
    kl_compile_opts bo = {.kv = o.nkv ? o.kv : NULL, .mode = KL_MODE_TRAIN, .stop_after = "lower"};
    const char *kv_end[72];
    kv_end[layout_settings(&o, NULL, kv_end)] = NULL;
    bo.kv = kv_end;
    if (!(base = kl_compile_file(o.file, &bo)))
        goto done;
    kl_train_config cfg;
    kl_train_read(&base->g->train, &cfg);
    bool overlap = cfg.overlap, split = graph_has_split(base->g);
    kl_train_config_free(&cfg);
    int64_t tps = tokens_per_sample(base->g);
    const char *precs[3], *shs[4];
    int nprec = o.prec ? parse_names("--precision", o.prec, precisions, precs, 3) : (c.dev.gpu ? 3 : 2);
    if (!o.prec)
        memcpy(precs, precisions, sizeof precs);
    int nsh = o.shard ? parse_names("--shard", o.shard, shards, shs, 4) : 4;
    if (!o.shard)
        memcpy(shs, shards, sizeof shs);
    int64_t tpv[64], ppv[64], micv[64];
    int ntp = 0, npp = 0, nmic = 0;
    if (nprec < 0 || nsh < 0)
        goto done;
    if (o.tp && (ntp = parse_ints("--tensor-parallel", o.tp, tpv, 64)) < 0)
        goto done;
    if (o.pp && (npp = parse_ints("--pipeline", o.pp, ppv, 64)) < 0)
        goto done;
    if (o.micro && (nmic = parse_ints("--micro", o.micro, micv, 64)) < 0)
        goto done;
    if (!o.tp) {
        for (int T = 1; T <= c.per_node && T <= world && ntp < 64; T++)
            if (world % T == 0 && c.per_node % T == 0 && (T == 1 || split))
                tpv[ntp++] = T;
    }
    if (!o.pp)
        for (int P = 1; P <= 8 && P <= world && npp < 64; P++)
            if (world % P == 0)
                ppv[npp++] = P;
    for (int i = 0; i < ntp; i++)
        if (world % tpv[i]) {
            kl_error("kiln plan: --tensor-parallel %lld does not divide the world of %d ranks", (long long)tpv[i], world);
            goto done;
        }
    /* On this CPU: the steps timed at each micro-batch the layouts have
     * (at most 12 of them), one rank (tools/plan_calib.c). */
    if (o.calibrate && !c.measured) {
        kl_error("kiln plan: --calibrate times the steps on this CPU: it needs --cluster cpu or cpuxN (or a cluster "
                 "file with device = cpu)");
        goto done;
    }
    if (c.measured && !o.no_calibrate) {
        /* Every micro-batch a layout will have (each GEMM's shape timed,
         * not interpolated), at most 12 of them (then log-spaced, with
         * the smallest and the largest). */
        int64_t all[64];
        int nall = 0;
        for (int ti = 0; ti < ntp; ti++)
            for (int pi = 0; pi < npp; pi++) {
                int T = (int)tpv[ti], P = (int)ppv[pi];
                if (world % (T * P) || o.global % (world / (T * P)))
                    continue;
                int64_t mics[64];
                int nm = micro_list(o.global / (world / (T * P)), micv, nmic, mics);
                for (int i = 0; i < nm; i++) {
                    int k = 0;
                    while (k < nall && all[k] != mics[i])
                        k++;
                    if (k == nall && nall < 64)
                        all[nall++] = mics[i];
                }
            }
        qsort(all, (size_t)nall, sizeof *all, cmp_i64);
        int64_t pts[12];
        int npts = 0;
        for (int i = 0; i < 12 && i < nall; i++) {
            int at = nall <= 12 ? i : (int)llround((double)i * (nall - 1) / 11.0);
            if (!npts || pts[npts - 1] != all[at])
                pts[npts++] = all[at];
        }
        if (!npts) /* no layout: the error below says why */
            pts[npts++] = 1;
        calib = kl_calib_measure(o.file, kv_end, precs, nprec, pts, npts);
        if (!calib)
            goto done;
    }
    for (int ti = 0; ti < ntp; ti++)
        for (int pi = 0; pi < npp; pi++) {
            int T = (int)tpv[ti], P = (int)ppv[pi];
            if (world % (T * P))
                continue;
            int D = world / (T * P);
            if (o.global % D)
                continue;
            int64_t per = o.global / D;
            int64_t mics[64];
            int nm = micro_list(per, micv, nmic, mics);
            for (int pr = 0; pr < nprec; pr++)
                for (int si = 0; si < nsh; si++) {
                    if (D == 1 && strcmp(shs[si], "dp"))
                        continue; /* one replica: nothing to shard */
                    static const char *const schedules[] = {"gpipe", "1f1b", "zero_bubble", "interleaved"};
                    for (int sc = 0; sc < (P > 1 ? 4 : 1); sc++)
                        for (int mi = 0; mi < nm; mi++) {
                            /* (interleaved: the micro-batches a multiple of P, as the
                             * training executable requires) */
                            if (sc == 3 && (per / mics[mi]) % P)
                                continue;
                            if (n == cap)
                                v = kl_xrealloc(v, sizeof *v * (size_t)(cap = cap ? 2 * cap : 64));
                            cand *k = &v[n++];
                            memset(k, 0, sizeof *k);
                            k->L = (kl_layout){.shard = shs[si], .T = T, .P = P, .D = D,
                                               .schedule = schedules[sc], .micro = mics[mi],
                                               .accumulate = per / mics[mi], .precision = precs[pr],
                                               .overlap = overlap};
                            evaluate(&o, &c, calib, tps, k);
                        }
                }
        }
    if (!n) {
        kl_error("kiln plan: no layout: the global batch %lld divides among no data-parallel size of the world of %d "
                 "ranks\n---> use a global batch that is a multiple of the world",
                 (long long)o.global, world);
        goto done;
    }
    qsort(v, (size_t)n, sizeof *v, by_step);
    if (o.json)
        print_json(&o, &c, v, n, tps);
    else
        print_table(&o, &c, v, n, tps);
    rc = fflush(stdout) ? 1 : 0;
    if (!v[0].fits || !v[0].built) {
        kl_error("kiln plan: no layout of %s fits and trains on %s with global batch %lld (%s)\n---> more memory a "
                 "rank (--memory), more ranks (--nodes), or another global batch",
                 o.file, c.name, (long long)o.global, v[0].why ? v[0].why : "see the table");
        rc = 1;
    }
done:
    for (int i = 0; i < n; i++)
        free(v[i].why), free(v[i].zero);
    free(v);
    kl_calib_free(calib);
    kl_compiled_free(base);
    for (int i = 0; i < o.nowned; i++)
        free(o.owned[i]);
    return rc;
}
