/* pipeline: the stages of pipeline parallelism (forward graph).
 *
 * requires: lower (the forward graph in program order, before autodiff)
 * provides: with the train setting pipeline_parallel = P > 1, every live
 *           node carries _stage = s (0 <= s < P, never decreasing along
 *           the program): the stages, contiguous runs of the forward
 *           program. Without explicit marks the pass cuts where the
 *           fewest values cross (values an input reaches; constants,
 *           masks and position tables each stage makes itself), at the
 *           boundaries between top-level calls where enough of those
 *           exist, and picks the P - 1 cuts that minimise the largest
 *           stage's forward FLOPs (a linear partition). With stage = k
 *           on calls (the frontend's _stage on their ops) the marks are
 *           the stages: an unmarked op belongs to the stage of the op
 *           before it (stage 0 first). P = 1 leaves the graph unchanged.
 *
 * Refused, before any training: more stages than places to cut, stage
 * marks that go backwards or do not make exactly P stages, a world that
 * is not P x tensor_parallel x D ranks, and pipeline_schedule without
 * pipeline_parallel > 1. pass_pipeline_report prints the stages, what
 * crosses each cut and the balance (kiln ir --after pipeline). */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "ir/train_config.h"

/* Forward FLOPs of one node: 2 per multiply-add of GEMMs, convolutions
 * and attention; one per result element of everything else; views none. */
static double node_flops(const ir_graph *g, const ir_node *n)
{
    if (ir_op_is_view(n->op) || n->op == IR_OP_CONST || !n->out.n)
        return 0;
    const ir_type *out = &ir_val(g, n->out.v[0])->type;
    double elems = (double)ir_type_numel(out);
    if (n->op == IR_OP_MATMUL) {
        const ir_type *a = &ir_val(g, n->in.v[0])->type;
        int64_t k = a->dim[a->rank - (ir_attr_int(&n->attrs, "transpose_a", 0) ? 2 : 1)];
        return 2.0 * elems * (double)k;
    }
    if (n->op == IR_OP_CONV2D) {
        const ir_type *w = &ir_val(g, n->in.v[1])->type;
        return 2.0 * elems * (double)(ir_type_numel(w) / (w->dim[0] ? w->dim[0] : 1));
    }
    if (n->op == IR_OP_ATTENTION) {
        const ir_type *q = &ir_val(g, n->in.v[0])->type, *k = &ir_val(g, n->in.v[1])->type,
                      *v = &ir_val(g, n->in.v[2])->type;
        double rows = (double)ir_type_numel(q) / (double)q->dim[q->rank - 1];
        return 2.0 * rows * (double)k->dim[k->rank - 2] * (double)(q->dim[q->rank - 1] + v->dim[v->rank - 1]);
    }
    return elems;
}

/* The live forward nodes in program order (later passes' backward and
 * update nodes are not the stages' own), with what the pass needs of each. */
typedef struct stage_view {
    int n;           /* live nodes */
    int *node;       /* position -> node id */
    int *pos;        /* node id -> position, -1 dead */
    double *flops;   /* per position */
    bool *varying;   /* per value: an input reaches it (it crosses a cut) */
    int *last_use;   /* per value: the last position reading it, -1 none */
    int *count;      /* per cut j (between positions j and j + 1): values crossing */
    int64_t *bytes;  /* and their bytes per micro-batch */
    int *layers;     /* per position p: GEMMs, convolutions and attentions before p */
} stage_view;

static void view_free(stage_view *s)
{
    free(s->node);
    free(s->pos);
    free(s->flops);
    free(s->varying);
    free(s->last_use);
    free(s->count);
    free(s->bytes);
    free(s->layers);
}

