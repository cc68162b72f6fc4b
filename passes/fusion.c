/* fusion: groups ops into kernels, by a table of patterns.
 *
 * requires: simplify
 * provides: node.group (one kernel per group id) and node.pattern (the
 *           row of the table that made the group); -1 for nodes that need
 *           no kernel: constants (folded into their readers) and
 *           reshape/flatten (views).
 *
 * A pattern names an anchor (the op whose kernel template the group uses),
 * the elementwise producers it may absorb (prologue: computed where the
 * anchor reads them, so they must not be needed elsewhere), the
 * elementwise consumers it may absorb (epilogue: computed before the
 * anchor's single store, on the shape given by the row), and siblings
 * (nodes of the same kind that share the kernel: the ops on one set of
 * logits, the optimizer updates). Legality comes from the op table's kernel
 * classes and the shapes; every group stays convex (no path leaves it and
 * comes back), so a group can run as one kernel in the schedule, and
 * needs at most IR_KERNEL_MAX_BUFS buffers (a node that would take it past
 * that starts a group of its own).
 *
 * Nodes left over are fused into elementwise chains of one shape, and the
 * rest are kernels of their own.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef enum { EPI_NONE, EPI_ANCHOR_INPUT, EPI_ANCHOR_OUTPUT } epilogue_shape;

typedef struct pattern {
    const char *name;
    bool (*anchor)(const ir_node *n);
    bool prologue;          /* absorb elementwise producers of the anchor's inputs */
    epilogue_shape epilogue; /* absorb elementwise consumers of this shape */
    bool (*sibling)(const ir_graph *g, const ir_node *anchor, const ir_node *n);
    int max_siblings;
    bool column_sums; /* absorb column sums (bias gradients) of stored results */
    bool one_per_op;  /* siblings of distinct ops only: the kernel computes one of each */
} pattern;

static bool is_op(const ir_node *n, ir_op a) { return n->op == a; }

/* Same dims (dtypes may differ: a cast fuses with its neighbours). */
static bool same_shape(const ir_type *a, const ir_type *b)
{
    return a->rank == b->rank && !memcmp(a->dim, b->dim, sizeof(int64_t) * (size_t)a->rank);
}

static bool anchor_gemm(const ir_node *n) { return is_op(n, IR_OP_MATMUL); }
static bool anchor_bn(const ir_node *n)
{
    return is_op(n, IR_OP_BATCHNORM) || is_op(n, IR_OP_BATCHNORM_INFER) || is_op(n, IR_OP_BATCHNORM_APPLY) ||
           is_op(n, IR_OP_LAYERNORM);
}
static bool anchor_bn_grad(const ir_node *n) { return is_op(n, IR_OP_BATCHNORM_GRAD); }
static bool anchor_ln_grad(const ir_node *n) { return is_op(n, IR_OP_LAYERNORM_GRAD); }
static bool anchor_logits(const ir_node *n)
{
    return is_op(n, IR_OP_CROSS_ENTROPY) || is_op(n, IR_OP_CROSS_ENTROPY_GRAD) || is_op(n, IR_OP_ACCURACY);
}
static bool anchor_softmax(const ir_node *n)
{
    return is_op(n, IR_OP_SOFTMAX) || is_op(n, IR_OP_LOG_SOFTMAX) || is_op(n, IR_OP_SOFTMAX_GRAD) || is_op(n, IR_OP_LOG_SOFTMAX_GRAD);
}
static bool anchor_reduce(const ir_node *n)
{
    return is_op(n, IR_OP_SUM) || is_op(n, IR_OP_MEAN) || is_op(n, IR_OP_MAX) || is_op(n, IR_OP_SUM_TO);
}
/* The clipping norm's squared sums: full sums in the update phase, one
 * per gradient, share kernels (16 gradients each) rather than one launch
 * per parameter; each keeps its own sum, in its own fixed order. */
static bool anchor_grad_norm(const ir_node *n) { return is_op(n, IR_OP_SUM) && n->phase == IR_PHASE_UPDATE; }
static bool full_sum(const ir_graph *g, const ir_node *n) { return ir_type_numel(&ir_val(g, n->out.v[0])->type) == 1; }
static bool sibling_grad_norm(const ir_graph *g, const ir_node *a, const ir_node *n)
{
    return anchor_grad_norm(n) && full_sum(g, a) && full_sum(g, n);
}
static bool anchor_pool(const ir_node *n) { return is_op(n, IR_OP_MAXPOOL) || is_op(n, IR_OP_AVGPOOL); }
static bool anchor_update(const ir_node *n) { return ir_ops[n->op].kclass == IR_KC_UPDATE; }

/* The logits ops of one training step share a kernel: the same logits and
 * labels, read once for the loss, the accuracy and the gradient. Logits
 * widened to f32 from a 16-bit value are that value (the exact widening
 * happens as the kernel loads: a bf16 run's loss reads the cast, its
 * gradient the bf16 logits, passes/precision.c). */
