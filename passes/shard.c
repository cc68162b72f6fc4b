/* shard: data parallel across the ranks of a run (training).
 *
 * requires: accumulate (the update phase reads each step's final
 *           gradients, or their accumulators)
 * provides: with pass_ctx.ranks = N > 1, every value the update phase
 *           reads from forward or backward (the gradients, or the
 *           accumulators that backward writes) summed across the ranks
 *           by all_reduce (sum, ranks = N, update phase), in buckets of
 *           one dtype up to the train setting bucket (25 MiB; 0: one
 *           all_reduce per value): flattened, concatenated, summed once,
 *           sliced back; the update's readers read the sums. The
 *           gradient multiplier in optimizer.hyper divides by N (the
 *           runtime: driver/train.c), so every rank applies the global
 *           batch's mean gradient to the same params; the gradient norm
 *           (clip) and the fp16 overflow check, computed in the update
 *           phase, see the sums, so every rank clips by the global norm and
 *           skips the same steps. With one rank nothing changes. With
 *           pipeline stages a bucket holds one stage's values and its
 *           nodes carry that _stage.
 *
 * The train block's shard = none and shard = dp both mean this; shard =
 * zero1, zero2 and zero3 are passes/shard_zero.c (zero3's gathers:
 * passes/shard_zero3.c; with tensor_parallel > 1 it is refused). The
 * memory per rank: passes/rank_memory.c. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "ir/train_config.h"

/* Every update-phase reader of v but skip reads s instead. */
static void read_in_update(ir_graph *g, int v, int s, const ir_node *skip)
{
    const ir_value *xv = ir_val(g, v);
    for (int u = xv->uses.n - 1; u >= 0; u--) {
        ir_use use = xv->uses.v[u];
        ir_node *r = ir_nd(g, use.node);
        if (r != skip && r->phase == IR_PHASE_UPDATE)
            ir_set_operand(g, r, use.operand, s);
    }
}

static int emit_update(ir_graph *g, ir_op op, const int *in, int nin, const ir_attrs *a, const char *base, kl_loc loc)
{
    char *name = base ? ir_unique_name(g, base) : NULL;
    int v = ir_emit(g, op, in, nin, a, name);
    free(name);
    ir_node *n = ir_nd(g, g->nodes.n - 1);
    n->phase = IR_PHASE_UPDATE;
    n->loc = loc;
    return v;
}

static int all_reduce(ir_graph *g, int v, int ranks, const char *base)
{
    ir_attrs a = {0};
    ir_attrs_set_str(&a, "reduce", "sum");
    ir_attrs_set_int(&a, "ranks", ranks);
    int s = emit_update(g, IR_OP_ALL_REDUCE, &v, 1, &a, base, ir_val(g, v)->loc);
    ir_attrs_free(&a);
    return s;
}

/* One bucket of values of one dtype: flattened, concatenated, summed in
 * one all_reduce, sliced back (the slices' reshapes are views); a bucket
 * of one value is summed as it is. */
