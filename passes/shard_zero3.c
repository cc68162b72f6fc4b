/* shard, zero3 (passes/shard_zero.c calls it): the params partitioned.
 *
 * requires: shard_zero.c's stage-3 buckets: each bucket's params are
 *           read only in forward and backward (the update now writes
 *           the master slice zero3.K.master, f32[S], and under bf16/fp16
 *           its 16-bit copy zero3.K.master.lowp, which replace them)
 * provides: per bucket, what forward reads (the params, or their 16-bit
 *           copies) all-gathered from this rank's slice (all_gather ->
 *           [N S]) into a temporary, cut into the members (slice,
 *           reshape), placed just before the bucket's first reader in
 *           forward; the same again in backward for the readers there
 *           (matmul's input gradient reads the weight), placed one
 *           bucket ahead: before the first backward reader of the bucket
 *           backward reaches before it (prefetch). The memory plan frees
 *           each temporary after its last reader. The params, their
 *           16-bit copies and their gradient pairs leave the graph: a
 *           rank holds its slices alone (3 Psi sent per step: two
 *           gathers and the reduce-scatter).
 *
 * The slices are initialised with this rank's slice of the params' own
 * initialisers (runtime/exec/session.c: "params", "shape_I", "init_I"), so
 * N ranks start from the params one rank draws. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "shard_zero.h"

void zero3_set_shape(ir_graph *g, int v, int i, int param)
{
    const ir_type t = ir_val(g, param)->type;
    char key[32];
    snprintf(key, sizeof key, "shape_%d", i);
    ir_attrs_set_ints(&ir_val(g, v)->attrs, key, t.dim, t.rank);
}

void zero3_set_init(ir_graph *g, int v, const int *params, int n)
{
    kl_buf names = {0};
    for (int i = 0; i < n; i++) {
        const ir_value *p = ir_val(g, params[i]);
        kl_buf_printf(&names, "%s%s", i ? "," : "", p->name);
        zero3_set_shape(g, v, i, params[i]);
        const ir_attr *init = ir_attrs_find(&p->attrs, "init");
        if (init) {
            char key[32];
            snprintf(key, sizeof key, "init_%d", i);
            ir_attr_val c;
            ir_attr_val_copy(&c, &init->val);
            ir_attrs_set(&ir_val(g, v)->attrs, key, c);
        }
    }
    ir_attrs *a = &ir_val(g, v)->attrs;
    ir_attrs_set_str(a, "params", names.s ? names.s : "");
    ir_attrs_set_str(a, "init", "param_slices");
    kl_buf_free(&names);
}

/* What forward and backward read of member i: the param, or its 16-bit
 * copy. */
static int read_value(const zero3_bucket *b, int i) { return b->lowp[i] >= 0 ? b->lowp[i] : b->params[i]; }

/* The first live reader of the bucket's members in phase ph, or -1. */
static int first_reader(const ir_graph *g, const zero3_bucket *b, ir_phase ph)
{
    int first = -1;
    for (int i = 0; i < b->n; i++) {
        const ir_value *x = ir_val(g, read_value(b, i));
        for (int u = 0; u < x->uses.n; u++) {
            const ir_node *r = ir_nd(g, x->uses.v[u].node);
            if (!r->dead && r->phase == ph && (first < 0 || r->id < first))
                first = r->id;
        }
    }
    return first;
}

/* The bucket all-gathered in phase ph and cut into its members, whose
 * readers in ph (nodes before `before`) read the pieces. */
