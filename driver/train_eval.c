/* Evaluation during training: the loss and metrics over the test set, in
 * batches of the evaluation plan (and the tail plan for a remainder), and
 * the choice of the evaluation batch. */
#include <string.h>

#include "trainer.h"
#include "runtime/observe/nvtx.h"

static void evaluate_plans(trainer *t, eval_result *r)
{
    memset(r, 0, sizeof *r);
    const kl_dataset *d = &t->test_set;
    int64_t eb = ir_val(t->eval->g, t->eb.value[0])->type.dim[0];
    int64_t full = d->count / eb;
    kl_loader_opts o = {.batch = eb, .depth = d->shards ? t->cfg.data_prefetch : 4,
                        .workers = d->shards ? t->cfg.data_workers : 1};
    kl_loader *l = kl_loader_new_opts(d, &o);
    kl_loader_start(l, 0);
    const kl_batch *b;
    kl_kargs args = {0, (uint64_t)t->cfg.seed};
    /* On many ranks each evaluates every parts-th batch (the
     * data-parallel ranks and, with pipeline stages, which hold every
     * param after the settle, the stages too; a tensor-parallel group's
     * ranks the same ones); the sums are all-reduced below. */
    int parts = t->world * (t->pp > 1 ? t->pp : 1), me = (t->pp > 1 ? t->stage : 0) * t->world + t->rank;
    while ((b = kl_loader_next(l))) {
        if (b->index % parts != me) {
            kl_loader_release(l, b);
            continue;
        }
        bool tail = b->index >= full;
        kl_exec *e = tail && t->eval_tail ? t->eval_tail : t->eval;
        bindings *bb = tail && t->eval_tail ? &t->etb : &t->eb;
        train_feed(e, bb, b);
        kl_exec_run(e, KL_ALL_PHASES, &args);
        if (t->on_eval_batch)
            t->on_eval_batch(t, e, b);
        r->loss += kl_exec_scalar(e, e->g->loss) * (double)b->size;
        for (int i = 0; i < e->g->reports.n && i < IR_MAX_REPORTS; i++)
            r->metric[i] += kl_exec_scalar(e, e->g->reports.v[i].value) * (double)b->size;
        r->samples += b->size;
        kl_loader_release(l, b);
    }
    if (kl_loader_failed(l))
        r->error = kl_xstrdup(kl_loader_failed(l));
    const char *first;
    r->skipped = kl_loader_skipped(l, &first);
    if (first)
        snprintf(r->first_skip, sizeof r->first_skip, "%s", first);
    kl_loader_free(l);
    if (parts > 1) {
        double sums[10] = {r->loss, (double)r->samples};
        memcpy(sums + 2, r->metric, sizeof r->metric);
        if (t->world > 1)
            kl_comm_all_reduce(t->comm, sums, 10, IR_F64, KL_REDUCE_SUM, "the evaluation's sums");
        if (t->pp > 1)
            kl_comm_all_reduce(kl_comm_pp(t->comm), sums, 10, IR_F64, KL_REDUCE_SUM, "the stages' evaluation sums");
        r->loss = sums[0];
        r->samples = (int64_t)sums[1];
        memcpy(r->metric, sums + 2, sizeof r->metric);
    }
    if (r->samples) {
        r->loss /= (double)r->samples;
        for (int i = 0; i < IR_MAX_REPORTS; i++)
            r->metric[i] /= (double)r->samples;
    }
}

void train_eval_metrics(const trainer *t, const eval_result *r, kl_buf *line, kl_buf *json)
{
    const ir_graph *g = t->eval ? t->eval->g : NULL;
    int shown = 0;
    for (int i = 0; g && i < g->reports.n && i < IR_MAX_REPORTS; i++) {
        const char *name = g->reports.v[i].name;
        if (name[0] == '_')
            continue;
        kl_buf_printf(line, "  %s %.4f", name, r->metric[i]);
        kl_buf_printf(json, ", \"%s\": %.6g", name, r->metric[i]);
        shown++;
    }
    if (!shown)
        kl_buf_printf(json, ", \"metric\": %.6g", r->metric[0]);
    kl_buf_puts(line, ""); /* both strings, if empty, for %s */
    kl_buf_puts(json, "");
}

double train_evaluate(trainer *t, eval_result *r)
{
    double t0 = kl_now();
    train_ranks_settle(t);
    kl_nvtx_push("evaluation");
    evaluate_plans(t, r);
    kl_nvtx_pop();
    double t1 = kl_now();
    kl_trace_event(t->trace, "evaluation", "eval", KL_TRACE_STEPS, t0, t1);
    return t1 - t0;
}

/* The evaluation batch: the largest divisor of the test set up to
 * max(batch, 500), so evaluation needs one plan; a remainder plan when
 * no divisor is reasonably large. */
int64_t kl_eval_batch(int64_t count, int64_t batch)
{
    int64_t cap = batch > 500 ? batch : 500;
    if (cap > count)
        cap = count;
    for (int64_t d = cap; d >= 1; d--)
        if (count % d == 0 && d >= batch / 2)
            return d;
    return batch < count ? batch : count;
}
