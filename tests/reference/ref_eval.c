/* The reference evaluator (see ref_eval.h): runs the nodes in order
 * through a table of one function per op, built by re-including
 * ir/ops.def, so an op without a reference function does not build. The
 * functions live in ref_elem.c, ref_move.c, ref_nn.c and ref_update.c. */
#include "ref_ops.h"

#include "runtime/exec/session.h"

double ref_round(ir_dtype dt, double x)
{
    switch (dt) {
    case IR_F64:
        return x;
    case IR_F32:
        return (double)(float)x;
    case IR_BF16:
        return kl_bf16_to_f32(kl_f32_to_bf16((float)x));
    case IR_F16:
        return kl_f16_to_f32(kl_f32_to_f16((float)x));
    case IR_U8:
    case IR_I32:
    case IR_I64: {
        /* The kernels' conversion (kl_ftoi): toward zero, NaN -> 0,
         * saturating at i64's range; i32 and u8 keep the low bits. */
        int64_t v = x != x ? 0 : x >= 0x1p63 ? INT64_MAX : x < -0x1p63 ? INT64_MIN : (int64_t)x;
        return dt == IR_I64 ? (double)v : dt == IR_I32 ? (double)(int32_t)(uint32_t)v : (double)(uint8_t)v;
    }
    default:
        kl_panic("reference: no rounding for dtype %s", ir_dtype_name(dt));
    }
}

static void round_value(ref_eval *r, int v)
{
    ir_dtype dt = T(r, v)->dtype;
    for (int64_t i = 0, n = numel(T(r, v)); i < n; i++)
        r->v[v][i] = ref_round(dt, r->v[v][i]);
}

/* ---- the table, from the op row ---- */

typedef void (*ref_fn)(ref_eval *r, const ir_node *n);

static const ref_fn ref_table[IR_NOPS] = {
#define OP(id, ...) [IR_OP_##id] = ref_##id,
#include "ir/ops.def"
#undef OP
};

ref_eval *ref_new(const ir_graph *g)
{
    ref_eval *r = kl_xcalloc(1, sizeof *r);
    r->g = g;
    r->v = kl_xcalloc((size_t)g->values.n + 1, sizeof *r->v);
    r->steps = 1;
    return r;
}

void ref_free(ref_eval *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->g->values.n; i++)
        free(r->v[i]);
    free(r->v);
    free(r);
}

void ref_set(ref_eval *r, int v, const double *x)
{
    size_t n = (size_t)numel(T(r, v));
    free(r->v[v]);
    r->v[v] = kl_xmalloc(sizeof(double) * (n + 1));
    memcpy(r->v[v], x, sizeof(double) * n);
    round_value(r, v);
}

void ref_run(ref_eval *r, unsigned phase_mask)
{
    const ir_graph *g = r->g;
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        /* Start-up values are there before any run. */
        if (n->dead || !((phase_mask | (1u << IR_PHASE_STARTUP)) & (1u << n->phase)))
            continue;
        ref_table[n->op](r, n);
        for (int k = 0; k < n->out.n; k++)
            if (r->v[n->out.v[k]])
                round_value(r, n->out.v[k]);
    }
}

double *ref_mass(ref_eval *r, const ir_node *n)
{
    /* Linear in each operand with non-negative coefficients (matmul:
     * bilinear), so the same op over |operands| sums |terms|. */
    switch (n->op) {
    case IR_OP_SUM:
    case IR_OP_MEAN:
    case IR_OP_SUM_TO:
    case IR_OP_ADD:
    case IR_OP_MATMUL:
        break;
    default:
        return NULL;
    }
    if (n->out.n != 1)
        return NULL;
    int out = n->out.v[0];
    double *keep_out = r->v[out], **keep_in = kl_xcalloc((size_t)n->in.n + 1, sizeof *keep_in);
    for (int k = 0; k < n->in.n; k++) {
        int v = n->in.v[k];
        keep_in[k] = r->v[v];
        if (!keep_in[k])
            continue;
        int64_t m = numel(T(r, v));
        r->v[v] = kl_xmalloc(sizeof(double) * (size_t)(m + 1));
        for (int64_t i = 0; i < m; i++)
            r->v[v][i] = fabs(keep_in[k][i]);
    }
    bool complete = true;
    for (int k = 0; k < n->in.n; k++)
        complete = complete && keep_in[k];
    r->v[out] = NULL;
    if (complete)
        ref_table[n->op](r, n);
    double *mass = r->v[out];
    for (int k = n->in.n - 1; k >= 0; k--)
        if (r->v[n->in.v[k]] != keep_in[k]) {
            free(r->v[n->in.v[k]]);
            r->v[n->in.v[k]] = keep_in[k];
        }
    r->v[out] = keep_out;
    free(keep_in);
    return mass;
}