static int logits_of_cast(const ir_graph *g, int v)
{
    const ir_value *x = ir_val(g, v);
    if (x->def < 0 || ir_nd(g, x->def)->op != IR_OP_CAST || x->type.dtype != IR_F32)
        return -1;
    int src = ir_nd(g, x->def)->in.v[0];
    ir_dtype from = ir_val(g, src)->type.dtype;
    return from == IR_BF16 || from == IR_F16 ? src : -1;
}
static int logits_of(const ir_graph *g, const ir_node *n)
{
    int v = n->in.v[n->op == IR_OP_CROSS_ENTROPY_GRAD ? 1 : 0], src = logits_of_cast(g, v);
    return src >= 0 ? src : v;
}
static int labels_of(const ir_node *n)
{
    return n->in.v[n->op == IR_OP_CROSS_ENTROPY_GRAD ? 2 : 1];
}
static bool sibling_logits(const ir_graph *g, const ir_node *a, const ir_node *n)
{
    return anchor_logits(n) && logits_of(g, n) == logits_of(g, a) && labels_of(n) == labels_of(a);
}
/* The collective that reads value v, directly or through update-phase
 * nodes that assemble its operand (reshapes, a bucket's concat), other than
 * v's in-place writers; -1 when none does. */
static int collective_reading(const ir_graph *g, int v, int depth)
{
    const ir_value *x = ir_val(g, v);
    for (int u = 0; u < x->uses.n; u++) {
        int m = x->uses.v[u].node;
        const ir_node *nd = ir_nd(g, m);
        if (nd->dead || ir_op_mutates(nd->op, x->uses.v[u].operand))
            continue;
        if (ir_ops[nd->op].kclass == IR_KC_COLLECTIVE)
            return m;
        for (int k = 0; depth > 0 && nd->phase == IR_PHASE_UPDATE && k < nd->out.n; k++) {
            int c = collective_reading(g, nd->out.v[k], depth - 1);
            if (c >= 0)
                return c;
        }
    }
    return -1;
}
/* Optimizer updates of one op share kernels; gradient accumulators share
 * one only when the same collective reads them (their bucket), so that at
 * the accumulation boundary each bucket's collective starts as soon as
 * its own accumulators are written (schedule), not after every one is. */
static bool sibling_update(const ir_graph *g, const ir_node *a, const ir_node *n)
{
    if (!anchor_update(n) || n->op != a->op)
        return false;
    return n->op != IR_OP_GRAD_ACCUMULATE || collective_reading(g, a->in.v[0], 4) == collective_reading(g, n->in.v[0], 4);
}

static const pattern patterns[] = {
    {"gemm_epilogue", anchor_gemm, false, EPI_ANCHOR_OUTPUT, NULL, 0, true, false},
    {"batchnorm", anchor_bn, true, EPI_ANCHOR_INPUT, NULL, 0, false, false},
    {"batchnorm_grad", anchor_bn_grad, true, EPI_ANCHOR_INPUT, NULL, 0, false, false},
    /* Layer norm's backward with the residual add after it: dx plus the
     * gradient arriving through the skip connection, summed before the
     * single store (the pre-norm transformer's block boundary). No
     * prologue: the kernel's second nest (dgamma, dbeta) reads dy from
     * its buffer. */
    {"layernorm_grad", anchor_ln_grad, false, EPI_ANCHOR_INPUT, NULL, 0, false, false},
    /* A second cross_entropy or accuracy of the same logits (a report
     * beside the loss) gets a kernel of its own. */
    {"softmax_cross_entropy", anchor_logits, true, EPI_NONE, sibling_logits, 3, false, true},
    {"softmax", anchor_softmax, true, EPI_NONE, NULL, 0, false, false},
    {"grad_norms", anchor_grad_norm, true, EPI_NONE, sibling_grad_norm, 16, false, false},
    {"reduction", anchor_reduce, true, EPI_NONE, NULL, 0, false, false},
    {"pool", anchor_pool, false, EPI_ANCHOR_OUTPUT, NULL, 0, false, false},
    /* As many updates as the kernel's buffers allow (IR_KERNEL_MAX_BUFS:
     * 15 Adam updates, of 4 buffers each, with the 2 shared scalars):
     * the fewest launches over all parameters of a step. */
    {"optimizer", anchor_update, false, EPI_NONE, sibling_update, IR_KERNEL_MAX_BUFS, false, false},
};

/* ---- the fusion state ---- */

