/* The model summary: one row per call of the model file (a def call at
 * any depth, by its scope, with what it computes itself; the ops called
 * in the model block, by their line), with its
 * output's type, its params, the GEMM FLOPs (matmuls, convolutions) per
 * sample of its forward and backward steps, the bytes of its forward
 * results that the memory plan keeps in the arena for backward, and its
 * precision; then the totals, which are the plan's own: the params'
 * elements (a checkpoint's "param" elements), FLOPs per optimizer step
 * (kiln counters' gemm_flops), the arena and the persistent bytes (the
 * memory plan's). Kiln counts exactly where Keras and torchinfo estimate:
 * every number is read off the plan that runs. */
#include <stdlib.h>
#include <string.h>

#include "model_summary.h"
#include "passes/passes.h"

typedef struct row {
    char scope[160]; /* a def call's scope ("dense.1", "gpt.1.block.2"), or "" */
    int line;       /* the call's line in the model file (0: unknown) */
    char ops[64];   /* a model-block row: its ops ("cast,div") */
    int out;        /* its last forward result, or -1 */
    int64_t params;
    double fwd, bwd;
    int64_t act;
    int gemm_dtype; /* its first forward GEMM's result dtype, or -1 */
} row;

typedef KL_VEC(row) rows;

static int find_row(rows *r, const ir_graph *g, const char *scope, int line)
{
    for (int i = 0; i < r->n; i++)
        if (scope ? !strcmp(r->v[i].scope, scope) : !r->v[i].scope[0] && r->v[i].line == line)
            return i;
    row w = {.line = line, .out = -1, .gemm_dtype = -1};
    if (scope) {
        snprintf(w.scope, sizeof w.scope, "%s", scope);
        for (int i = 0; i < g->calls.n; i++)
            if (!strcmp(g->calls.v[i].scope, scope))
                w.line = g->calls.v[i].loc.line;
    }
    kl_vec_push(*r, w);
    return r->n - 1;
}

/* The row of node n (forward and backward nodes; -1 for the others). */
static int node_row(rows *r, const ir_graph *g, const ir_node *n)
{
    if (n->phase != IR_PHASE_FORWARD && n->phase != IR_PHASE_BACKWARD)
        return -1;
    if (n->scope)
        return find_row(r, g, n->scope, 0);
    return find_row(r, g, NULL, n->loc.line);
}

/* Adds op to a model-block row's list, once. */
static void add_op(row *w, const char *op)
{
    char have[sizeof w->ops + 2], probe[48];
    snprintf(have, sizeof have, ",%s,", w->ops);
    snprintf(probe, sizeof probe, ",%s,", op);
    size_t len = strlen(w->ops);
    if (!strstr(have, probe) && len + strlen(op) + 2 < sizeof w->ops)
        snprintf(w->ops + len, sizeof w->ops - len, "%s%s", len ? "," : "", op);
}

