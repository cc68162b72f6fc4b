/* Training on many ranks (data parallel): which values the ranks
 * all-reduce between backward and update, the all-reduce itself, the
 * loss and metrics of the global batch, and the start-up line.
 *
 * Each rank runs the whole training plan on its slice of every global
 * batch (train.c: the loader assembles batch x ranks samples, rank r feeds
 * rows [r x batch, (r+1) x batch)). The last micro-batch of a step runs
 * forward and backward, the ranks sum what the update phase reads from
 * backward (the gradients, or their accumulators) with the step's loss
 * and metric sums, in one all-reduce, and the update runs on the sums; the gradient multiplier divides by the ranks (train.c,
 * write_hyper), so every rank applies the global batch's mean gradient to
 * the same params and they stay equal without being sent. The gradient
 * norm (clip), the fp16 overflow check and the loss scale are computed in
 * the update phase from the sums, so every rank clips by the global norm
 * and skips the same steps. */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "plan/memplan.h"

/* The values of the update phase that backward wrote: outputs of forward
 * or backward nodes, and persistent values they write in place (gradient
 * accumulators). Each is all-reduced once per optimizer step. */
int train_ranks_prepare(trainer *t)
{
    const ir_graph *g = t->train->g;
    const kl_plan *p = t->train->plan;
    if (t->world == 1)
        return 0;
    /* The split run needs every update step after every other step. */
    int last_other = -1, first_update = p->steps.n;
    for (int i = 0; i < p->steps.n; i++) {
        if (p->steps.v[i].phase == IR_PHASE_UPDATE) {
            if (i < first_update)
                first_update = i;
        } else
            last_other = i;
    }
    kl_check(last_other < first_update);
    bool *from_backward = kl_xcalloc((size_t)g->values.n + 1, 1), *taken = kl_xcalloc((size_t)g->values.n + 1, 1);
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase == IR_PHASE_UPDATE)
            continue;
        for (int k = 0; k < n->out.n; k++)
            from_backward[n->out.v[k]] = true;
        for (int k = 0; k < n->in.n; k++)
            if (ir_op_mutates(n->op, k))
                from_backward[n->in.v[k]] = true;
    }
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase != IR_PHASE_UPDATE)
            continue;
        for (int k = 0; k < n->in.n; k++) {
            int v = n->in.v[k];
            if (!from_backward[v] || taken[v])
                continue;
            ir_dtype dt = ir_val(g, v)->type.dtype;
            if (!ir_dtype_is_float(dt)) {
                kl_error("%s: the update reads %s (%s) from backward, which cannot be summed across ranks", t->model,
                         ir_val(g, v)->name, ir_dtype_name(dt));
                free(from_backward);
                free(taken);
                return -1;
            }
            taken[v] = true;
            kl_vec_push(t->synced, v);
        }
    }
    /* State written outside the update and not read by it (batch norm's
     * running statistics): each rank's own, from its own samples. They
     * are averaged across ranks before each evaluation and checkpoint
     * (train_ranks_settle): their updates are linear (running = (1 - m)
     * running + m batch statistic), so averaging then equals averaging
     * after every step, with no collective per step. */
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase == IR_PHASE_UPDATE)
            continue;
        for (int k = 0; k < n->in.n; k++) {
            int v = n->in.v[k];
            if (!ir_op_mutates(n->op, k) || taken[v] || ir_val(g, v)->kind != IR_VAL_STATE ||
                !ir_dtype_is_float(ir_val(g, v)->type.dtype))
                continue;
            taken[v] = true;
            kl_vec_push(t->averaged, v);
        }
    }
    free(from_backward);
    free(taken);
    return 0;
}

/* The step's one all-reduce: every synced value (as f32: 16-bit
 * gradients are summed in f32 and rounded once) and the step's extras,
 * in one bucket, so that a step waits for the other ranks once. */
