/* Which cuBLASLt epilogue does the work of a GEMM's epilogue kernel.
 *
 * The fusion pass groups a matmul with its elementwise consumers
 * (pattern gemm_epilogue); plan.c lowers the group to a GEMM step and one
 * kernel step over its result. When that kernel computes exactly what one
 * CUBLASLT_EPILOGUE_* computes (bias add, ReLU, tanh GELU, GELU's
 * gradient, the bias gradient), the GEMM step records it (kl_gemm.epi) and
 * the kernel step is marked lt_covered: the CUDA backend then does it in
 * the GEMM's store and skips the kernel (runtime/backend_cuda_lt.c); the
 * CPU backend runs the kernel as before.
 *
 * Only what the epilogue computes exactly is taken: Kiln's default GELU is
 * the erf form and cuBLASLt's the tanh form, so only gelu(x, approximate
 * = "tanh") goes to cuBLASLt. ReLU's auxiliary output is a bit mask that
 * only cuBLASLt's DRELU reads (Kiln's relu_grad reads relu's result), so
 * RELU_AUX and DRELU are not used; nor BGRADA/BGRADB (the bias gradient
 * of an operand, which Kiln sums in the producer's epilogue instead).
 *
 * Requires of the GEMM: one call (batch 1, not accumulating, beta 0,
 * alpha 1), A, B and C of one dtype among f32, bf16 and f16; of the
 * group: C read only inside it (or as GELU_AUX's aux), every value it
 * stores is D, aux or the
 * bias gradient, each of C's dtype and shape (the bias: [n]); aux's
 * leading dimension (n) a multiple of 8, as cuBLASLt asks. */
#include <string.h>

#include "plan_build.h"

const char *plan_lt_epi_name(kl_lt_epi e)
{
    static const char *const names[KL_LT_NEPI] = {
        [KL_LT_NONE] = "none",           [KL_LT_BIAS] = "bias",
        [KL_LT_RELU] = "relu",           [KL_LT_RELU_BIAS] = "relu_bias",
        [KL_LT_GELU] = "gelu",           [KL_LT_GELU_BIAS] = "gelu_bias",
        [KL_LT_GELU_AUX] = "gelu_aux",   [KL_LT_GELU_AUX_BIAS] = "gelu_aux_bias",
        [KL_LT_DGELU] = "dgelu",         [KL_LT_DGELU_BGRAD] = "dgelu_bgrad",
    };
    return e >= 0 && e < KL_LT_NEPI ? names[e] : "?";
}

char *plan_lt_summary(const kl_plan *p)
{
    int count[KL_LT_NEPI] = {0}, gemms = 0, with = 0;
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *s = &p->steps.v[i];
        if (s->kind != KL_STEP_GEMM)
            continue;
        gemms++;
        with += s->gemm.epi.kind != KL_LT_NONE;
        count[s->gemm.epi.kind]++;
    }
    if (!with)
        return NULL;
    kl_buf b = {0};
    for (int e = KL_LT_NONE + 1; e < KL_LT_NEPI; e++)
        if (count[e])
            kl_buf_printf(&b, "%s%s %d", b.len ? ", " : "", plan_lt_epi_name((kl_lt_epi)e), count[e]);
    kl_buf_printf(&b, " (%d of %d GEMM steps)", with, gemms);
    return kl_buf_take(&b);
}

typedef struct matcher {
    const ir_graph *g;
    const cg_group *grp;
    const ir_type *c; /* the GEMM's result */
    int used;         /* group nodes the match accounts for */
} matcher;

/* The group's one node with op `op` that reads v as operand `operand`
 * (-1: any), or NULL. */
static const ir_node *reader(matcher *m, int v, ir_op op, int operand)
{
    for (int i = 0; i < m->grp->n; i++) {
        const ir_node *n = ir_nd(m->g, m->grp->nodes[i]);
        if (n->op != op)
            continue;
        for (int k = 0; k < n->in.n; k++)
            if (n->in.v[k] == v && (operand < 0 || k == operand))
                return n;
    }
    return NULL;
}

static bool like_c(matcher *m, int v)
{
    const ir_type *t = &ir_val(m->g, v)->type;
    return ir_type_eq(t, m->c);
}

/* v: read from outside the group, [n] of C's dtype (a bias along the
 * result's columns). */
static bool is_column_vector(matcher *m, int v)
{
    const ir_type *t = &ir_val(m->g, v)->type;
    return !cg_computed_inside(m->grp, v) && t->rank == 1 && t->dtype == m->c->dtype &&
           t->dim[0] == m->c->dim[m->c->rank - 1];
}

/* Only the group reads v. */
static bool internal(matcher *m, int v)
{
    return !cg_value_escapes(m->grp, v);
}

/* The buffer of v, which has one (a value the kernel step stores or
 * reads), or -1 for none (v < 0). */
static int buf(kl_plan *p, int v)
{
    return v < 0 ? -1 : plan_buffer_of(p, v);
}

/* Whether buffers a and b (-1: none) share memory. */
static bool same_memory(kl_plan *p, int a, int b)
{
    return a >= 0 && b >= 0 && plan_real_buffer(p, a) == plan_real_buffer(p, b);
}