static void view_build(const ir_graph *g, stage_view *s)
{
    int nv = g->values.n;
    s->node = kl_xcalloc((size_t)g->nodes.n + 1, sizeof *s->node);
    s->pos = kl_xcalloc((size_t)g->nodes.n + 1, sizeof *s->pos);
    s->flops = kl_xcalloc((size_t)g->nodes.n + 1, sizeof *s->flops);
    s->varying = kl_xcalloc((size_t)nv + 1, sizeof *s->varying);
    s->last_use = kl_xcalloc((size_t)nv + 1, sizeof *s->last_use);
    s->count = kl_xcalloc((size_t)g->nodes.n + 1, sizeof *s->count);
    s->bytes = kl_xcalloc((size_t)g->nodes.n + 1, sizeof *s->bytes);
    s->layers = kl_xcalloc((size_t)g->nodes.n + 2, sizeof *s->layers);
    s->n = 0;
    for (int i = 0; i < g->nodes.n; i++) {
        s->pos[i] = -1;
        if (ir_nd(g, i)->dead || ir_nd(g, i)->phase != IR_PHASE_FORWARD)
            continue;
        s->pos[i] = s->n;
        s->node[s->n] = i;
        s->flops[s->n] = node_flops(g, ir_nd(g, i));
        ir_op op = ir_nd(g, i)->op;
        s->layers[s->n + 1] = s->layers[s->n] + (op == IR_OP_MATMUL || op == IR_OP_CONV2D || op == IR_OP_ATTENTION);
        s->n++;
    }
    for (int v = 0; v < nv; v++) {
        s->last_use[v] = -1;
        s->varying[v] = ir_val(g, v)->kind == IR_VAL_INPUT;
    }
    for (int p = 0; p < s->n; p++) {
        const ir_node *n = ir_nd(g, s->node[p]);
        bool vary = false;
        for (int i = 0; i < n->in.n; i++) {
            vary |= s->varying[n->in.v[i]];
            s->last_use[n->in.v[i]] = p;
        }
        for (int i = 0; i < n->out.n; i++)
            s->varying[n->out.v[i]] = vary;
    }
    /* A value made at position p and last read at L crosses cuts p..L-1. */
    int *dc = kl_xcalloc((size_t)s->n + 1, sizeof *dc);
    int64_t *db = kl_xcalloc((size_t)s->n + 1, sizeof *db);
    for (int p = 0; p < s->n; p++) {
        const ir_node *n = ir_nd(g, s->node[p]);
        for (int i = 0; i < n->out.n; i++) {
            int v = n->out.v[i], last = s->last_use[v];
            if (!s->varying[v] || last <= p)
                continue;
            dc[p]++, dc[last]--;
            db[p] += ir_type_bytes(&ir_val(g, v)->type), db[last] -= ir_type_bytes(&ir_val(g, v)->type);
        }
    }
    int c = 0;
    int64_t b = 0;
    for (int j = 0; j + 1 < s->n; j++) {
        c += dc[j], b += db[j];
        s->count[j] = c, s->bytes[j] = b;
    }
    free(dc);
    free(db);
}

/* The length of the first depth call levels of a node's scope ("block.2"
 * of "block.2.dense.1" at depth 1; each level is NAME.K); the whole
 * scope when it is shallower, 0 for the model block's own ops. */
static size_t scope_prefix(const ir_node *n, int depth, const char **s)
{
    *s = n->scope ? n->scope : "";
    const char *p = *s;
    for (int dots = 0; *p; p++)
        if (*p == '.' && ++dots == 2 * depth)
            break;
    return (size_t)(p - *s);
}

/* Whether the cut after position j separates two calls at depth (0: any
 * cut). */
static bool scope_boundary(const ir_graph *g, const stage_view *s, int j, int depth)
{
    if (!depth)
        return true;
    const char *a, *b;
    size_t la = scope_prefix(ir_nd(g, s->node[j]), depth, &a), lb = scope_prefix(ir_nd(g, s->node[j + 1]), depth, &b);
    return la != lb || strncmp(a, b, la);
}

/* The cuts with the fewest crossing values that separate calls at depth
 * (0: all of them); their count. */
static int allowed_cuts(const ir_graph *g, const stage_view *s, int depth, int *cuts, int *fewest)
{
    int min = -1;
    for (int j = 0; j + 1 < s->n; j++)
        if (min < 0 || s->count[j] < min)
            min = s->count[j];
    *fewest = min;
    int k = 0;
    for (int j = 0; j + 1 < s->n; j++)
        if (s->count[j] == min && scope_boundary(g, s, j, depth))
            cuts[k++] = j;
    return k;
}