typedef struct fuser {
    ir_graph *g;
    int n;
    int words;         /* per ancestor bitset */
    uint64_t *anc;     /* anc[i]: nodes node i depends on (transitively) */
    uint64_t *desc;    /* desc[i]: nodes that depend on node i */
    uint64_t *around;  /* scratch: a group's ancestors, then its descendants */
    int *group;
    /* Per group id: every member lies in lo[gid] .. hi[gid] (a node taken
     * back out leaves the range wider than needed, never narrower). */
    int *lo, *hi;
    int *bound;        /* per group id: at least as many as the buffers it needs */
    const char **pat;
    int ngroups;
    bool *elem;        /* node is elementwise (may join a chain) */
    int *seen;         /* per value: the stamp of the last buffer count that met it */
    int stamp;
    int *visit;        /* per node: the stamp of the last acyclicity walk that met it */
    int *queue;        /* scratch for that walk, one slot per node */
    int vstamp;
    int *gvisit;       /* per group id: the stamp of the last walk that entered it */
    /* A Fenwick tree over node positions for prefix maxima: reach(p) is
     * at least the largest hi[h] of the groups with lo[h] <= p. */
    int *reach;
    /* Per group id: the first of its entries in a list of the nodes marked
     * into it (node, next entry; -1 ends). A node taken back out keeps its
     * entry, so readers check group[] too. */
    int *first;
    KL_VEC(int) entry;
    /* A pipelined graph (pipeline_parallel > 1): each node's stage
     * (pass_pipeline_assign) and each group's; NULL otherwise. A group
     * never spans two stages: each rank runs its stage's kernels only. */
    int *stage, *gstage;
} fuser;

static uint64_t *row(uint64_t *sets, const fuser *f, int i)
{
    return sets + (size_t)i * (size_t)f->words;
}

/* sets[to] takes node from and everything in sets[from]. */
static void absorb(const fuser *f, uint64_t *sets, int to, int from)
{
    uint64_t *t = row(sets, f, to), *s = row(sets, f, from);
    t[from / 64] |= 1ull << (from % 64);
    for (int w = 0; w < f->words; w++)
        t[w] |= s[w];
}

/* The node that makes operand k of node i, or -1 (an input or param). */
static int producer(const fuser *f, int i, int k)
{
    return ir_val(f->g, ir_nd(f->g, i)->in.v[k])->def;
}

/* Ancestors forward and descendants backward over the node order, which
 * puts producers first. */
static void compute_ancestors(fuser *f)
{
    for (int i = 0; i < f->n; i++)
        for (int k = 0; !ir_nd(f->g, i)->dead && k < ir_nd(f->g, i)->in.n; k++)
            if (producer(f, i, k) >= 0)
                absorb(f, f->anc, i, producer(f, i, k));
    for (int i = f->n - 1; i >= 0; i--)
        for (int k = 0; !ir_nd(f->g, i)->dead && k < ir_nd(f->g, i)->in.n; k++)
            if (producer(f, i, k) >= 0)
                absorb(f, f->desc, producer(f, i, k), i);
}

static bool elementwise(const ir_node *n)
{
    return ir_op_is_pointwise(n->op);
}

/* Constants are folded into their readers; views alias their operand. */
static bool needs_no_kernel(const ir_node *n)
{
    return n->op == IR_OP_CONST || ir_op_is_view(n->op);
}

/* Records that a group reaches from position lo up to position hi. */
static void reach_note(fuser *f, int lo, int hi)
{
    for (int i = lo + 1; i <= f->n; i += i & -i)
        if (f->reach[i] < hi)
            f->reach[i] = hi;
}

/* The largest hi noted for a position at or below p (-1 if none). */
static int reach_upto(const fuser *f, int p)
{
    int r = -1;
    for (int i = p + 1; i > 0; i -= i & -i)
        if (f->reach[i] > r)
            r = f->reach[i];
    return r;
}

/* Puts node x in group gid (for good or tentatively). */
static void mark(fuser *f, int x, int gid)
{
    f->group[x] = gid;
    kl_vec_push(f->entry, x);
    kl_vec_push(f->entry, f->first[gid]);
    f->first[gid] = f->entry.n - 2;
    if (f->lo[gid] < 0 || x < f->lo[gid])
        f->lo[gid] = x;
    if (x > f->hi[gid])
        f->hi[gid] = x;
    reach_note(f, f->lo[gid], f->hi[gid]);
}

/* The lowest position past top that no group spans: a group's range
 * that starts at or below it ends at or below it. Nothing past it leads
 * back to a node at or below top: edges go forward in node order, and a
 * group there lies wholly past it. */
static int cut_above(const fuser *f, int top)
{
    for (int r; (r = reach_upto(f, top)) > top;)
        top = r;
    return top;
}

static bool in_group_or(const fuser *f, int node, int gid, int x)
{
    return node == x || f->group[node] == gid;
}

/* The members of group gid, then x (x may come twice, and so may a
 * member taken out and put back): the next one after list position *e,
 * or -1 at the end. Start with *e = f->first[gid]. */
static int next_member_or(const fuser *f, int gid, int x, int *e)
{
    while (*e >= 0) {
        int m = f->entry.v[*e];
        *e = f->entry.v[*e + 1];
        if (f->group[m] == gid)
            return m;
    }
    if (*e == -1) {
        *e = -2;
        return x;
    }
    return -1;
}