static void gather(ir_graph *g, const zero3_bucket *b, int ranks, ir_phase ph, int before)
{
    int lo = g->nodes.n;
    int src = b->lowp_slice >= 0 ? b->lowp_slice : b->master;
    const char *tag = ph == IR_PHASE_FORWARD ? "gathered" : "gathered_bwd";
    ir_attrs ra = {0};
    ir_attrs_set_int(&ra, "ranks", ranks);
    const char *mname = ir_val(g, b->master)->name;
    char *gname = kl_xasprintf("%.*s.%s", (int)(strlen(mname) - strlen(".master")), mname, tag);
    char *uname = ir_unique_name(g, gname);
    int all = ir_emit(g, IR_OP_ALL_GATHER, &src, 1, &ra, uname);
    free(uname);
    free(gname);
    ir_attrs_free(&ra);
    int64_t at = 0;
    int pieces[ZERO_MAX_MEMBERS];
    for (int i = 0; i < b->n; i++) {
        const ir_value *x = ir_val(g, read_value(b, i));
        int64_t numel = ir_type_numel(&x->type);
        int piece = all;
        if (numel != ir_type_numel(&ir_val(g, all)->type)) {
            /* Several members, or padding: a copy (a whole gather is
             * reshaped in place, a view). */
            ir_attrs a = {0};
            ir_attrs_set_int(&a, "axis", 0);
            ir_attrs_set_int(&a, "start", at);
            ir_attrs_set_int(&a, "end", at + numel);
            piece = ir_emit(g, IR_OP_SLICE, &all, 1, &a, NULL);
            ir_attrs_free(&a);
        }
        at += numel;
        x = ir_val(g, read_value(b, i));
        ir_attrs r = {0};
        ir_attrs_set_ints(&r, "shape", x->type.dim, x->type.rank);
        char *pname = kl_xasprintf("%s.%s", x->name, tag);
        char *pu = ir_unique_name(g, pname);
        pieces[i] = ir_emit(g, IR_OP_RESHAPE, &piece, 1, &r, pu);
        free(pu);
        free(pname);
        ir_attrs_free(&r);
    }
    for (int k = lo; k < g->nodes.n; k++) {
        ir_nd(g, k)->phase = ph;
        ir_nd(g, k)->loc = ir_val(g, b->params[0])->loc;
    }
    for (int i = 0; i < b->n; i++) {
        const ir_value *x = ir_val(g, read_value(b, i));
        for (int u = x->uses.n - 1; u >= 0; u--) {
            ir_use use = x->uses.v[u];
            ir_node *r = ir_nd(g, use.node);
            if (!r->dead && r->phase == ph && r->id < before)
                ir_set_operand(g, r, use.operand, pieces[i]);
        }
    }
}

/* Where a run placed before node at goes: before the nodes just before
 * at, in its phase, that fusion may make one kernel with it (which runs
 * where its first node is): pointwise producers of at (relu_grad before
 * batchnorm_grad), and a matmul before its pointwise epilogue (the bias
 * add). */
static int unit_start(const ir_graph *g, int at)
{
    const ir_node *a = ir_nd(g, at);
    int k = at;
    while (k > 0) {
        const ir_node *p = ir_nd(g, k - 1);
        bool fusable = ir_op_is_pointwise(p->op) || (ir_ops[p->op].kclass == IR_KC_GEMM && ir_op_is_pointwise(a->op));
        bool feeds = p->dead;
        for (int o = 0; o < p->out.n && !feeds && p->phase == a->phase && fusable; o++) {
            const ir_value *x = ir_val(g, p->out.v[o]);
            for (int u = 0; u < x->uses.n && !feeds; u++)
                feeds = x->uses.v[u].node == at;
        }
        if (!feeds)
            break;
        k--;
    }
    return k;
}

typedef struct run {
    int anchor, lo, hi; /* nodes [lo, hi) go just before node anchor */
} run;

/* The runs' nodes moved before their anchors (runs of one anchor in the
 * order they were made). */
static void place_runs(ir_graph *g, const run *runs, int nruns, int first)
{
    int n = g->nodes.n, on = 0;
    int *order = kl_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int k = 0; k < first; k++) {
        for (int r = 0; r < nruns; r++)
            if (runs[r].anchor == k)
                for (int q = runs[r].lo; q < runs[r].hi; q++)
                    order[on++] = q;
        order[on++] = k;
    }
    kl_check(on == n);
    ir_reorder(g, order);
    free(order);
}