static void reduce_bucket(ir_graph *g, const int *vals, int n, int ranks, int *bucket_no)
{
    if (n == 1) {
        char *base = kl_xasprintf("%s.sum", ir_val(g, vals[0])->name);
        int s = all_reduce(g, vals[0], ranks, base);
        free(base);
        read_in_update(g, vals[0], s, ir_nd(g, g->nodes.n - 1));
        return;
    }
    int *flat = kl_xmalloc(sizeof(int) * (size_t)n);
    int64_t *numels = kl_xmalloc(sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        numels[i] = ir_type_numel(&ir_val(g, vals[i])->type);
        ir_attrs a = {0};
        ir_attrs_set_ints(&a, "shape", &numels[i], 1);
        flat[i] = emit_update(g, IR_OP_RESHAPE, &vals[i], 1, &a, NULL, ir_val(g, vals[i])->loc);
        ir_attrs_free(&a);
    }
    char *base = kl_xasprintf("bucket.%d", (*bucket_no)++);
    /* ir_emit infers at most 8 operands: the concat's type is made here. */
    ir_type ct = {ir_val(g, vals[0])->type.dtype, 1, {0}};
    for (int i = 0; i < n; i++)
        ct.dim[0] += numels[i];
    ir_attrs ca = {0};
    ir_attrs_set_int(&ca, "axis", 0);
    char *cname = ir_unique_name(g, base);
    const char *cnames[1] = {cname};
    ir_node *cn = ir_add_node(g, IR_OP_CONCAT, flat, n, &ca, &ct, cnames, (kl_loc){0, 0});
    free(cname);
    ir_attrs_free(&ca);
    cn->phase = IR_PHASE_UPDATE;
    int cat = cn->out.v[0];
    char *sbase = kl_xasprintf("%s.sum", base);
    int sum = all_reduce(g, cat, ranks, sbase);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const ir_value *x = ir_val(g, vals[i]);
        ir_attrs a = {0};
        ir_attrs_set_int(&a, "axis", 0);
        ir_attrs_set_int(&a, "start", off);
        ir_attrs_set_int(&a, "end", off + numels[i]);
        int piece = emit_update(g, IR_OP_SLICE, &sum, 1, &a, NULL, x->loc);
        ir_attrs_free(&a);
        off += numels[i];
        ir_attrs r = {0};
        ir_attrs_set_ints(&r, "shape", x->type.dim, x->type.rank);
        char *nb = kl_xasprintf("%s.sum", x->name);
        int back = emit_update(g, IR_OP_RESHAPE, &piece, 1, &r, nb, x->loc);
        free(nb);
        ir_attrs_free(&r);
        /* The flattening reshape reads v in the update phase too. */
        const ir_node *skip = ir_nd(g, ir_val(g, flat[i])->def);
        read_in_update(g, vals[i], back, skip);
    }
    free(base);
    free(sbase);
    free(flat);
    free(numels);
}