/* Queues node o for the walk of groups_stay_acyclic, once. */
static void visit(fuser *f, int o, int *nq, int cut)
{
    if (o <= cut && f->visit[o] != f->vstamp && !ir_nd(f->g, o)->dead) {
        f->visit[o] = f->vstamp;
        f->queue[(*nq)++] = o;
    }
}

/* Adding node x to group gid leaves the graph of kernels acyclic. Each
 * group being convex is not enough: group A may read a value of group B
 * while B reads another of A's, with no outsider on either path
 * (q = f(x) and r = g(x) in two chains, then maximum(r, q) joining r's
 * and maximum(q, r) joining q's). Walks downstream from the group and x,
 * where reaching a member of another group continues from all of its
 * members (the group runs as one kernel, after all of its operands);
 * coming back to the group or x is a cycle. Node order puts producers
 * first, so a node past the group's last member that belongs to no
 * group cannot lead back, nor can a node past cut_above (which keeps the
 * walk near the group instead of over the rest of the graph), and
 * entering a group once per walk is enough. */
static bool groups_stay_acyclic(fuser *f, int gid, int x)
{
    const ir_graph *g = f->g;
    int top = f->hi[gid] > x ? f->hi[gid] : x, nq = 0;
    int cut = cut_above(f, top);
    f->vstamp++;
    for (int e = f->first[gid], m; (m = next_member_or(f, gid, x, &e)) >= 0;)
        f->visit[m] = f->vstamp;
    for (int e = f->first[gid], m; (m = next_member_or(f, gid, x, &e)) >= 0;) {
        if (ir_nd(g, m)->dead)
            continue;
        const ir_node *n = ir_nd(g, m);
        for (int k = 0; k < n->out.n; k++) {
            const ir_value *val = ir_val(g, n->out.v[k]);
            for (int u = 0; u < val->uses.n; u++) {
                int c = val->uses.v[u].node;
                if (!in_group_or(f, c, gid, x) && (c <= top || f->group[c] >= 0))
                    visit(f, c, &nq, cut);
            }
        }
    }
    for (int qi = 0; qi < nq; qi++) {
        int o = f->queue[qi];
        int h = f->group[o];
        if (h >= 0 && h != gid && f->gvisit[h] != f->vstamp) {
            f->gvisit[h] = f->vstamp;
            for (int e = f->first[h]; e >= 0; e = f->entry.v[e + 1])
                if (f->group[f->entry.v[e]] == h)
                    visit(f, f->entry.v[e], &nq, cut);
        }
        const ir_node *n = ir_nd(g, o);
        for (int k = 0; k < n->out.n; k++) {
            const ir_value *val = ir_val(g, n->out.v[k]);
            for (int u = 0; u < val->uses.n; u++) {
                int c = val->uses.v[u].node;
                if (in_group_or(f, c, gid, x))
                    return false;
                if (c <= top || f->group[c] >= 0)
                    visit(f, c, &nq, cut);
            }
        }
    }
    return true;
}

/* When a node runs: every micro-batch (forward and backward), once per
 * optimizer step (update) or once at start-up. */
static int phase_kind(const ir_node *n)
{
    return n->phase == IR_PHASE_UPDATE ? 1 : n->phase == IR_PHASE_STARTUP ? 2 : 0;
}

/* Adding node x to group gid keeps it convex: no node outside the group
 * lies on a path between x and the group. Nodes that run at different
 * times (every micro-batch, once per optimizer step, once at start-up)
 * never share a kernel. */
static bool convex_with(fuser *f, int gid, int x)
{
    int xu = phase_kind(ir_nd(f->g, x));
    int W = f->words;
    uint64_t *ga = f->around, *gd = f->around + W;
    /* An outsider on such a path lies between x and a member in node
     * order (producers come first), so only the words of the nodes from
     * the lowest to the highest of them matter. */
    int w0 = (f->lo[gid] >= 0 && f->lo[gid] < x ? f->lo[gid] : x) / 64;
    int w1 = (f->hi[gid] > x ? f->hi[gid] : x) / 64 + 1;
    memset(ga + w0, 0, sizeof(uint64_t) * (size_t)(w1 - w0));
    memset(gd + w0, 0, sizeof(uint64_t) * (size_t)(w1 - w0));
    for (int e = f->first[gid], m; (m = next_member_or(f, gid, x, &e)) >= 0;) {
        if (m == x)
            continue;
        if (phase_kind(ir_nd(f->g, m)) != xu)
            return false;
        for (int w = w0; w < w1; w++) {
            ga[w] |= row(f->anc, f, m)[w];
            gd[w] |= row(f->desc, f, m)[w];
        }
    }
    /* A path m -> ... -> x or x -> ... -> m through an outsider o: o is
     * below x and above a member, or above x and below a member. */
    const uint64_t *xa = row(f->anc, f, x), *xd = row(f->desc, f, x);
    for (int w = w0; w < w1; w++) {
        for (uint64_t cand = (xd[w] & ga[w]) | (xa[w] & gd[w]); cand; cand &= cand - 1) {
            int o = w * 64 + __builtin_ctzll(cand);
            if (o != x && f->group[o] != gid && !ir_nd(f->g, o)->dead)
                return false;
        }
    }
    return groups_stay_acyclic(f, gid, x);
}