static int max_depth(const ir_graph *g, const stage_view *s)
{
    int d = 0;
    for (int p = 0; p < s->n; p++) {
        const char *sc = ir_nd(g, s->node[p])->scope;
        int dots = 0;
        for (; sc && *sc; sc++)
            dots += *sc == '.';
        d = (dots + 1) / 2 > d ? (dots + 1) / 2 : d;
    }
    return d;
}

/* The most stages the allowed cuts make with a layer in each. */
static int most_stages(const stage_view *s, const int *cuts, int k)
{
    int stages = 0, from = 0;
    for (int c = 0; c < k; c++)
        if (s->layers[cuts[c] + 1] > s->layers[from])
            stages++, from = cuts[c] + 1;
    return s->layers[s->n] > s->layers[from] ? stages + 1 : stages > 0 ? stages : 1;
}

/* Linear partition over the allowed cuts: P - 1 of them minimising the
 * largest stage's FLOPs, each stage holding a layer (P at most
 * most_stages). chosen gets the cut positions in order; returns the
 * largest stage's FLOPs. */
static double balance(const stage_view *s, const int *cuts, int k, int P, int *chosen)
{
    double *pre = kl_xcalloc((size_t)s->n + 1, sizeof *pre);
    for (int p = 0; p < s->n; p++)
        pre[p + 1] = pre[p] + s->flops[p];
    /* best[t][c]: the least largest stage of stages 0..t with stage t
     * ending at cuts[c]; from[t][c]: the cut before it. */
    double *best = kl_xcalloc((size_t)P * (size_t)k, sizeof *best);
    int *from = kl_xcalloc((size_t)P * (size_t)k, sizeof *from);
    /* Each stage holds a layer (a GEMM, convolution or attention):
     * layers(a, b) counts those at positions a..b - 1. */
#define LAYERS(a, b) (s->layers[(b)] - s->layers[(a)])
    for (int c = 0; c < k; c++) {
        best[c] = LAYERS(0, cuts[c] + 1) ? pre[cuts[c] + 1] : -1;
        from[c] = -1;
    }
    for (int t = 1; t < P - 1; t++)
        for (int c = 0; c < k; c++) {
            best[t * k + c] = -1;
            for (int b = 0; b < c; b++) {
                if (best[(t - 1) * k + b] < 0 || !LAYERS(cuts[b] + 1, cuts[c] + 1))
                    continue;
                double stage = pre[cuts[c] + 1] - pre[cuts[b] + 1];
                double m = stage > best[(t - 1) * k + b] ? stage : best[(t - 1) * k + b];
                if (best[t * k + c] < 0 || m < best[t * k + c])
                    best[t * k + c] = m, from[t * k + c] = b;
            }
        }
    int end = -1;
    double top = -1;
    for (int c = 0; c < k; c++) {
        if (best[(P - 2) * k + c] < 0 || !LAYERS(cuts[c] + 1, s->n))
            continue;
        double last = pre[s->n] - pre[cuts[c] + 1];
        double m = last > best[(P - 2) * k + c] ? last : best[(P - 2) * k + c];
        if (top < 0 || m < top)
            top = m, end = c;
    }
#undef LAYERS
    for (int t = P - 2; t >= 0 && end >= 0; t--) {
        chosen[t] = cuts[end];
        end = from[t * k + end];
    }
    free(pre);
    free(best);
    free(from);
    return top;
}

/* Where an op's stage = k was written: the outermost call its scope
 * came from (a mark on a def's call reaches the ops inside), or the op. */
static kl_loc mark_loc(const ir_graph *g, const ir_node *n)
{
    for (int i = 0; n->scope && i < g->calls.n; i++) {
        size_t len = strlen(g->calls.v[i].scope);
        if (!strncmp(n->scope, g->calls.v[i].scope, len) && (!n->scope[len] || n->scope[len] == '.'))
            return g->calls.v[i].loc;
    }
    return n->loc;
}