/* The forward epilogues: [add(C, bias)] then [relu | tanh gelu]. The
 * matchers fill e with values; the caller makes them buffers. */
static kl_lt_epi match_forward(matcher *m, int cv, kl_gemm_epilogue *e)
{
    int x = cv;
    bool bias = false;
    const ir_node *add = reader(m, cv, IR_OP_ADD, -1);
    if (add) {
        if (!internal(m, cv))
            return KL_LT_NONE;
        int other = add->in.v[0] == cv ? add->in.v[1] : add->in.v[0];
        if (!is_column_vector(m, other) || !like_c(m, add->out.v[0]))
            return KL_LT_NONE;
        e->bias = other;
        x = add->out.v[0];
        bias = true;
        m->used++;
    }
    const ir_node *act = reader(m, x, IR_OP_RELU, 0);
    if (!act) {
        act = reader(m, x, IR_OP_GELU, 0);
        if (act && !ir_gelu_is_tanh(&act->attrs))
            return KL_LT_NONE; /* erf GELU: the generated kernel */
    }
    if (!act) {
        e->d = x;
        return bias ? KL_LT_BIAS : KL_LT_NONE;
    }
    if (!like_c(m, act->out.v[0]))
        return KL_LT_NONE;
    m->used++;
    e->d = act->out.v[0];
    if (internal(m, x))
        return act->op == IR_OP_RELU ? (bias ? KL_LT_RELU_BIAS : KL_LT_RELU) : (bias ? KL_LT_GELU_BIAS : KL_LT_GELU);
    /* GELU's operand is needed later (its gradient): the aux output (C
     * itself when there is no bias). */
    if (act->op != IR_OP_GELU || m->c->dim[m->c->rank - 1] % 8)
        return KL_LT_NONE;
    e->aux = x;
    return bias ? KL_LT_GELU_AUX_BIAS : KL_LT_GELU_AUX;
}

/* The backward epilogues: tanh gelu_grad(C, x), then maybe its column
 * sums (the bias gradient). */
static kl_lt_epi match_backward(matcher *m, int cv, kl_gemm_epilogue *e)
{
    const ir_node *dg = reader(m, cv, IR_OP_GELU_GRAD, 0);
    if (!dg || !internal(m, cv) || !ir_gelu_is_tanh(&dg->attrs) || dg->in.v[1] == cv || cg_computed_inside(m->grp, dg->in.v[1]) ||
        !like_c(m, dg->in.v[1]) || !like_c(m, dg->out.v[0]) || m->c->dim[m->c->rank - 1] % 8)
        return KL_LT_NONE;
    m->used++;
    int d = dg->out.v[0];
    e->d = d;
    e->aux = dg->in.v[1];
    for (int i = 0; i < m->grp->n; i++) {
        const ir_node *n = ir_nd(m->g, m->grp->nodes[i]);
        if (ir_is_column_sum(m->g, n) && n->in.v[0] == d) {
            if (ir_val(m->g, n->out.v[0])->type.dtype != m->c->dtype)
                return KL_LT_NONE;
            m->used++;
            e->bias = n->out.v[0];
            return KL_LT_DGELU_BGRAD;
        }
    }
    return KL_LT_DGELU;
}

void plan_match_lt_epilogue(kl_plan *p, int gemm, int kernel, const cg_group *grp)
{
    kl_gemm *gm = &p->steps.v[gemm].gemm;
    const ir_graph *g = p->g;
    const ir_node *mm = ir_nd(g, p->steps.v[gemm].node);
    int cv = mm->out.v[0];
    matcher m = {g, grp, &ir_val(g, cv)->type, 0};
    ir_dtype dt = gm->out_dtype;
    if (gm->batch != 1 || gm->accumulate || gm->beta != 0 || gm->alpha != 1 || gm->off_c || gm->dtype != dt ||
        (dt != IR_F32 && dt != IR_BF16 && dt != IR_F16))
        return;
    kl_gemm_epilogue e = {.kind = KL_LT_NONE, .bias = -1, .aux = -1, .d = -1};
    e.kind = match_backward(&m, cv, &e);
    if (e.kind == KL_LT_NONE) {
        e = (kl_gemm_epilogue){.kind = KL_LT_NONE, .bias = -1, .aux = -1, .d = -1};
        m.used = 0;
        e.kind = match_forward(&m, cv, &e);
    }
    /* Every node of the group accounted for (nothing else for the kernel
     * to do); then values to buffers (each has one: the kernel step reads
     * or stores it), and D written to memory of its own: not over the
     * bias or the aux buffer the epilogue reads or writes beside it. */
    if (e.kind == KL_LT_NONE || m.used != grp->n)
        return;
    e.d = buf(p, e.d), e.aux = buf(p, e.aux), e.bias = buf(p, e.bias);
    if (same_memory(p, e.d, e.aux) || same_memory(p, e.d, e.bias) || same_memory(p, e.aux, e.bias))
        return;
    gm->epi = e;
    p->steps.v[kernel].lt_covered = true;
}
