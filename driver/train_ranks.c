/* Training on many ranks (data parallel): which values the ranks
 * all-reduce between backward and update, the all-reduce itself, the
 * loss and metrics of the global batch, and the start-up line.
 *
 * Each rank runs the whole training plan on its slice of every global
 * batch (train.c: the loader assembles batch x ranks samples, rank r feeds
 * rows [r x batch, (r+1) x batch)). The last micro-batch of a step runs
 * forward and backward, the ranks sum what the update phase reads from
 * backward (the gradients, or their accumulators), and the update runs on
 * the sums; the gradient multiplier divides by the ranks (train.c,
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
    free(from_backward);
    free(taken);
    return 0;
}

/* Sums the synced values over the ranks, in place. */
static void sync_values(trainer *t)
{
    const ir_graph *g = t->train->g;
    for (int i = 0; i < t->synced.n; i++) {
        int v = t->synced.v[i];
        const ir_type *ty = &ir_val(g, v)->type;
        size_t bytes = (size_t)ir_type_bytes(ty);
        void *h = kl_xmalloc(bytes);
        kl_exec_read_between_phases(t->train, v, h, bytes);
        kl_comm_all_reduce(t->comm, h, ir_type_numel(ty), ty->dtype, KL_REDUCE_SUM, ir_val(g, v)->name);
        kl_exec_write_between_phases(t->train, v, h, bytes);
        free(h);
    }
}

void train_ranks_run(trainer *t, unsigned phases, const kl_kargs *args)
{
    unsigned update = 1u << IR_PHASE_UPDATE;
    if (t->world == 1 || !(phases & update)) {
        kl_exec_run(t->train, phases, args);
        return;
    }
    kl_exec_run(t->train, phases & ~update, args);
    sync_values(t);
    kl_exec_run(t->train, update, args);
}

double train_ranks_mean(trainer *t, double x, const char *what)
{
    if (t->world == 1)
        return x;
    kl_comm_all_reduce(t->comm, &x, 1, IR_F64, KL_REDUCE_SUM, what);
    return x / (double)t->world;
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