static void sum_gradients(trainer *t, double *extra, int nextra)
{
    const ir_graph *g = t->train->g;
    int64_t total = nextra;
    for (int i = 0; i < t->synced.n; i++)
        total += ir_type_numel(&ir_val(g, t->synced.v[i])->type);
    float *bucket = kl_xmalloc((size_t)total * sizeof *bucket), *at = bucket;
    for (int i = 0; i < t->synced.n; i++) {
        const ir_type *ty = &ir_val(g, t->synced.v[i])->type;
        int64_t n = ir_type_numel(ty);
        if (ty->dtype == IR_F32)
            kl_exec_read_between_phases(t->train, t->synced.v[i], at, (size_t)n * 4);
        else {
            void *h = kl_xmalloc((size_t)ir_type_bytes(ty));
            kl_exec_read_between_phases(t->train, t->synced.v[i], h, (size_t)ir_type_bytes(ty));
            for (int64_t k = 0; k < n; k++)
                at[k] = (float)kl_load_as(ty->dtype, h, k);
            free(h);
        }
        at += n;
    }
    for (int i = 0; i < nextra; i++)
        at[i] = (float)extra[i];
    kl_comm_all_reduce(t->comm, bucket, total, IR_F32, KL_REDUCE_SUM, "the gradients");
    at = bucket;
    for (int i = 0; i < t->synced.n; i++) {
        const ir_type *ty = &ir_val(g, t->synced.v[i])->type;
        int64_t n = ir_type_numel(ty);
        if (ty->dtype == IR_F32)
            kl_exec_write_between_phases(t->train, t->synced.v[i], at, (size_t)n * 4);
        else {
            void *h = kl_xmalloc((size_t)ir_type_bytes(ty));
            for (int64_t k = 0; k < n; k++)
                kl_store_as(ty->dtype, h, k, at[k]);
            kl_exec_write_between_phases(t->train, t->synced.v[i], h, (size_t)ir_type_bytes(ty));
            free(h);
        }
        at += n;
    }
    for (int i = 0; i < nextra; i++)
        extra[i] = at[i];
    free(bucket);
}

void train_ranks_step(trainer *t, unsigned phases, const kl_kargs *args, double *sums, int nsums)
{
    unsigned update = 1u << IR_PHASE_UPDATE;
    kl_check(phases & update);
    const ir_graph *g = t->train->g;
    if (t->world == 1) {
        kl_exec_run(t->train, phases, args);
        sums[0] += kl_exec_scalar(t->train, g->loss);
        if (nsums > 1)
            sums[1] += kl_exec_scalar(t->train, g->reports.v[0].value);
        return;
    }
    kl_exec_run(t->train, phases & ~update, args);
    /* The loss and report were computed in forward: the update does
     * not change them. */
    sums[0] += kl_exec_scalar(t->train, g->loss);
    if (nsums > 1)
        sums[1] += kl_exec_scalar(t->train, g->reports.v[0].value);
    sum_gradients(t, sums, nsums);
    kl_exec_run(t->train, update, args);
}

void train_ranks_settle(trainer *t)
{
    const ir_graph *g = t->train->g;
    if (t->world == 1)
        return;
    for (int i = 0; i < t->averaged.n; i++) {
        int v = t->averaged.v[i];
        const ir_type *ty = &ir_val(g, v)->type;
        size_t bytes = (size_t)ir_type_bytes(ty);
        void *h = kl_xmalloc(bytes);
        kl_exec_read(t->train, v, h, bytes);
        kl_comm_all_reduce(t->comm, h, ir_type_numel(ty), ty->dtype, KL_REDUCE_SUM, ir_val(g, v)->name);
        for (int64_t k = 0; k < ir_type_numel(ty); k++)
            kl_store_as(ty->dtype, h, k, kl_load_as(ty->dtype, h, k) / (double)t->world);
        kl_exec_write(t->train, v, h, bytes);
        free(h);
    }
}

/* "ranks: world 4 (mpirun (Open MPI)), shard dp; per rank: params 0.94 MB,
 * gradients 0.94 MB, optimizer state 1.88 MB". */
void train_ranks_print_start(const trainer *t)
{
    const ir_graph *g = t->train->g;
    int64_t params = 0, state = 0, grads = 0;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind == IR_VAL_PARAM)
            params += ir_type_bytes(&v->type);
        else if (v->kind == IR_VAL_STATE)
            state += ir_type_bytes(&v->type);
    }
    for (int i = 0; i < g->grads.n; i++)
        grads += ir_type_bytes(&ir_val(g, g->grads.v[i].grad)->type);
    printf("ranks: %s, shard %s; per rank (replicated): params %.2f MB, gradients %.2f MB, optimizer and other state %.2f MB\n",
           kl_comm_desc(t->comm), t->world > 1 ? "dp" : "none (one rank)", (double)params / 1e6, (double)grads / 1e6,
           (double)state / 1e6);
}