void kl_model_summary(const kl_plan *p, int64_t batch, int64_t accumulate, FILE *out)
{
    const ir_graph *g = p->g;
    rows r = {0};
    /* Rows in the order their forward nodes run. */
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = g->nodes.v[i];
        if (n->dead || n->phase != IR_PHASE_FORWARD || n->op == IR_OP_CONST)
            continue;
        int k = node_row(&r, g, n);
        if (!r.v[k].scope[0])
            add_op(&r.v[k], ir_op_name(n->op));
        r.v[k].out = n->out.v[0];
    }
    /* Params: a def call's by their scoped names (the longest scope that
     * prefixes the name), the model block's (and its layers' own,
     * batchnorm.1.gamma) by the line they were made at. */
    int64_t params = 0;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_PARAM)
            continue;
        int64_t numel = ir_type_numel(&v->type);
        params += numel;
        int k = -1;
        size_t best = 0;
        for (int j = 0; j < r.n; j++) {
            size_t len = strlen(r.v[j].scope);
            if (len > best && !strncmp(v->name, r.v[j].scope, len) && v->name[len] == '.') {
                k = j;
                best = len;
            }
        }
        if (k < 0)
            k = find_row(&r, g, NULL, v->loc.line);
        r.v[k].params += numel;
    }
    /* FLOPs of the GEMM steps, by the row of the node that made each. */
    int last_fwd = -1;
    double gemm_step = 0;
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *s = &p->steps.v[i];
        if (s->phase == IR_PHASE_FORWARD)
            last_fwd = i;
        if (s->kind != KL_STEP_GEMM)
            continue;
        gemm_step += (s->phase == IR_PHASE_UPDATE ? 1.0 : (double)accumulate) * s->flops;
        int k = s->node >= 0 ? node_row(&r, g, ir_nd(g, s->node)) : -1;
        if (k < 0)
            continue;
        *(s->phase == IR_PHASE_FORWARD ? &r.v[k].fwd : &r.v[k].bwd) += s->flops / (double)batch;
        if (s->phase == IR_PHASE_FORWARD && r.v[k].gemm_dtype < 0)
            r.v[k].gemm_dtype = (int)ir_val(g, ir_nd(g, s->node)->out.v[0])->type.dtype;
    }
    /* Saved activations: forward results in their own arena memory that
     * stay live after the last forward step (backward reads them). */
    int64_t persistent = 0, persistent_params = 0, saved = 0;
    for (int i = 0; i < p->buffers.n; i++) {
        const kl_buffer *b = &p->buffers.v[i];
        if (b->region == KL_REGION_PERSISTENT) {
            persistent += b->bytes;
            if (b->value >= 0 && ir_val(g, b->value)->kind == IR_VAL_PARAM)
                persistent_params += b->bytes;
            continue;
        }
        if (b->region != KL_REGION_ARENA || b->value < 0 || b->last <= last_fwd)
            continue;
        const ir_value *v = ir_val(g, b->value);
        if (v->def < 0 || ir_nd(g, v->def)->phase != IR_PHASE_FORWARD)
            continue;
        int k = node_row(&r, g, ir_nd(g, v->def));
        r.v[k].act += b->bytes;
        saved += b->bytes;
    }
    fprintf(out, "model summary: %s, batch %lld%s (FLOPs per sample: the GEMMs'; activations: forward results the "
                 "memory plan keeps for backward)\n",
            g->name, (long long)batch, pass_graph_ranks(g) > 1 ? ", this rank's values" : "");
    int w0 = 24;
    for (int i = 0; i < r.n; i++) {
        int len = (int)strlen(r.v[i].scope[0] ? r.v[i].scope : r.v[i].ops);
        w0 = len > w0 ? len : w0;
    }
    fprintf(out, "  %-*s %5s  %-22s %12s %14s %14s %12s  %s\n", w0, "call", "line", "output", "params", "fwd FLOPs",
            "bwd FLOPs", "activations", "precision");
    double fwd = 0, bwd = 0;
    for (int i = 0; i < r.n; i++) {
        const row *w = &r.v[i];
        char *type = w->out >= 0 ? ir_type_str(&ir_val(g, w->out)->type) : kl_xstrdup("-");
        /* The precision its GEMMs compute in, else its output's dtype. */
        const char *prec = w->gemm_dtype >= 0 ? ir_dtype_name((ir_dtype)w->gemm_dtype)
                           : w->out >= 0     ? ir_dtype_name(ir_val(g, w->out)->type.dtype)
                                             : "-";
        fprintf(out, "  %-*s %5d  %-22s %12lld %14.0f %14.0f %12lld  %s\n", w0, w->scope[0] ? w->scope : w->ops, w->line,
                type, (long long)w->params, w->fwd, w->bwd, (long long)w->act, prec);
        free(type);
        fwd += w->fwd;
        bwd += w->bwd;
    }
    fprintf(out, "  %-*s %5s  %-22s %12lld %14.0f %14.0f %12lld\n", w0, "total", "", "", (long long)params, fwd, bwd,
            (long long)saved);
    fprintf(out, "  per optimizer step (batch %lld x accumulate %lld): %.0f GEMM FLOPs\n", (long long)batch,
            (long long)accumulate, gemm_step);
    fprintf(out, "  memory plan: arena %lld bytes (activations, gradients and temporaries at their peak), "
                 "persistent %lld bytes (params %lld, optimizer and other state %lld)\n",
            (long long)p->arena_bytes, (long long)persistent, (long long)persistent_params,
            (long long)(persistent - persistent_params));
    kl_vec_free(r);
}

void kl_model_summary_ranks(const kl_plan *p, int world, FILE *out)
{
    const ir_graph *g = p->g;
    /* This rank's persistent values: its params (whole, or zero3's
     * slices of them), and the rest (optimizer state, statistics). */
    int64_t pel = 0, pbytes = 0, sbytes = 0;
    for (int i = 0; i < p->buffers.n; i++) {
        const kl_buffer *b = &p->buffers.v[i];
        if (b->region != KL_REGION_PERSISTENT || b->value < 0)
            continue;
        const ir_value *v = ir_val(g, b->value);
        if (v->kind == IR_VAL_PARAM || !strcmp(ir_attr_str(&v->attrs, "role", ""), "zero3_master")) {
            pel += b->numel;
            pbytes += b->bytes;
        } else {
            sbytes += b->bytes;
        }
    }
    fprintf(out, "  per rank (%d ranks, shard %s): params %lld elements (%lld bytes), optimizer and other state %lld "
                 "bytes, arena %lld bytes\n",
            world, ir_attr_str(&g->train, "shard", "none"), (long long)pel, (long long)pbytes, (long long)sbytes,
            (long long)p->arena_bytes);
    char *rm = pass_rank_memory(g, world);
    fprintf(out, "  memory %s\n", rm);
    free(rm);
}
