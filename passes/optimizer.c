/* optimizer: one update node per trained param.
 *
 * requires: autodiff (graph.grads)
 * provides: update nodes (phase update) for SGD with momentum and Nesterov,
 *           Adam and AdamW with weight decay; optimizer state as persistent
 *           zero-initialised state; global-norm gradient clipping as a
 *           scale computed on the device; the state %optimizer.hyper, f32[4]
 *           written by the runtime before every step: [lr from the schedule,
 *           1 - beta1^t, 1 - beta2^t, gradient multiplier]; with fp16, the
 *           inf/NaN check of the gradients that skips a step.
 *
 * The learning-rate schedule runs on the host (it is one number per step);
 * everything per element runs in the update kernels. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "ir/train_config.h"

static int declare_state(ir_graph *g, const char *param, const char *what, const ir_type *t)
{
    char *name = kl_xasprintf("%s.%s", param, what);
    ir_type st = *t;
    /* Optimizer state is fp32 even for low-precision params (f64 stays f64). */
    st.dtype = t->dtype == IR_F64 ? IR_F64 : IR_F32;
    int id = ir_declare(g, IR_VAL_STATE, name, &st, (kl_loc){0, 0});
    free(name);
    ir_attrs_set_str(&ir_val(g, id)->attrs, "init", "zeros");
    ir_attrs_set_str(&ir_val(g, id)->attrs, "role", "optimizer_state");
    return id;
}

/* The scale every update multiplies its gradient by, as one f32 scalar
 * computed on the device: with clipping, min(1, clip / (||g|| + 1e-6)) of
 * the unscaled gradients (||g|| of the raw gradients times the multiplier
 * hyper[3]); with fp16, 0 when any gradient is inf or NaN (the update
 * kernels then skip the step, and the runtime reads _grads_finite to back
 * off the loss scale); else the constant 1. */
static int update_scale(ir_graph *g, const kl_train_config *c, int hyper)
{
    bool clip = c->clip > 0, check = c->precision == KL_PREC_FP16;
    if (!g->grads.n || (!clip && !check))
        return ir_emit_const(g, 1.0, IR_F32);
    int total = -1;
    for (int i = 0; i < g->grads.n; i++) {
        int d = g->grads.v[i].grad;
        if (ir_val(g, d)->type.dtype != IR_F32) {
            ir_attrs a = {0};
            ir_attrs_set_str(&a, "to", "f32");
            d = ir_emit(g, IR_OP_CAST, &d, 1, &a, NULL);
            ir_attrs_free(&a);
        }
        int sq = ir_emit1(g, IR_OP_SUM, ir_emit2(g, IR_OP_MUL, d, d, NULL), NULL);
        sq = pass_tp_norm_share(g, sq, g->grads.v[i].param);
        total = total < 0 ? sq : ir_emit2(g, IR_OP_ADD, total, sq, NULL);
    }
    total = pass_tp_norm_sum(g, total);
    int scale = -1;
    if (clip) {
        ir_attrs a = {0};
        ir_attrs_set_int(&a, "axis", 0);
        ir_attrs_set_int(&a, "start", 3);
        ir_attrs_set_int(&a, "end", 4);
        int gm = ir_emit(g, IR_OP_SLICE, &hyper, 1, &a, NULL);
        ir_attrs_free(&a);
        ir_attrs_set_ints(&a, "shape", NULL, 0);
        gm = ir_emit(g, IR_OP_RESHAPE, &gm, 1, &a, NULL);
        ir_attrs_free(&a);
        int norm = ir_emit2(g, IR_OP_MUL, ir_emit1(g, IR_OP_SQRT, total, NULL), gm, "grad_norm");
        int denom = ir_emit2(g, IR_OP_ADD, norm, ir_emit_const(g, 1e-6, IR_F32), NULL);
        int ratio = ir_emit2(g, IR_OP_DIV, ir_emit_const(g, c->clip, IR_F32), denom, NULL);
        scale = ir_emit2(g, IR_OP_MINIMUM, ir_emit_const(g, 1.0, IR_F32), ratio, "clip_scale");
    }
    if (check) {
        int finite = ir_emit1(g, IR_OP_ISFINITE, total, "grads_finite");
        ir_report r = {kl_xstrdup("_grads_finite"), finite, false};
        kl_vec_push(g->reports, r);
        scale = scale < 0 ? finite : ir_emit2(g, IR_OP_MINIMUM, finite, scale, "update_scale");
    }
    return scale;
}

int pass_optimizer(ir_graph *g, const pass_ctx *cx)
{
    (void)cx;
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    int first = g->nodes.n;
    ir_type hyper_t = {IR_F32, 1, {4}};
    int hyper = ir_declare(g, IR_VAL_STATE, "optimizer.hyper", &hyper_t, (kl_loc){0, 0});
    ir_attrs_set_str(&ir_val(g, hyper)->attrs, "init", "zeros");
    ir_attrs_set_str(&ir_val(g, hyper)->attrs, "role", "hyper");
    int scale = update_scale(g, &cfg, hyper);

    for (int i = 0; i < g->grads.n; i++) {
        int p = g->grads.v[i].param, d = g->grads.v[i].grad;
        ir_value *pv = ir_val(g, p);
        char *pname = kl_xstrdup(pv->name);
        ir_type pt = pv->type;
        double wd = ir_attr_int(&pv->attrs, "decay", 1) ? cfg.opt.weight_decay : 0.0;
        ir_attrs a = {0};
        int args[6] = {p, d, hyper, scale};
        int nargs = 4;
        ir_op op;
        if (cfg.opt.kind == KL_OPT_SGD) {
            op = IR_OP_SGD_UPDATE;
            ir_attrs_set_float(&a, "momentum", cfg.opt.momentum);
            ir_attrs_set_int(&a, "nesterov", cfg.opt.nesterov);
            ir_attrs_set_float(&a, "weight_decay", wd);
            if (cfg.opt.momentum > 0)
                args[nargs++] = declare_state(g, pname, "momentum", &pt);
        } else {
            op = IR_OP_ADAM_UPDATE;
            ir_attrs_set_float(&a, "beta1", cfg.opt.beta1);
            ir_attrs_set_float(&a, "beta2", cfg.opt.beta2);
            ir_attrs_set_float(&a, "eps", cfg.opt.eps);
            ir_attrs_set_float(&a, "weight_decay", wd);
            ir_attrs_set_int(&a, "decoupled", cfg.opt.kind == KL_OPT_ADAMW);
            args[nargs++] = declare_state(g, pname, "adam_m", &pt);
            args[nargs++] = declare_state(g, pname, "adam_v", &pt);
        }
        ir_emit(g, op, args, nargs, &a, NULL);
        ir_nd(g, g->nodes.n - 1)->loc = pv->loc;
        ir_attrs_free(&a);
        free(pname);
    }
    for (int k = first; k < g->nodes.n; k++)
        ir_nd(g, k)->phase = IR_PHASE_UPDATE;
    kl_train_config_free(&cfg);
    return 0;
}