int pass_zero3_gathers(ir_graph *g, const zero3_bucket *b, int nb, int ranks)
{
    int first = g->nodes.n;
    run *runs = kl_xcalloc((size_t)(2 * nb) + 1, sizeof *runs);
    int nruns = 0;
    /* Pipeline stages: a gather runs on the stage of the reader it is
     * placed for, from that stage's copy of the master slices (a stage
     * that reads another's param, a tied embedding, gets its slices
     * after each update), so a gathered param never waits for a stage
     * that runs later in the schedule. */
    int *ns = kl_xmalloc(sizeof(int) * (size_t)(first + 1));
    if (pass_pipeline_assign(g, ns) <= 0)
        for (int i = 0; i < first; i++)
            ns[i] = -1;
    /* Forward: before the bucket's first reader. */
    for (int i = 0; i < nb; i++) {
        int at = first_reader(g, &b[i], IR_PHASE_FORWARD);
        if (at < 0)
            continue;
        int lo = g->nodes.n;
        gather(g, &b[i], ranks, IR_PHASE_FORWARD, first);
        pass_pipeline_mark(g, lo, ns[at]);
        runs[nruns++] = (run){unit_start(g, at), lo, g->nodes.n};
    }
    /* Backward: buckets in the order backward first reads them, each
     * gathered before the first read of the one before it. */
    int *fb = kl_xmalloc(sizeof(int) * (size_t)(nb + 1)), *by = kl_xmalloc(sizeof(int) * (size_t)(nb + 1)), nby = 0;
    for (int i = 0; i < nb; i++) {
        fb[i] = first_reader(g, &b[i], IR_PHASE_BACKWARD);
        if (fb[i] < 0)
            continue;
        int j = nby++;
        for (; j > 0 && fb[by[j - 1]] > fb[i]; j--)
            by[j] = by[j - 1];
        by[j] = i;
    }
    for (int j = 0; j < nby; j++) {
        int lo = g->nodes.n;
        gather(g, &b[by[j]], ranks, IR_PHASE_BACKWARD, first);
        pass_pipeline_mark(g, lo, ns[fb[by[j]]]);
        runs[nruns++] = (run){unit_start(g, fb[by[j > 0 ? j - 1 : 0]]), lo, g->nodes.n};
    }
    free(fb);
    free(by);
    free(ns);
    /* Nothing else reads the params: they, their copies and their
     * gradient pairs go. */
    int rc = 0;
    for (int i = 0; i < nb && !rc; i++)
        for (int m = 0; m < b[i].n && !rc; m++)
            for (int c = 0; c < 2 && !rc; c++) {
                int v = c ? b[i].lowp[m] : b[i].params[m];
                if (v < 0)
                    continue;
                const ir_value *x = ir_val(g, v);
                for (int u = 0; u < x->uses.n && !rc; u++) {
                    const ir_node *r = ir_nd(g, x->uses.v[u].node);
                    if (!r->dead) {
                        pass_error(g, r->loc, "shard = zero3: %s is read by %s in the %s phase, where it is not gathered",
                                   x->name, ir_op_name(r->op), r->phase == IR_PHASE_UPDATE ? "update" : "startup");
                        rc = -1;
                    }
                }
            }
    if (rc) {
        free(runs);
        return rc;
    }
    int k = 0;
    for (int i = 0; i < g->grads.n; i++) {
        bool gone = false;
        for (int j = 0; j < nb && !gone; j++)
            for (int m = 0; m < b[j].n && !gone; m++)
                gone = g->grads.v[i].param == b[j].params[m];
        if (!gone)
            g->grads.v[k++] = g->grads.v[i];
    }
    g->grads.n = k;
    for (int i = 0; i < nb; i++)
        for (int m = 0; m < b[i].n; m++) {
            ir_undeclare(g, b[i].params[m]);
            if (b[i].lowp[m] >= 0)
                ir_undeclare(g, b[i].lowp[m]);
        }
    place_runs(g, runs, nruns, first);
    free(runs);
    return 0;
}