int pass_shard(ir_graph *g, const pass_ctx *cx)
{
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    int64_t bucket_bytes = cfg.bucket;
    kl_shard mode = cfg.shard;
    /* With tensor parallelism (passes/shard_tp.c) the data-parallel world
     * is ranks / T groups; the executor runs these all_reduces over the
     * ranks of equal tensor-parallel index (driver/train_tp.c). With
     * pipeline stages (passes/pipeline_stages.c) it is ranks / (T x P). */
    int tp = cfg.tensor_parallel, pp = cfg.pipeline_parallel > 1 ? cfg.pipeline_parallel : 1;
    int ranks = (tp > 1 ? cx->ranks / tp : cx->ranks) / pp;
    kl_train_config_free(&cfg);
    if (ranks <= 1)
        return 0;
    if (mode == KL_SHARD_ZERO3 && tp > 1) {
        /* Its slices would cut tensor-parallel slices again. */
        pass_error(g, (kl_loc){0, 0}, "shard = zero3 with tensor_parallel = %d is not built\n---> use shard = zero2 with "
                   "tensor parallelism, or zero3 without it", tp);
        return -1;
    }
    if (mode == KL_SHARD_ZERO1 || mode == KL_SHARD_ZERO2 || mode == KL_SHARD_ZERO3)
        return pass_shard_zero(g, ranks, bucket_bytes, mode == KL_SHARD_ZERO1 ? 1 : mode == KL_SHARD_ZERO2 ? 2 : 3);
    /* What the update reads from forward or backward, in the order it is
     * ready (its last writer there; ties: its first reader in the update),
     * so that a bucket fills as backward goes and its all_reduce can start
     * while backward computes the next (the schedule places it there). */
    int nv = g->values.n;
    bool *from_backward = kl_xcalloc((size_t)nv + 1, 1), *done = kl_xcalloc((size_t)nv + 1, 1);
    int *ready_at = kl_xcalloc((size_t)nv + 1, sizeof(int));
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase == IR_PHASE_UPDATE)
            continue;
        for (int k = 0; k < n->out.n; k++) {
            from_backward[n->out.v[k]] = true;
            ready_at[n->out.v[k]] = i;
        }
        for (int k = 0; k < n->in.n; k++)
            if (ir_op_mutates(n->op, k)) {
                from_backward[n->in.v[k]] = true;
                ready_at[n->in.v[k]] = i;
            }
    }
    KL_VEC(int) vals = {0};
    int rc = 0;
    for (int i = 0; i < g->nodes.n && !rc; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase != IR_PHASE_UPDATE)
            continue;
        for (int k = 0; k < n->in.n; k++) {
            int v = n->in.v[k];
            if (v >= nv || !from_backward[v] || done[v])
                continue;
            done[v] = true;
            const ir_value *x = ir_val(g, v);
            ir_dtype dt = x->type.dtype;
            if (dt != IR_F32 && dt != IR_BF16 && dt != IR_F16) {
                pass_error(g, x->loc, "the update reads %s (%s) from backward, which cannot be summed across ranks", x->name,
                           ir_dtype_name(dt));
                rc = -1;
                break;
            }
            kl_vec_push(vals, v);
        }
    }
    for (int i = 1; i < vals.n; i++) /* stable insertion sort: few values */
        for (int j = i; j > 0 && ready_at[vals.v[j]] < ready_at[vals.v[j - 1]]; j--) {
            int t = vals.v[j];
            vals.v[j] = vals.v[j - 1];
            vals.v[j - 1] = t;
        }
    /* Pipeline stages: a bucket holds one stage's values (its ranks sum
     * them; the others never hold them), and its nodes run there. */
    int *node_stage = kl_xmalloc(sizeof(int) * (size_t)(g->nodes.n + 1));
    bool staged = pass_pipeline_assign(g, node_stage) > 0;
    int *vstage = kl_xcalloc((size_t)nv + 1, sizeof(int));
    for (int i = 0; staged && i < vals.n; i++)
        vstage[vals.v[i]] = node_stage[ready_at[vals.v[i]]];
    free(node_stage);
    free(ready_at);
    /* Buckets of one dtype up to bucket_bytes (a value larger than that
     * is a bucket of its own). */
    int bucket_no = 0;
    for (int i = 0; i < vals.n && !rc; i++) {
        if (vals.v[i] < 0)
            continue;
        ir_dtype dt = ir_val(g, vals.v[i])->type.dtype;
        /* At most 32 values a bucket: a kernel has at most
         * IR_KERNEL_MAX_BUFS buffers. */
        int members[32], m = 0, st = vstage[vals.v[i]];
        int64_t bytes = 0;
        /* vals.v[i] is taken first (and set to -1): its stage is st. */
        for (int j = i; j < vals.n && m < (int)KL_ARRAY_LEN(members); j++) {
            if (vals.v[j] < 0 || ir_val(g, vals.v[j])->type.dtype != dt || vstage[vals.v[j]] != st)
                continue;
            int64_t b = ir_type_bytes(&ir_val(g, vals.v[j])->type);
            if (m > 0 && (bucket_bytes == 0 || bytes + b > bucket_bytes))
                break;
            members[m++] = vals.v[j];
            bytes += b;
            vals.v[j] = -1;
        }
        int mark = g->nodes.n;
        reduce_bucket(g, members, m, ranks, &bucket_no);
        pass_pipeline_mark(g, mark, staged ? st : -1);
    }
    free(vstage);
    free(vals.v);
    free(from_backward);
    free(done);
    if (!rc)
        ir_toposort(g);
    return rc;
}

int pass_graph_ranks(const ir_graph *g)
{
    /* With tensor parallelism (shard_tp.c) the world is the data-parallel
     * collectives' ranks times the group's, and with pipeline stages
     * (pipeline_stages.c) times the stages. */
    int P = pass_pipeline_count(g), tp = pass_tp_ranks(g) * (P > 1 ? P : 1);
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        const char *group = ir_attr_str(&n->attrs, "group", NULL);
        if (!n->dead && ir_ops[n->op].kclass == IR_KC_COLLECTIVE && !(group && !strcmp(group, "tp")))
            return (int)ir_attr_int(&n->attrs, "ranks", 1) * tp;
    }
    return tp;
}