/* Stage marks from the model file (stage = k on calls), if any: filled
 * into stage[] per position. Returns 1 when there are marks, 0 when none,
 * -1 after an error. */
static int explicit_stages(ir_graph *g, const stage_view *s, int P, int *stage)
{
    bool any = false;
    for (int p = 0; p < s->n && !any; p++)
        any = ir_attrs_find(&ir_nd(g, s->node[p])->attrs, "_stage") != NULL;
    if (!any)
        return 0;
    int cur = 0;
    for (int p = 0; p < s->n; p++) {
        const ir_node *n = ir_nd(g, s->node[p]);
        if (ir_attrs_find(&n->attrs, "_stage")) {
            int k = (int)ir_attr_int(&n->attrs, "_stage", 0);
            if (k >= P) {
                pass_error(g, mark_loc(g, n), "stage = %d, but pipeline_parallel = %d (stages are 0 to %d)", k, P, P - 1);
                return -1;
            }
            if (k < cur) {
                pass_error(g, mark_loc(g, n), "stage = %d comes after ops of stage %d: stages follow the forward program in order", k,
                           cur);
                return -1;
            }
            cur = k;
        }
        stage[p] = cur;
    }
    if (cur != P - 1) {
        pass_error(g, (kl_loc){0, 0}, "pipeline_parallel = %d, but the calls' stage = k marks make %d stage%s (mark the "
                   "first call of each stage 1 to %d)", P, cur + 1, cur ? "s" : "", P - 1);
        return -1;
    }
    return 1;
}