/* A value counted once per call of group_fits (seen[] holds the stamp). */
static bool first_sight(fuser *f, int v)
{
    if (f->seen[v] == f->stamp)
        return false;
    f->seen[v] = f->stamp;
    return true;
}

/* Group gid with node x added needs at most IR_KERNEL_MAX_BUFS buffers,
 * counted as its kernel will have them, or more: every value it reads
 * from outside (constants are folded in), every result used outside or
 * kept as a graph output, and every result of a node that is not
 * elementwise (a template stores those). A node that joins adds at most
 * its operands and results to that count (what it takes in only falls
 * away), so while bound[gid] plus those stays within the limit, nothing
 * is counted; a true answer means x joins, and the bound grows with it. */
static bool group_fits(fuser *f, int gid, int x)
{
    const ir_graph *g = f->g;
    if (f->stage && f->stage[x] != f->gstage[gid])
        return false;
    int most = f->bound[gid] + ir_nd(g, x)->in.n + ir_nd(g, x)->out.n;
    if (most <= IR_KERNEL_MAX_BUFS) {
        f->bound[gid] = most;
        return true;
    }
    int bufs = 0;
    f->stamp++;
    for (int e = f->first[gid], m; (m = next_member_or(f, gid, x, &e)) >= 0;) {
        const ir_node *n = ir_nd(g, m);
        if (n->dead)
            continue;
        for (int k = 0; k < n->in.n; k++) {
            int p = producer(f, m, k);
            bool inside = p >= 0 && (ir_nd(g, p)->op == IR_OP_CONST || (in_group_or(f, p, gid, x) && elementwise(ir_nd(g, p))));
            if (!inside && first_sight(f, n->in.v[k]))
                bufs++;
        }
        for (int k = 0; k < n->out.n; k++) {
            int v = n->out.v[k];
            const ir_value *val = ir_val(g, v);
            bool stored = !elementwise(n) || ir_is_output(g, v);
            for (int u = 0; u < val->uses.n && !stored; u++)
                stored = !in_group_or(f, val->uses.v[u].node, gid, x);
            if (stored && first_sight(f, v))
                bufs++;
        }
    }
    if (bufs > IR_KERNEL_MAX_BUFS)
        return false;
    f->bound[gid] = bufs;
    return true;
}

/* A new group of node i alone: its bound is its operands and results. */
static int new_group(fuser *f, int i)
{
    int gid = f->ngroups++;
    if (f->stage)
        f->gstage[gid] = f->stage[i];
    f->bound[gid] = ir_nd(f->g, i)->in.n + ir_nd(f->g, i)->out.n;
    return gid;
}

/* Every use of node i's results is inside group gid (or no use at all),
 * and none of them is a graph output. */
static bool used_only_in(const fuser *f, int i, int gid)
{
    const ir_graph *g = f->g;
    const ir_node *n = ir_nd(g, i);
    for (int k = 0; k < n->out.n; k++) {
        int v = n->out.v[k];
        if (ir_is_output(g, v))
            return false;
        const ir_value *val = ir_val(g, v);
        for (int u = 0; u < val->uses.n; u++)
            if (f->group[val->uses.v[u].node] != gid)
                return false;
    }
    return true;
}

static void join(fuser *f, int gid, int i, const char *pat)
{
    mark(f, i, gid);
    f->pat[i] = pat;
}

/* The cost rule for a prologue: a broadcast whose operand is constant
 * along the innermost axis (e.g. a per-channel [N, C, 1, 1] value over
 * [N, C, H, W]) would put a load indexed only by outer loop variables in
 * the anchor's leaf loop, and the C compiler then leaves that loop scalar:
 * a fused mul + broadcast + relu_grad + batchnorm_grad took 26.8 ms
 * against 2.4 ms without the broadcast (issue 32 item 7). Such a
 * broadcast stays outside the group, which keeps the leaf run contiguous;
 * it is a small kernel of its own. KILN_FUSION_COST=0, a debug switch,
 * turns the rule off (the test of kiln bench --check-fusion injects the
 * slow group with it: tests/fusion/fusion_check_bench.sh). */
static bool keeps_leaf_run(const ir_graph *g, const ir_node *p)
{
    const char *e = getenv("KILN_FUSION_COST");
    if (!is_op(p, IR_OP_BROADCAST) || (e && !strcmp(e, "0")))
        return true;
    const ir_type *in = &ir_val(g, p->in.v[0])->type, *out = &ir_val(g, p->out.v[0])->type;
    if (out->rank == 0 || out->dim[out->rank - 1] == 1)
        return true;
    return in->rank > 0 && in->dim[in->rank - 1] == out->dim[out->rank - 1];
}

