/* A training run's start-up, between the flags and the first step: the
 * backend (the GPU or the CPU), --batch auto's choice, the training and
 * evaluation plans with their memory check, and the start-up lines. */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "batch_probe.h"
#include "budget.h"
#include "runtime/exec/backend_cuda.h"
#include "runtime/observe/doctor.h"
#include "plan/memplan.h"
#include "compile.h"
#include "ir/train_config.h"
#include "passes/passes.h"

/* Lowers the model again with extra overrides (a different batch). */
ir_graph *train_load_with(const kl_source *src, const train_options *o, const char *key, const char *val)
{
    const char *kv[132];
    int n = 0;
    for (int i = 0; i < o->nkv; i++)
        kv[n++] = o->kv[i];
    if (key) {
        kv[n++] = key;
        kv[n++] = val;
    }
    kv[n] = NULL;
    return kl_compile_load(src, n ? kv : NULL);
}

/* The GPU when one is usable (or asked for), else the CPU with a notice;
 * NULL when --device cuda finds no GPU (reported). Under a launcher each
 * rank takes the GPU of its index among the ranks on its machine. */
kl_backend *train_open_backend(const train_options *o, const kl_cpu_options *co, const kl_comm *comm)
{
    bool cpu = o->device && !strcmp(o->device, "cpu"), cuda = o->device && !strcmp(o->device, "cuda");
    if (!cpu) {
        char why[600];
        kl_cuda_options cuo = {.tf32 = o->tf32, .quiet = o->quiet, .device = kl_comm_local_rank(comm)};
        kl_backend *be = kl_cuda_backend_new(&cuo, why, sizeof why);
        if (be && (o->bf16_gemm || o->fp32_gemm)) {
            kl_error("%s chooses the CPU backend's %s GEMMs; this run is on the GPU\n---> add --device cpu",
                     o->bf16_gemm ? "--bf16-gemm" : "--fp32-gemm", o->bf16_gemm ? "bf16" : "fp32");
            be->ops->destroy(be);
            return NULL;
        }
        if (be)
            return be;
        if (cuda && kl_comm_local_size(comm) > 1) {
            kl_error("--device cuda: rank %d of %d (local rank %d of %d on this machine): %s\n"
                     "---> start at most one rank per GPU",
                     kl_comm_rank(comm), kl_comm_world(comm), kl_comm_local_rank(comm), kl_comm_local_size(comm), why);
            return NULL;
        }
        if (cuda) {
            kl_error("--device cuda: %s", why);
            return NULL;
        }
        if (!o->quiet)
            kl_fprintf_escaped(stderr, "kiln: no usable GPU (%s); training on the CPU\n", why);
    }
    return kl_cpu_backend_new(co);
}

kl_backend *train_agree_backend(kl_backend *be, kl_comm *comm)
{
    int world = kl_comm_world(comm);
    if (world < 2 || !be)
        return be;
    int64_t gpus = kl_comm_sum_startup(comm, kl_backend_is_cuda(be), "the ranks' devices");
    if (gpus == 0 || gpus == world)
        return be;
    kl_error("rank %d of %d: %lld of the %d ranks found a GPU; all ranks must train on the same kind of device\n"
             "---> add --device cpu, or start at most one rank per GPU on each machine",
             kl_comm_rank(comm), world, (long long)gpus, world);
    be->ops->destroy(be);
    return NULL;
}

/* --batch auto (driver/budget.h): the micro-batch from the memory plan
 * and the accumulation that keeps the effective batch, then the graph
 * loaded again with both. The limit: --memory-limit (or the train key),
 * else the GPU's free memory. Says what it chose and why. */