int pass_pipeline_stages(ir_graph *g, const pass_ctx *cx)
{
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    int P = cfg.pipeline_parallel > 1 ? cfg.pipeline_parallel : 1;
    int T = cfg.tensor_parallel > 1 ? cfg.tensor_parallel : 1;
    kl_pipe_schedule sched = cfg.pipeline_schedule;
    int v = cfg.pipeline_virtual;
    kl_train_config_free(&cfg);
    if (ir_attrs_find(&g->train, "pipeline_virtual_stages")) {
        if (sched != KL_PIPE_INTERLEAVED || P == 1) {
            pass_error(g, (kl_loc){0, 0}, "pipeline_virtual_stages = %d applies to pipeline_schedule = interleaved with "
                       "pipeline_parallel = 2 or more (this run: schedule %s, pipeline_parallel = %d)", v,
                       kl_pipe_schedule_name(sched), P);
            return -1;
        }
        if (v > KL_PIPE_VIRTUAL_MAX) {
            pass_error(g, (kl_loc){0, 0}, "pipeline_virtual_stages is at most %d (stages per pipeline rank)",
                       KL_PIPE_VIRTUAL_MAX);
            return -1;
        }
    }
    if (P == 1) {
        if (ir_attrs_find(&g->train, "pipeline_schedule")) {
            pass_error(g, (kl_loc){0, 0}, "pipeline_schedule = %s needs pipeline_parallel = 2 or more (this run has one stage)",
                       kl_pipe_schedule_name(sched));
            return -1;
        }
        return 0;
    }
    if (cx->ranks > 1 && (int64_t)cx->ranks % ((int64_t)P * T)) {
        pass_error(g, (kl_loc){0, 0}, "pipeline_parallel = %d x tensor_parallel = %d does not divide the world of %d ranks "
                   "(the world is stages x tensor-parallel x data-parallel ranks)", P, T, cx->ranks);
        return -1;
    }
    /* The ranks' stages; interleaved: v of them per rank, which is what
     * the cut makes (P below: the stages). */
    int ranks_P = P;
    P = kl_pipe_stage_count(P, sched, v);
    stage_view s = {0};
    view_build(g, &s);
    int *stage = kl_xcalloc((size_t)s.n + 1, sizeof *stage);
    int rc = explicit_stages(g, &s, P, stage);
    if (rc == 0) {
        int *cuts = kl_xcalloc((size_t)s.n + 1, sizeof *cuts), fewest = 0;
        int k = allowed_cuts(g, &s, 0, cuts, &fewest);
        int most = most_stages(&s, cuts, k);
        if (most >= P) {
            /* Cuts between whole calls, at the shallowest level whose
             * balance is within 5% of the best any cut gives. */
            int *chosen = kl_xcalloc((size_t)P, sizeof *chosen);
            double any = balance(&s, cuts, k, P, chosen);
            int depth = max_depth(g, &s);
            for (int d = 1; d <= depth; d++) {
                int kd = allowed_cuts(g, &s, d, cuts, &fewest);
                if (most_stages(&s, cuts, kd) >= P && balance(&s, cuts, kd, P, chosen) <= any * 1.05) {
                    k = kd;
                    break;
                }
                k = allowed_cuts(g, &s, 0, cuts, &fewest);
            }
            free(chosen);
        }
        if (most < P) {
            char want[160];
            if (P != ranks_P)
                snprintf(want, sizeof want, "pipeline_parallel = %d with pipeline_schedule = interleaved (%d virtual "
                         "stages per rank: %d stages)", ranks_P, v, P);
            else
                snprintf(want, sizeof want, "pipeline_parallel = %d", P);
            pass_error(g, (kl_loc){0, 0}, "%s, but model %s can be cut into at most %d stage%s with a "
                       "layer (GEMM, convolution or attention) each where the fewest values (%d) cross (lower "
                       "pipeline_parallel, or mark the stages with stage = k on calls)",
                       want, g->name, most, most == 1 ? "" : "s", fewest);
            rc = -1;
        } else {
            int *chosen = kl_xcalloc((size_t)P, sizeof *chosen);
            balance(&s, cuts, k, P, chosen);
            for (int p = 0, t = 0; p < s.n; p++) {
                stage[p] = t;
                if (t < P - 1 && p == chosen[t])
                    t++;
            }
            free(chosen);
        }
        free(cuts);
    }
    if (rc >= 0) {
        for (int p = 0; p < s.n; p++)
            ir_attrs_set_int(&ir_nd(g, s.node[p])->attrs, "_stage", stage[p]);
        /* Each param's stages: the first that reads it (_stage) and, when
         * several do (a tied embedding), the last (_stage_last). */
        for (int i = 0; i < g->decls.n; i++) {
            ir_value *pv = ir_val(g, g->decls.v[i]);
            int lo = P, hi = -1;
            for (int u = 0; u < pv->uses.n && pv->kind == IR_VAL_PARAM; u++) {
                int p = s.pos[pv->uses.v[u].node];
                if (p >= 0)
                    lo = stage[p] < lo ? stage[p] : lo, hi = stage[p] > hi ? stage[p] : hi;
            }
            if (hi >= 0)
                ir_attrs_set_int(&pv->attrs, "_stage", lo);
            if (hi > lo)
                ir_attrs_set_int(&pv->attrs, "_stage_last", hi);
        }
        rc = 0;
    }
    free(stage);
    view_free(&s);
    return rc;
}

int pass_pipeline_count(const ir_graph *g)
{
    int P = 0;
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (!n->dead && n->phase == IR_PHASE_FORWARD && ir_attrs_find(&n->attrs, "_stage")) {
            int k = (int)ir_attr_int(&n->attrs, "_stage", 0) + 1;
            P = k > P ? k : P;
        }
    }
    return P;
}

static void flops_text(char *out, size_t len, double f)
{
    static const char *const unit[] = {"", "k", "M", "G", "T"};
    int u = 0;
    while (f >= 1000 && u < 4)
        f /= 1000, u++;
    snprintf(out, len, "%.3g %sFLOP", f, unit[u]);
}