/* Absorbs elementwise producers of the group's operands, outward. */
static void grow_prologue(fuser *f, int gid, const char *pat)
{
    ir_graph *g = f->g;
    for (bool changed = true; changed;) {
        changed = false;
        for (int m = f->lo[gid]; m >= 0 && m <= f->hi[gid]; m++) {
            if (f->group[m] != gid)
                continue;
            const ir_node *n = ir_nd(g, m);
            for (int k = 0; k < n->in.n; k++) {
                const ir_value *v = ir_val(g, n->in.v[k]);
                int p = v->def;
                if (p < 0 || f->group[p] >= 0 || !elementwise(ir_nd(g, p)) || ir_nd(g, p)->out.n != 1)
                    continue;
                /* Producers of the value's own shape only: the template
                 * reads them at the anchor's positions. */
                if (!same_shape(&ir_val(g, ir_nd(g, p)->out.v[0])->type, &v->type) || !keeps_leaf_run(g, ir_nd(g, p)))
                    continue;
                mark(f, p, gid); /* tentatively, for the use check */
                if (used_only_in(f, p, gid) && convex_with(f, gid, p) && group_fits(f, gid, p)) {
                    f->pat[p] = pat;
                    changed = true;
                } else {
                    f->group[p] = -1;
                }
            }
        }
    }
}

/* A cast widening 16-bit logits to f32 that only logits ops read, when
 * the gradient reads the 16-bit logits themselves (passes/precision.c):
 * their one kernel widens as it loads (logits_of), so an epilogue taking
 * the cast would store an f32 copy of the logits beside them. (Without
 * the gradient, an evaluation, the epilogue stores the f32 logits that
 * --predict reads.) */
static bool widening_for_logits(const ir_graph *g, const ir_node *c)
{
    int src = c->op == IR_OP_CAST ? logits_of_cast(g, c->out.v[0]) : -1;
    if (src < 0 || ir_is_output(g, c->out.v[0]))
        return false;
    const ir_value *v = ir_val(g, c->out.v[0]), *x = ir_val(g, src);
    for (int u = 0; u < v->uses.n; u++)
        if (!anchor_logits(ir_nd(g, v->uses.v[u].node)))
            return false;
    for (int u = 0; u < x->uses.n; u++) {
        const ir_node *m = ir_nd(g, x->uses.v[u].node);
        if (m->op == IR_OP_CROSS_ENTROPY_GRAD && x->uses.v[u].operand == 1)
            return true;
    }
    return false;
}

/* Absorbs elementwise consumers of shape `shape`, downstream. */
static void grow_epilogue(fuser *f, int gid, const char *pat, const ir_type *shape)
{
    ir_graph *g = f->g;
    for (bool changed = true; changed;) {
        changed = false;
        for (int m = f->lo[gid]; m >= 0 && m <= f->hi[gid]; m++) {
            if (f->group[m] != gid)
                continue;
            const ir_node *n = ir_nd(g, m);
            for (int k = 0; k < n->out.n; k++) {
                const ir_value *v = ir_val(g, n->out.v[k]);
                for (int u = 0; u < v->uses.n; u++) {
                    int c = v->uses.v[u].node;
                    const ir_node *cn = ir_nd(g, c);
                    if (f->group[c] >= 0 || !elementwise(cn) || cn->out.n != 1 ||
                        !same_shape(&ir_val(g, cn->out.v[0])->type, shape) || widening_for_logits(g, cn))
                        continue;
                    if (convex_with(f, gid, c) && group_fits(f, gid, c)) {
                        join(f, gid, c, pat);
                        changed = true;
                    }
                }
            }
        }
    }
}

/* Group gid stores value v anyway: v is a graph output or a node other
 * than c outside the group reads it. */
static bool stored_anyway(const fuser *f, int gid, int v, int c)
{
    const ir_graph *g = f->g;
    if (ir_is_output(g, v))
        return true;
    const ir_value *val = ir_val(g, v);
    for (int u = 0; u < val->uses.n; u++)
        if (val->uses.v[u].node != c && f->group[val->uses.v[u].node] != gid)
            return true;
    return false;
}

/* A column sum of a value the group stores: sum_to over every dim but the
 * last (a bias gradient), read back by the group's kernel after the
 * elementwise nest (codegen/k_colsum.c). Only of values stored anyway
 * (used outside the group too), so the fusion moves no extra bytes; or
 * of the group's fp32 widening of such a 16-bit value (fp16's and bf16's
 * bias gradients: the sum reads the 16-bit value, ir_widened_from). */