int train_choose_batch(trainer *t, const kl_source *src, const kl_backend *be, ir_graph **g)
{
    int64_t limit = t->cfg.memory_limit;
    const char *from = "--memory-limit";
    if (limit <= 0 && be->ops->free_bytes) {
        limit = be->ops->free_bytes((kl_backend *)be);
        from = "the GPU's free memory";
    }
    if (limit <= 0) {
        kl_error("--batch auto needs a memory budget on the CPU\n---> add --memory-limit B (e.g. 2GiB)");
        return -1;
    }
    int64_t effective = kl_size_mul(t->cfg.batch, t->cfg.accumulate);
    kl_replan rp = {src, t->opt.kv, t->pp, 0};
    kl_auto_batch_result r;
    if (kl_auto_batch(&rp, effective, limit, &r))
        return -1;
    kl_probe_result pr = {.n = 1, .batch = {r.batch}, .accumulate = {r.accumulate}};
    if (t->opt.batch_probe && kl_probe_batch(&rp, (kl_backend *)be, effective, r.batch, (uint64_t)t->cfg.seed, &pr))
        return -1;
    char bs[32], as[32];
    snprintf(bs, sizeof bs, "%lld", (long long)pr.batch[pr.chosen]);
    snprintf(as, sizeof as, "%lld", (long long)pr.accumulate[pr.chosen]);
    if (train_add_setting(&t->opt, "batch", bs) || train_add_setting(&t->opt, "accumulate", as))
        return -1;
    if (!t->opt.quiet) {
        printf("batch auto: micro-batch %lld x accumulate %lld = effective batch %lld", (long long)r.batch,
               (long long)r.accumulate, (long long)(r.batch * r.accumulate));
        if (r.batch * r.accumulate != effective)
            printf(" (asked: %lld, not a multiple of %lld)", (long long)effective, (long long)r.batch);
        printf("; its training plan needs %.2f MB of %.2f MB (%s)", (double)r.bytes / 1e6, (double)limit / 1e6, from);
        if (r.next_batch)
            printf(", micro-batch %lld would need %.2f MB", (long long)r.next_batch, (double)r.next_bytes / 1e6);
        else
            printf(", the whole effective batch in one micro-batch");
        printf(" (%d plans, nothing run)\n", r.plans);
        if (t->opt.batch_probe)
            kl_probe_print(&pr, stdout);
    }
    ir_graph_free(*g);
    *g = train_load_with(src, &t->opt, NULL, NULL);
    if (!*g)
        return -1;
    kl_train_config_free(&t->cfg); /* read again below (its strings leaked) */
    kl_train_read(&(*g)->train, &t->cfg);
    return 0;
}

/* The pipeline and the exec of g; a training plan is checked against the
 * memory limit before it allocates anything; an evaluation plan runs in
 * the training plan's arena (host) when it fits there. */
static kl_exec *make_exec(trainer *t, const kl_source *src, ir_graph *g, kl_mode mode, kl_exec *host)
{
    /* The training plan sums the ranks' gradients (the shard pass). */
    kl_compile_opts co = {.mode = mode, .ranks = t->world * t->tp * t->pp};
    kl_replan rp = {src, t->opt.kv, t->pp, 0};
    kl_compiled *c = kl_compile_graph(g, &co);
    /* With pipeline stages the rank's own arena is checked once placed
     * (train_make_plans). */
    if (!c || (mode == KL_MODE_TRAIN && t->pp <= 1 && kl_check_budget(&rp, &t->cfg, c->plan, t->cfg.memory_limit))) {
        kl_compiled_free(c);
        return NULL;
    }
    return kl_compiled_exec(t->s, c, host);
}

/* The training plan (g, which it takes), with pipeline stages its arena
 * placed for this rank's stages, then the evaluation plans: the largest
 * evaluation batch that fits in the training plan's arena, and one for
 * the test set's remainder. */
int train_make_plans(trainer *t, const kl_source *src, ir_graph *g, int64_t *eb_out)
{
    const char *model_name = t->model;
    t->train = make_exec(t, src, g, KL_MODE_TRAIN, NULL);
    if (!t->train || train_bind_inputs(t->train->g, &t->train_set, &t->tb, model_name))
        return -1;
    for (int i = 0; i < t->train->g->reports.n; i++)
        if (!strcmp(t->train->g->reports.v[i].name, "_grads_finite"))
            t->finite_value = t->train->g->reports.v[i].value;
    kl_replan rp = {src, t->opt.kv, t->pp, 0};
    if (train_pipeline_prepare(t))
        return -1;
    rp.held = train_pipeline_held_bytes(t);
    if (t->pp > 1 && kl_check_budget(&rp, &t->cfg, t->train->plan, t->cfg.memory_limit))
        return -1;
    rp.held = 0;
    /* No test split: no evaluation. */
    *eb_out = 0;
    if (t->test_set.count == 0)
        return train_prepare_data(t);
    /* Evaluation shares the training plan's arena: its batch is the
     * largest that fits there. */
    int64_t eb = kl_eval_batch_within(&rp, t->test_set.count, t->cfg.batch, kl_eval_batch(t->test_set.count, t->cfg.batch),
                                      t->train->plan->arena_bytes);
    if (t->pp > 1) {
        /* The stages split the test batches between them (train_eval.c):
         * one evaluation batch on every stage, the smallest of theirs,
         * which fits in every stage's arena. */
        double neg = -(double)eb;
        kl_comm_all_reduce(kl_comm_pp(t->comm), &neg, 1, IR_F64, KL_REDUCE_MAX, "the stages' evaluation batch");
        eb = (int64_t)-neg;
    }
    *eb_out = eb;
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)eb);
    t->eval = make_exec(t, src, train_load_with(src, &t->opt, "batch", num), KL_MODE_EVAL, t->train);
    if (!t->eval || train_bind_inputs(t->eval->g, &t->test_set, &t->eb, model_name))
        return -1;
    if (t->test_set.count % eb) {
        snprintf(num, sizeof num, "%lld", (long long)(t->test_set.count % eb));
        t->eval_tail = make_exec(t, src, train_load_with(src, &t->opt, "batch", num), KL_MODE_EVAL, t->train);
        if (!t->eval_tail || train_bind_inputs(t->eval_tail->g, &t->test_set, &t->etb, model_name))
            return -1;
    }
    if (kl_dataset_check_labels(&t->train_set, t->tb.ce_classes) ||
        kl_dataset_check_labels(&t->test_set, t->tb.ce_classes))
        return -1;
    return train_prepare_data(t);
}

