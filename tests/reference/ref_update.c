/* Reference functions of the optimizer updates and gradient
 * accumulation, which write persistent operands in place. */
#include "ref_ops.h"

/* ---- optimizer updates (operands: w, g, hyper, scale, state..., copy) ---- */

/* hyper = [lr, 1 - beta1^t, 1 - beta2^t, gradient multiplier]; scale 0
 * skips the step. The gradient an update uses is g x multiplier x scale. */
typedef struct update_args {
    double *w, *g, *hyper, scale;
    ir_dtype wt;
    int64_t n;
} update_args;

static update_args update_of(ref_eval *r, const ir_node *n)
{
    update_args u = {IN(r, n, 0), IN(r, n, 1), IN(r, n, 2), IN(r, n, 3)[0], TIN(r, n, 0)->dtype, numel(TIN(r, n, 0))};
    return u;
}

/* The low-precision copy of the weight, when the update has one (the last
 * operand, bf16 or f16). */
static void write_copy(ref_eval *r, const ir_node *n, int nstate, const update_args *u)
{
    if (n->in.n <= 4 + nstate)
        return;
    double *c = IN(r, n, 4 + nstate);
    for (int64_t i = 0; i < u->n; i++)
        c[i] = ref_round(TIN(r, n, 4 + nstate)->dtype, u->w[i]);
}

/* SGD: g' = g + wd w; with momentum m = mu m + g', d = nesterov ? g' + mu m : m;
 * w -= lr d */
void ref_SGD_UPDATE(ref_eval *r, const ir_node *n)
{
    update_args u = update_of(r, n);
    double mu = attr_f(n, "momentum", 0), wd = attr_f(n, "weight_decay", 0);
    bool nesterov = attr_i(n, "nesterov", 0);
    int nstate = mu > 0;
    double *m = nstate ? IN(r, n, 4) : NULL;
    if (u.scale != 0) {
        for (int64_t i = 0; i < u.n; i++) {
            double g = u.g[i] * u.hyper[3] * u.scale + wd * u.w[i], d = g;
            if (m) {
                m[i] = ref_round(TIN(r, n, 4)->dtype, mu * m[i] + g);
                d = nesterov ? g + mu * m[i] : m[i];
            }
            u.w[i] = ref_round(u.wt, u.w[i] - u.hyper[0] * d);
        }
    }
    write_copy(r, n, nstate, &u);
}

/* Adam: g' = g (+ wd w unless decoupled); m = b1 m + (1 - b1) g';
 * v = b2 v + (1 - b2) g'^2; u = (m / bc1) / (sqrt(v / bc2) + eps)
 * (+ wd w when decoupled); w -= lr u */
void ref_ADAM_UPDATE(ref_eval *r, const ir_node *n)
{
    update_args u = update_of(r, n);
    double b1 = attr_f(n, "beta1", 0.9), b2 = attr_f(n, "beta2", 0.999), eps = attr_f(n, "eps", 1e-8);
    double wd = attr_f(n, "weight_decay", 0);
    bool decoupled = attr_i(n, "decoupled", 1);
    double *m = IN(r, n, 4), *v = IN(r, n, 5);
    ir_dtype dm = TIN(r, n, 4)->dtype, dv = TIN(r, n, 5)->dtype;
    if (u.scale != 0) {
        for (int64_t i = 0; i < u.n; i++) {
            double g = u.g[i] * u.hyper[3] * u.scale + (decoupled ? 0 : wd * u.w[i]);
            m[i] = ref_round(dm, b1 * m[i] + (1 - b1) * g);
            v[i] = ref_round(dv, b2 * v[i] + (1 - b2) * g * g);
            double step = (m[i] / u.hyper[1]) / (sqrt(v[i] / u.hyper[2]) + eps) + (decoupled ? wd * u.w[i] : 0);
            u.w[i] = ref_round(u.wt, u.w[i] - u.hyper[0] * step);
        }
    }
    write_copy(r, n, 2, &u);
}

/* grad_accumulate(acc, g): acc = g on a step's first micro-batch
 * (step % steps == 0), acc += g after */
void ref_GRAD_ACCUMULATE(ref_eval *r, const ir_node *n)
{
    double *acc = IN(r, n, 0), *g = IN(r, n, 1);
    bool first = r->step % attr_i(n, "steps", 1) == 0;
    for (int64_t i = 0, m = numel(TIN(r, n, 0)); i < m; i++)
        acc[i] = ref_round(TIN(r, n, 0)->dtype, first ? g[i] : acc[i] + g[i]);
}