static bool column_sum_of_stored(const fuser *f, int gid, int c)
{
    const ir_graph *g = f->g;
    const ir_node *cn = ir_nd(g, c);
    if (!ir_is_column_sum(g, cn) || cn->dead || f->group[c] >= 0)
        return false;
    int v = cn->in.v[0], w = ir_widened_from(g, v);
    if (stored_anyway(f, gid, v, c))
        return true;
    return w >= 0 && f->group[ir_val(g, v)->def] == gid && ir_val(g, w)->def >= 0 &&
           f->group[ir_val(g, w)->def] == gid && stored_anyway(f, gid, w, c);
}

static void grow_column_sums(fuser *f, int gid, const char *pat)
{
    ir_graph *g = f->g;
    for (int m = f->lo[gid]; m >= 0 && m <= f->hi[gid]; m++) {
        if (f->group[m] != gid || ir_nd(g, m)->op == IR_OP_SUM_TO)
            continue;
        const ir_node *n = ir_nd(g, m);
        for (int k = 0; k < n->out.n; k++) {
            const ir_value *v = ir_val(g, n->out.v[k]);
            for (int u = 0; u < v->uses.n; u++) {
                int c = v->uses.v[u].node;
                if (!column_sum_of_stored(f, gid, c))
                    continue;
                mark(f, c, gid); /* tentatively */
                if (convex_with(f, gid, c) && group_fits(f, gid, c))
                    f->pat[c] = pat;
                else
                    f->group[c] = -1;
            }
        }
    }
}

/* KILN_FUSION_OFF=NAME[,NAME...]: a debug switch that turns single
 * patterns off (the performance guard's test injects a regression with
 * it; tests/perf/guard.sh). off[p]: pattern p is off. An unknown name is
 * an error, not a switch that silently does nothing. */
static int patterns_off(bool *off)
{
    const char *e = getenv("KILN_FUSION_OFF");
    for (const char *s = e; s && *s;) {
        size_t len = strcspn(s, ",");
        size_t p = 0;
        while (p < KL_ARRAY_LEN(patterns) && (strlen(patterns[p].name) != len || strncmp(patterns[p].name, s, len)))
            p++;
        if (p == KL_ARRAY_LEN(patterns)) {
            kl_buf names = {0};
            for (size_t q = 0; q < KL_ARRAY_LEN(patterns); q++)
                kl_buf_printf(&names, "%s%s", q ? ", " : "", patterns[q].name);
            char *list = kl_buf_take(&names);
            kl_error("KILN_FUSION_OFF: unknown fusion pattern '%.*s' (patterns: %s)", (int)len, s, list);
            free(list);
            return -1;
        }
        off[p] = true;
        s += len + (s[len] == ',');
    }
    return 0;
}

/* Whether group gid holds a node of op (its members lie in lo..hi). */
static bool group_has_op(const fuser *f, int gid, ir_op op)
{
    for (int i = f->lo[gid]; i <= f->hi[gid]; i++)
        if (f->group[i] == gid && ir_nd(f->g, i)->op == op)
            return true;
    return false;
}

static void apply_patterns(fuser *f, const bool *off)
{
    ir_graph *g = f->g;
    for (size_t p = 0; p < KL_ARRAY_LEN(patterns); p++) {
        const pattern *pt = &patterns[p];
        if (off[p])
            continue;
        for (int i = 0; i < f->n; i++) {
            ir_node *n = ir_nd(g, i);
            if (n->dead || f->group[i] >= 0 || !pt->anchor(n))
                continue;
            int gid = new_group(f, i);
            join(f, gid, i, pt->name);
            int siblings = 0;
            for (int j = i + 1; pt->sibling && j < f->n && siblings < pt->max_siblings - 1; j++) {
                ir_node *m = ir_nd(g, j);
                if (m->dead || f->group[j] >= 0 || !pt->sibling(g, n, m) || (pt->one_per_op && group_has_op(f, gid, m->op)))
                    continue;
                mark(f, j, gid);
                if (convex_with(f, gid, j) && group_fits(f, gid, j)) {
                    f->pat[j] = pt->name;
                    siblings++;
                } else {
                    f->group[j] = -1;
                }
            }
            if (pt->prologue)
                grow_prologue(f, gid, pt->name);
            if (pt->epilogue != EPI_NONE) {
                const ir_type *shape = pt->epilogue == EPI_ANCHOR_INPUT ? &ir_val(g, n->in.v[0])->type
                                                                       : &ir_val(g, n->out.v[0])->type;
                grow_epilogue(f, gid, pt->name, shape);
            }
            if (pt->column_sums)
                grow_column_sums(f, gid, pt->name);
        }
    }
}