char *pass_pipeline_report(const ir_graph *g, int ranks)
{
    int P = pass_pipeline_count(g);
    if (P < 2)
        return NULL;
    stage_view s = {0};
    view_build(g, &s);
    /* Each forward op's stage: its _stage; an op a later pass made
     * (casts, reshapes the schedule may have moved) is in the stage of
     * its first reader, else of its operands. */
    int *stage = kl_xcalloc((size_t)s.n + 1, sizeof *stage);
    bool *marked = kl_xcalloc((size_t)s.n + 1, sizeof *marked);
    for (int p = s.n - 1; p >= 0; p--) {
        const ir_node *n = ir_nd(g, s.node[p]);
        marked[p] = ir_attrs_find(&n->attrs, "_stage") != NULL;
        stage[p] = marked[p] ? (int)ir_attr_int(&n->attrs, "_stage", 0) : -1;
        for (int i = 0; i < n->out.n && !marked[p]; i++) {
            const ir_value *v = ir_val(g, n->out.v[i]);
            for (int u = 0; u < v->uses.n; u++) {
                int r = s.pos[v->uses.v[u].node];
                if (r > p && stage[r] >= 0 && (stage[p] < 0 || stage[r] < stage[p]))
                    stage[p] = stage[r];
            }
        }
    }
    for (int p = 0; p < s.n; p++) {
        const ir_node *n = ir_nd(g, s.node[p]);
        for (int i = 0; i < n->in.n && stage[p] < 0; i++) {
            const ir_value *v = ir_val(g, n->in.v[i]);
            int d = v->def >= 0 ? s.pos[v->def] : -1;
            stage[p] = d >= 0 && d < p ? stage[d] : -1;
        }
        stage[p] = stage[p] < 0 ? 0 : stage[p] >= P ? P - 1 : stage[p];
    }
    double *flops = kl_xcalloc((size_t)P, sizeof *flops), total = 0, gemm = 0;
    int64_t *params = kl_xcalloc((size_t)P, sizeof *params), *pbytes = kl_xcalloc((size_t)P, sizeof *pbytes);
    int *first = kl_xcalloc((size_t)P, sizeof *first), *last = kl_xcalloc((size_t)P, sizeof *last);
    for (int t = 0; t < P; t++)
        first[t] = -1;
    for (int p = 0; p < s.n; p++) {
        if (ir_nd(g, s.node[p])->phase != IR_PHASE_FORWARD)
            continue;
        int t = stage[p];
        flops[t] += s.flops[p], total += s.flops[p];
        gemm += ir_nd(g, s.node[p])->op == IR_OP_MATMUL || ir_nd(g, s.node[p])->op == IR_OP_CONV2D ? s.flops[p] : 0;
        if (!marked[p])
            continue;
        if (first[t] < 0)
            first[t] = p;
        last[t] = p;
    }
    /* Params belong to the stage of their first reader; one read by
     * several stages is shared (its gradients summed between them). */
    kl_buf shared = {0};
    int *pstage = kl_xcalloc((size_t)g->values.n + 1, sizeof *pstage);
    for (int v = 0; v < g->values.n; v++)
        pstage[v] = -1;
    for (int i = 0; i < g->decls.n; i++) {
        int v = g->decls.v[i];
        const ir_value *pv = ir_val(g, v);
        if (pv->kind != IR_VAL_PARAM)
            continue;
        int lo = P, hi = -1;
        if (ir_attrs_find(&pv->attrs, "_stage")) {
            lo = (int)ir_attr_int(&pv->attrs, "_stage", 0);
            hi = (int)ir_attr_int(&pv->attrs, "_stage_last", lo);
        }
        for (int u = 0; u < pv->uses.n && hi < 0; u++) {
            int p = s.pos[pv->uses.v[u].node];
            if (p < 0)
                continue;
            lo = stage[p] < lo ? stage[p] : lo;
            hi = stage[p] > hi ? stage[p] : hi;
        }
        if (hi < 0 || lo >= P)
            continue;
        params[lo] += ir_type_numel(&pv->type);
        pbytes[lo] += ir_type_bytes(&pv->type);
        pstage[v] = lo;
        if (hi > lo)
            kl_buf_printf(&shared, "%s%s (stages %d to %d)", shared.s ? ", " : "", pv->name, lo, hi);
    }
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    int T = cfg.tensor_parallel > 1 ? cfg.tensor_parallel : 1;
    int64_t m = cfg.accumulate > 1 ? cfg.accumulate : 1;
    kl_buf b = {0};
    kl_buf_printf(&b, "# pipeline: %d stages, schedule %s, %lld micro-batch%s (accumulate)", P,
                  kl_pipe_schedule_name(cfg.pipeline_schedule), (long long)m, m == 1 ? "" : "es");
    /* interleaved: P stages on P / v ranks. */
    int rP = cfg.pipeline_parallel > 1 ? cfg.pipeline_parallel : 1;
    if (rP != P)
        kl_buf_printf(&b, "; %d virtual stages per rank (stage k on rank k mod %d)", P / rP, rP);
    if (ranks > 1)
        kl_buf_printf(&b, "; world %d = %d %s x %d tensor-parallel x %d data-parallel", ranks, rP,
                      rP != P ? "pipeline ranks" : "stages", T, ranks / (rP * T));
    kl_buf_puts(&b, "\n");
    double top = 0;
    for (int t = 0; t < P; t++) {
        char fl[32], pb[32];
        flops_text(fl, sizeof fl, flops[t]);
        kl_format_bytes(pb, sizeof pb, pbytes[t]);
        top = flops[t] > top ? flops[t] : top;
        const ir_node *a = first[t] >= 0 ? ir_nd(g, s.node[first[t]]) : NULL, *z = first[t] >= 0 ? ir_nd(g, s.node[last[t]]) : NULL;
        const char *an = a && a->out.n ? ir_val(g, a->out.v[0])->name : "-", *zn = z && z->out.n ? ir_val(g, z->out.v[0])->name : "-";
        kl_buf_printf(&b, "# pipeline: stage %d: %s .. %s, %s forward (%.1f%%), params %lld (%s)\n", t,
                      an, zn, fl,
                      total > 0 ? 100.0 * flops[t] / total : 0.0, (long long)params[t], pb);
    }
    /* A value crosses cut t | t + 1 when it is made in stage t or before
     * and read in a later stage than t (an input reaches it). */
    int *reach = kl_xcalloc((size_t)g->values.n + 1, sizeof *reach);
    for (int v = 0; v < g->values.n; v++)
        reach[v] = -1;
    for (int p = 0; p < s.n; p++) {
        const ir_node *nd = ir_nd(g, s.node[p]);
        for (int i = 0; i < nd->in.n; i++)
            reach[nd->in.v[i]] = stage[p] > reach[nd->in.v[i]] ? stage[p] : reach[nd->in.v[i]];
    }
    for (int t = 0; t + 1 < P; t++) {
        kl_buf_printf(&b, "# pipeline: cut %d|%d:", t, t + 1);
        int n = 0;
        int64_t bytes = 0;
        for (int p = 0; p < s.n; p++) {
            const ir_node *nd = ir_nd(g, s.node[p]);
            for (int i = 0; i < nd->out.n && stage[p] <= t; i++) {
                int v = nd->out.v[i];
                if (!s.varying[v] || reach[v] <= t)
                    continue;
                char vb[32], shape[96] = "";
                const ir_type *ty = &ir_val(g, v)->type;
                size_t at = 0;
                for (int d = 0; d < ty->rank && at + 24 < sizeof shape; d++)
                    at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", d ? ", " : "", (long long)ty->dim[d]);
                kl_format_bytes(vb, sizeof vb, ir_type_bytes(ty));
                bytes += ir_type_bytes(ty);
                kl_buf_printf(&b, "%s %s [%s] %s %s", n++ ? "," : "", ir_val(g, v)->name, shape, ir_dtype_name(ty->dtype), vb);
            }
        }
        char tb[32];
        kl_format_bytes(tb, sizeof tb, bytes);
        kl_buf_printf(&b, "%s (%d value%s, %s per micro-batch each way)\n", n ? "" : " nothing", n, n == 1 ? "" : "s", tb);
    }
    free(reach);
    /* After autodiff: each stage's memory against the schedules' formula.
     * Params and their state ("<param>.<what>", the optimizer's) by the
     * param's stage; saved activations: the stage's forward values that
     * backward reads, held once per micro-batch in flight (gpipe m, 1f1b
     * min(P - s, m) on stage s). */
    bool backward = false;
    for (int i = 0; i < g->nodes.n && !backward; i++)
        backward = !ir_nd(g, i)->dead && ir_nd(g, i)->phase == IR_PHASE_BACKWARD;
    if (backward) {
        int64_t *saved = kl_xcalloc((size_t)P, sizeof *saved), *state = kl_xcalloc((size_t)P, sizeof *state);
        for (int p = 0; p < s.n; p++) {
            const ir_node *nd = ir_nd(g, s.node[p]);
            for (int i = 0; i < nd->out.n; i++) {
                const ir_value *v = ir_val(g, nd->out.v[i]);
                bool read = false;
                for (int u = 0; u < v->uses.n && !read; u++) {
                    const ir_node *r = ir_nd(g, v->uses.v[u].node);
                    read = !r->dead && r->phase == IR_PHASE_BACKWARD;
                }
                if (read && !ir_op_is_view(nd->op))
                    saved[stage[p]] += ir_type_bytes(&v->type);
            }
        }
        for (int i = 0; i < g->decls.n; i++) {
            const ir_value *v = ir_val(g, g->decls.v[i]);
            if (v->kind != IR_VAL_STATE)
                continue;
            char *name = kl_xstrdup(v->name);
            int owner = -1;
            for (char *dot = strrchr(name, '.'); dot && owner < 0; dot = strrchr(name, '.')) {
                *dot = 0;
                int p = ir_find_value(g, name);
                owner = p >= 0 && pstage[p] >= 0 ? pstage[p] : -1;
            }
            free(name);
            state[owner >= 0 ? owner : 0] += ir_type_bytes(&v->type);
        }
        for (int t = 0; t < P; t++) {
            int64_t inflight = P - t < m ? P - t : m;
            char ps[32], ac[32], gp[32], fb[32];
            kl_format_bytes(ps, sizeof ps, pbytes[t] + state[t]);
            kl_format_bytes(ac, sizeof ac, saved[t]);
            kl_format_bytes(gp, sizeof gp, saved[t] * m);
            kl_format_bytes(fb, sizeof fb, saved[t] * inflight);
            if (rP != P)
                kl_buf_printf(&b, "# pipeline: memory stage %d: params and state %s; saved activations %s per micro-batch: "
                              "gpipe %lld x = %s (interleaved: the run's start-up lines give its slots)\n", t, ps, ac,
                              (long long)m, gp);
            else
                kl_buf_printf(&b, "# pipeline: memory stage %d: params and state %s; saved activations %s per micro-batch: "
                              "gpipe %lld x = %s, 1f1b %lld x = %s\n", t, ps, ac, (long long)m, gp, (long long)inflight, fb);
        }
        free(saved);
        free(state);
    }
    free(pstage);
    if (rP != P)
        kl_buf_printf(&b, "# pipeline: balance: the largest stage %.3f x the mean; bubble of interleaved (P-1)/(vm+P-1) = "
                      "%.3f (v = %d)\n", total > 0 ? top * P / total : 1.0,
                      (double)(rP - 1) / (double)(P / rP * m + rP - 1), P / rP);
    else
        kl_buf_printf(&b, "# pipeline: balance: the largest stage %.3f x the mean; bubble of gpipe and 1f1b (P-1)/(m+P-1) = "
                      "%.3f\n", total > 0 ? top * P / total : 1.0, (double)(P - 1) / (double)(m + P - 1));
    kl_buf_printf(&b, "# pipeline: forward FLOPs %.0f, of them matmul and conv2d %.0f\n", total,
                  gemm);
    if (shared.s)
        kl_buf_printf(&b, "# pipeline: shared params: %s\n", shared.s);
    kl_buf_free(&shared);
    kl_train_config_free(&cfg);
    free(flops);
    free(params);
    free(pbytes);
    free(first);
    free(last);
    free(stage);
    free(marked);
    view_free(&s);
    return kl_buf_take(&b);
}