/* The memory plan: one arena for training and evaluation (which has one
 * of its own only when it does not fit there), with the params and state,
 * against --memory-limit. */
int train_check_peak(trainer *t, int64_t *peak_out)
{
    int64_t peak = kl_persistent_bytes(t->train->g) + t->train->plan->arena_bytes + train_pipeline_held_bytes(t);
    if (t->eval && !t->eval->arena_shared)
        peak += t->eval->plan->arena_bytes;
    if (t->eval_tail && !t->eval_tail->arena_shared)
        peak += t->eval_tail->plan->arena_bytes;
    *peak_out = peak;
    if (t->cfg.memory_limit > 0 && peak > t->cfg.memory_limit) {
        char lim[40];
        kl_error("%s: training and evaluation need %.2f MB, over the memory limit of %s (the evaluation plan does "
                 "not fit in the training arena)\n---> try a smaller --batch", t->model, (double)peak / 1e6,
                 kl_limit_text(lim, sizeof lim, t->cfg.memory_limit));
        return -1;
    }
    return 0;
}

/* The start-up lines: the machine, the model, the batch and learning
 * rate, memory. */
void train_print_start(const trainer *t, const kl_backend *be, int64_t eb, int64_t peak)
{
    const kl_train_config *c = &t->cfg;
    /* What it runs on, in one line (the same facts as kiln doctor). */
    kl_doctor_facts *f = kl_xcalloc(1, sizeof *f);
    kl_doctor_probe(f, false, !(t->opt.device && !strcmp(t->opt.device, "cpu")));
    char *machine = kl_doctor_oneline(f);
    printf("%s\n", machine);
    free(machine);
    free(f);
    int64_t params = pass_param_count(t->train->g);
    const char *gemm = kl_cpu_gemm_choice(be);
    printf("%s: %lld params, %s, %s%s%s, %lld train / %lld test samples\n", t->train->g->name, (long long)params,
           kl_precision_name(c->precision), be->desc, gemm ? ", " : "", gemm ? gemm : "", (long long)t->train_set.count,
           (long long)t->test_set.count);
    int64_t eff = c->batch * c->accumulate * t->world, base = kl_train_base_batch(c);
    printf("effective batch %lld (batch %lld x accumulate %lld", (long long)eff, (long long)c->batch,
           (long long)c->accumulate);
    if (t->world > 1)
        printf(" x ranks %d", t->world);
    printf("); lr %.4g", t->scaled_lr);
    if (c->lr_scaling != KL_LRS_NONE)
        printf(" (%s scaling of %.4g from base batch %lld)", c->lr_scaling == KL_LRS_LINEAR ? "linear" : "sqrt",
               c->opt.lr, (long long)base);
    if (c->sched.warmup > 0)
        printf(", warmup %lld steps", (long long)c->sched.warmup);
    printf("\n");
    char *mem = pass_memory_summary(t->train->g);
    printf("memory: %s\n", mem);
    free(mem);
    char *plan = plan_summary(t->train->plan);
    const char *with = t->pipe ? "with params, state and the saved activations in flight" : "with params and state";
    if (t->eval)
        printf("memory plan: %s; evaluation batch %lld %s; peak %.2f MB %s", plan, (long long)eb,
               t->eval->arena_shared ? "in the same arena" : "in an arena of its own", (double)peak / 1e6, with);
    else
        printf("memory plan: %s; no evaluation (no test split); peak %.2f MB %s", plan, (double)peak / 1e6, with);
    if (c->memory_limit > 0)
        printf(" (limit %.2f MB)", (double)c->memory_limit / 1e6);
    printf("\n");
    free(plan);
    train_ranks_print_start(t);
    train_overlap_print_start(t);
}
