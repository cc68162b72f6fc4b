/* Training on many ranks (data parallel), what the training plan does
 * not: the loss and metric of the global batch, batch norm's running
 * statistics, and the start-up line.
 *
 * Each rank runs the whole training plan on its slice of every global
 * batch (train.c: the loader assembles batch x ranks samples, rank r feeds
 * rows [r x batch, (r+1) x batch)). The plan itself sums the ranks'
 * gradients: the shard pass (passes/shard.c) puts an all_reduce before the
 * update, which the executor runs through the session's communicator, and
 * the gradient multiplier divides by the ranks (train.c, write_hyper), so
 * every rank applies the global batch's mean gradient to the same params
 * and they stay equal without being sent. */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "passes/passes.h"

/* State written outside the update and not read by it (batch norm's
 * running statistics) is each rank's own, from its own samples. It is
 * averaged across ranks before each evaluation and checkpoint
 * (train_ranks_settle): its updates are linear (running = (1 - m) running
 * + m batch statistic), so averaging then equals averaging after every
 * step, with no collective per step. */
int train_ranks_prepare(trainer *t)
{
    const ir_graph *g = t->train->g;
    if (t->world == 1)
        return 0;
    bool *read_in_update = kl_xcalloc((size_t)g->values.n + 1, 1), *taken = kl_xcalloc((size_t)g->values.n + 1, 1);
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        for (int k = 0; !n->dead && n->phase == IR_PHASE_UPDATE && k < n->in.n; k++)
            read_in_update[n->in.v[k]] = true;
    }
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase == IR_PHASE_UPDATE)
            continue;
        for (int k = 0; k < n->in.n; k++) {
            int v = n->in.v[k];
            if (!ir_op_mutates(n->op, k) || taken[v] || read_in_update[v] || ir_val(g, v)->kind != IR_VAL_STATE ||
                !ir_dtype_is_float(ir_val(g, v)->type.dtype))
                continue;
            taken[v] = true;
            kl_vec_push(t->averaged, v);
        }
    }
    free(read_in_update);
    free(taken);
    return 0;
}

void train_ranks_sums(trainer *t, double *sums, int n)
{
    if (t->world > 1)
        kl_comm_all_reduce(t->comm, sums, n, IR_F64, KL_REDUCE_SUM, "the loss and metric sums");
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

/* "ranks: world 4 (mpirun (Open MPI)), shard dp" and the memory per rank
 * against ZeRO's formulas. */
void train_ranks_print_start(const trainer *t)
{
    printf("ranks: %s, shard %s\n", kl_comm_desc(t->comm), t->world > 1 ? "dp" : "none (one rank)");
    if (t->world > 1) {
        char *m = pass_rank_memory(t->train->g, t->world);
        printf("memory %s\n", m);
        free(m);
    }
}