/* Fuses the remaining elementwise nodes into chains over one shape. */
static void fuse_chains(fuser *f)
{
    ir_graph *g = f->g;
    for (int i = 0; i < f->n; i++) {
        ir_node *n = ir_nd(g, i);
        if (n->dead || f->group[i] >= 0 || !elementwise(n))
            continue;
        const ir_type *shape = &ir_val(g, n->out.v[0])->type;
        /* Join a producer's chain when it has this shape. */
        int gid = -1;
        for (int k = 0; k < n->in.n && gid < 0; k++) {
            int p = ir_val(g, n->in.v[k])->def;
            if (p < 0 || f->group[p] < 0 || !f->pat[p] || strcmp(f->pat[p], "elementwise"))
                continue;
            if (!same_shape(&ir_val(g, ir_nd(g, p)->out.v[0])->type, shape))
                continue;
            mark(f, i, f->group[p]);
            if (convex_with(f, f->group[p], i) && group_fits(f, f->group[p], i))
                gid = f->group[p];
            else
                f->group[i] = -1;
        }
        if (gid < 0)
            gid = new_group(f, i);
        join(f, gid, i, "elementwise");
    }
}

static int pass_fusion_mode(ir_graph *g, bool fuse)
{
    bool off[KL_ARRAY_LEN(patterns)] = {false};
    if (fuse && patterns_off(off))
        return -1;
    fuser f = {.g = g, .n = g->nodes.n};
    f.words = (f.n + 63) / 64;
    f.anc = kl_xcalloc((size_t)f.n * (size_t)f.words + 1, sizeof(uint64_t));
    f.desc = kl_xcalloc((size_t)f.n * (size_t)f.words + 1, sizeof(uint64_t));
    f.around = kl_xcalloc(2 * (size_t)f.words + 1, sizeof(uint64_t));
    f.group = kl_xmalloc(sizeof(int) * (size_t)(f.n + 1));
    f.pat = kl_xcalloc((size_t)f.n + 1, sizeof(char *));
    /* At most one group per node is made while fusing. */
    f.lo = kl_xmalloc(sizeof(int) * (size_t)(f.n + 1));
    f.hi = kl_xmalloc(sizeof(int) * (size_t)(f.n + 1));
    f.bound = kl_xcalloc((size_t)f.n + 1, sizeof(int));
    for (int i = 0; i <= f.n; i++)
        f.lo[i] = f.hi[i] = -1;
    f.seen = kl_xcalloc((size_t)g->values.n + 1, sizeof(int));
    f.visit = kl_xcalloc((size_t)f.n + 1, sizeof(int));
    f.queue = kl_xmalloc(sizeof(int) * (size_t)(f.n + 1));
    f.gvisit = kl_xcalloc((size_t)f.n + 1, sizeof(int));
    f.reach = kl_xmalloc(sizeof(int) * (size_t)(f.n + 1));
    f.first = kl_xmalloc(sizeof(int) * (size_t)(f.n + 1));
    for (int i = 0; i <= f.n; i++)
        f.reach[i] = f.first[i] = -1;
    for (int i = 0; i < f.n; i++)
        f.group[i] = -1;
    f.stage = kl_xmalloc(sizeof(int) * (size_t)(f.n + 1));
    if (pass_pipeline_assign(g, f.stage))
        f.gstage = kl_xcalloc((size_t)f.n + 1, sizeof(int));
    else {
        free(f.stage);
        f.stage = NULL;
    }
    if (fuse) {
        compute_ancestors(&f);
        /* Nodes that need no kernel never join a group. */
        for (int i = 0; i < f.n; i++)
            if (needs_no_kernel(ir_nd(g, i)))
                f.group[i] = -2;
        apply_patterns(&f, off);
        fuse_chains(&f);
        for (int i = 0; i < f.n; i++)
            if (f.group[i] == -2)
                f.group[i] = -1;
    }
    for (int i = 0; i < f.n; i++) {
        ir_node *n = ir_nd(g, i);
        free(n->pattern);
        n->pattern = NULL;
        if (n->dead || needs_no_kernel(n)) {
            n->group = -1;
            continue;
        }
        if (f.group[i] < 0) {
            f.group[i] = f.ngroups++;
            f.pat[i] = "single";
        }
        n->group = f.group[i];
        n->pattern = kl_xstrdup(f.pat[i]);
    }
    /* Number groups in order of first appearance, so dumps read well. */
    int *renum = kl_xmalloc(sizeof(int) * (size_t)(f.ngroups + 1));
    for (int i = 0; i < f.ngroups; i++)
        renum[i] = -1;
    int next = 0;
    for (int i = 0; i < f.n; i++) {
        ir_node *n = ir_nd(g, i);
        if (n->group >= 0) {
            if (renum[n->group] < 0)
                renum[n->group] = next++;
            n->group = renum[n->group];
        }
    }
    free(renum);
    free(f.anc);
    free(f.desc);
    free(f.around);
    free(f.group);
    free(f.pat);
    free(f.seen);
    free(f.visit);
    free(f.queue);
    free(f.gvisit);
    free(f.reach);
    free(f.first);
    kl_vec_free(f.entry);
    free(f.lo);
    free(f.hi);
    free(f.bound);
    free(f.stage);
    free(f.gstage);
    return 0;
}

int pass_fusion(ir_graph *g, const pass_ctx *cx)
{
    return pass_fusion_mode(g, !cx->no_fusion);
}

