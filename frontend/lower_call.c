/* Lowering calls: a def's call is inlined (its body evaluated in a frame of
 * its own, its params named by the call path), an op's call becomes a node
 * (positional arguments fill operands, then attributes), and the built-ins
 * (casts, channels, dim) are evaluated here. See lower.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_state.h"

/* ---- calls ---- */

void lower_eval_args(lower *L, frame *f, const ast_expr *e, call_args *ca)
{
    memset(ca, 0, sizeof *ca);
    for (const ast_arg *a = e->args; a; a = a->next) {
        if (!a->name) {
            if (ca->nkw)
                lower_fail_at(L, a->loc, "a positional argument follows keyword arguments");
            if (ca->npos == 32)
                lower_fail_at(L, a->loc, "too many arguments");
            ca->pos_loc[ca->npos] = a->loc;
            ca->pos[ca->npos++] = lower_eval(L, f, a->value);
        } else {
            for (int i = 0; i < ca->nkw; i++)
                if (!strcmp(ca->kw[i]->name, a->name))
                    lower_fail_at(L, a->loc, "argument '%s' is given twice", a->name);
            if (ca->nkw == 32)
                lower_fail_at(L, a->loc, "too many arguments");
            ca->kw[ca->nkw] = a;
            ca->kwval[ca->nkw++] = lower_eval(L, f, a->value);
        }
    }
}

/* Takes a "precision = fp32|bf16|fp16" keyword out of the arguments: it
 * asks that the call's ops run in that precision (passes/precision.c).
 * Returns the dtype name, or NULL when the call has none. */
static const char *take_precision(lower *L, call_args *ca)
{
    for (int i = 0; i < ca->nkw; i++) {
        if (strcmp(ca->kw[i]->name, "precision"))
            continue;
        const lv *v = &ca->kwval[i];
        const char *dt = NULL;
        if (v->kind == LV_STR && v->word)
            dt = !strcmp(v->s, "fp32") ? "f32" : !strcmp(v->s, "bf16") ? "bf16" : !strcmp(v->s, "fp16") ? "f16" : NULL;
        if (!dt)
            lower_fail_at(L, v->loc, "precision must be fp32, bf16 or fp16");
        /* A call may keep fp32 in any run, or ask for the run's own low
         * precision; another low precision would be ignored, so it is
         * refused (the train block's precision, or --precision, sets the
         * run's, and with it loss scaling and the params' copies). */
        const char *run = ir_attr_str(&L->g->train, "precision", "fp32");
        if (strcmp(dt, "f32") && strcmp(v->s, run))
            lower_fail_at(L, v->loc, "precision = %s on a call needs a %s run (precision = %s in the train block, or --precision %s); this run is %s",
                    v->s, v->s, v->s, v->s, run);
        memmove(&ca->kw[i], &ca->kw[i + 1], sizeof(ca->kw[0]) * (size_t)(ca->nkw - i - 1));
        memmove(&ca->kwval[i], &ca->kwval[i + 1], sizeof(ca->kwval[0]) * (size_t)(ca->nkw - i - 1));
        ca->nkw--;
        return dt;
    }
    return NULL;
}

/* Takes a "split = column|row" keyword out of the arguments: a
 * tensor-parallel split of the call's matmul (passes/shard_tp.c). Returns
 * "column" or "row" (and its location in *loc), or NULL when there is none. */
static const char *take_split(lower *L, call_args *ca, kl_loc *loc)
{
    for (int i = 0; i < ca->nkw; i++) {
        if (strcmp(ca->kw[i]->name, "split"))
            continue;
        const lv *v = &ca->kwval[i];
        const char *s = v->kind == LV_STR && v->word && (!strcmp(v->s, "column") || !strcmp(v->s, "row")) ? v->s : NULL;
        if (!s)
            lower_fail_at(L, v->loc, "split must be column or row");
        *loc = ca->kw[i]->loc;
        memmove(&ca->kw[i], &ca->kw[i + 1], sizeof(ca->kw[0]) * (size_t)(ca->nkw - i - 1));
        memmove(&ca->kwval[i], &ca->kwval[i + 1], sizeof(ca->kwval[0]) * (size_t)(ca->nkw - i - 1));
        ca->nkw--;
        return s;
    }
    return NULL;
}

/* Takes a "stage = k" keyword out of the arguments: an explicit pipeline
 * stage for the call's ops (passes/pipeline_stages.c). Returns k, or -1
 * when there is none. */
static int take_stage(lower *L, call_args *ca)
{
    for (int i = 0; i < ca->nkw; i++) {
        if (strcmp(ca->kw[i]->name, "stage"))
            continue;
        const lv *v = &ca->kwval[i];
        if (v->kind != LV_NUM || !v->is_int || v->i < 0 || v->i > 4095)
            lower_fail_at(L, v->loc, "stage must be a whole number from 0 to 4095 (the pipeline stage of the call)");
        int k = (int)v->i;
        memmove(&ca->kw[i], &ca->kw[i + 1], sizeof(ca->kw[0]) * (size_t)(ca->nkw - i - 1));
        memmove(&ca->kwval[i], &ca->kwval[i + 1], sizeof(ca->kwval[0]) * (size_t)(ca->nkw - i - 1));
        ca->nkw--;
        return k;
    }
    return -1;
}

/* stage = k on a call: every op it emitted (nodes [first, ...)) that no
 * inner call placed carries _stage = k. */
static void mark_stage(lower *L, int first, int stage)
{
    for (int i = first; stage >= 0 && i < L->g->nodes.n; i++)
        if (!ir_attrs_find(&ir_nd(L->g, i)->attrs, "_stage"))
            ir_attrs_set_int(&ir_nd(L->g, i)->attrs, "_stage", stage);
}

/* split = column|row on a def's call: the one matmul of the inlined body
 * whose right operand is a param (nodes [first, ...)) carries it. */
static void mark_split(lower *L, const ast_def *d, int first, const char *split, kl_loc loc)
{
    ir_node *m = NULL;
    int count = 0;
    for (int i = first; i < L->g->nodes.n; i++) {
        ir_node *n = ir_nd(L->g, i);
        if (n->op == IR_OP_MATMUL && ir_val(L->g, n->in.v[1])->kind == IR_VAL_PARAM)
            m = n, count++;
    }
    if (count != 1)
        lower_fail_at(L, loc, "split = %s needs exactly one matmul by a param in the call of %s, which has %d "
                      "(split a matmul itself: matmul(x, w, split = %s))", split, d->name, count, split);
    ir_attrs_set_str(&m->attrs, "split", split);
    /* The matmul's errors (and dumps) point at the annotated call. */
    m->loc = loc;
}

/* True when the train block's keep_fp32 lists def name. */
static bool kept_fp32(lower *L, const char *name)
{
    ir_attr *a = ir_attrs_find(&L->g->train, "keep_fp32");
    for (int i = 0; a && a->val.kind == IR_ATTR_LIST && i < a->val.nitems; i++)
        if (a->val.items[i].kind == IR_ATTR_STR && !strcmp(a->val.items[i].s, name))
            return true;
    return false;
}

static void check_param_type(lower *L, frame *callee, const ast_param *p, const lv *arg, const ast_def *d);

static lv call_def(lower *L, frame *f, const ast_expr *e, const ast_def *d)
{
    for (frame *c = f; c; c = c->caller) {
        if (c->def == d) {
            kl_error_at(L->src, e->loc, "recursive call of '%s' (defs are inlined, so recursion never ends)", d->name);
            kl_note_at(L->src, d->loc, "'%s' is defined here", d->name);
            lower_bail(L);
        }
    }
    if (f->depth >= MAX_CALL_DEPTH)
        lower_fail_at(L, e->loc, "calls nested more than %d deep", MAX_CALL_DEPTH);
    bool seen = false;
    for (int i = 0; i < L->called.n && !seen; i++)
        seen = L->called.v[i] == d;
    if (!seen)
        kl_vec_push(L->called, d);
    call_args ca;
    lower_eval_args(L, f, e, &ca);
    bool has_precision_param = false, has_split_param = false, has_stage_param = false;
    for (const ast_param *p = d->params; p; p = p->next) {
        has_precision_param |= !strcmp(p->name, "precision");
        has_split_param |= !strcmp(p->name, "split");
        has_stage_param |= !strcmp(p->name, "stage");
    }
    int stage = has_stage_param ? -1 : take_stage(L, &ca);
    const char *precision = has_precision_param ? NULL : take_precision(L, &ca);
    kl_loc split_loc = {0, 0};
    const char *split = has_split_param ? NULL : take_split(L, &ca, &split_loc);
    int first_node = L->g->nodes.n;
    int nparams = 0;
    for (const ast_param *p = d->params; p; p = p->next)
        nparams++;
    if (ca.npos > nparams) {
        kl_error_at(L->src, ca.pos_loc[nparams], "%s takes %d argument%s, got %d", d->name, nparams,
                    nparams == 1 ? "" : "s", ca.npos);
        kl_note_at(L->src, d->loc, "'%s' is defined here", d->name);
        lower_bail(L);
    }
    frame *callee = kl_arena_alloc(&L->arena, sizeof *callee);
    int k = lower_next_instance(L, f, d->name);
    char *path = f->path ? kl_xasprintf("%s.%s.%d", f->path, d->name, k) : kl_xasprintf("%s.%d", d->name, k);
    callee->path = kl_arena_strdup(&L->arena, path);
    free(path);
    callee->def = d;
    callee->caller = f;
    callee->depth = f->depth + 1;
    callee->precision = precision ? precision : kept_fp32(L, d->name) ? "f32" : f->precision;
    callee->call_loc = e->loc;
    ir_call call = {kl_xstrdup(callee->path), e->loc};
    kl_vec_push(L->g->calls, call);
    for (int i = 0; i < ca.nkw; i++) {
        int idx = 0;
        const ast_param *p;
        for (p = d->params; p && strcmp(p->name, ca.kw[i]->name); p = p->next)
            idx++;
        if (!p) {
            kl_error_at(L->src, ca.kw[i]->loc, "%s has no parameter '%s'", d->name, ca.kw[i]->name);
            kl_note_at(L->src, d->loc, "'%s' is defined here", d->name);
            lower_bail(L);
        }
        if (idx < ca.npos)
            lower_fail_at(L, ca.kw[i]->loc, "argument '%s' of %s is given twice", p->name, d->name);
    }
    int idx = 0;
    for (const ast_param *p = d->params; p; p = p->next, idx++) {
        lv arg;
        bool have = false;
        if (idx < ca.npos) {
            arg = ca.pos[idx];
            have = true;
        }
        for (int i = 0; i < ca.nkw && !have; i++)
            if (!strcmp(ca.kw[i]->name, p->name))
                arg = ca.kwval[i], have = true;
        if (!have && p->dflt) {
            const frame *at = L->at;
            L->at = callee;
            arg = lower_eval(L, callee, p->dflt);
            L->at = at;
            have = true;
        }
        if (!have) {
            kl_error_at(L->src, e->loc, "%s needs argument '%s'", d->name, p->name);
            kl_note_at(L->src, p->loc, "'%s' is declared here", p->name);
            lower_bail(L);
        }
        if (p->type)
            check_param_type(L, callee, p, &arg, d);
        lower_bind(L, callee, p->name, arg);
    }
    const frame *at = L->at;
    L->at = callee;
    lv r = lower_exec_body(L, callee, d->body);
    L->at = at;
    r.loc = e->loc;
    if (split)
        mark_split(L, d, first_node, split, split_loc);
    mark_stage(L, first_node, stage);
    return r;
}

/* Checks a def's argument against its annotation "x: f32[n, k]" (or
 * "x: f32[..., k]", any leading dimensions) and binds the annotation's
 * free dimension names to the argument's sizes. */
static void check_param_type(lower *L, frame *callee, const ast_param *p, const lv *arg, const ast_def *d)
{
    const ast_type *t = p->type;
    if (arg->kind != LV_TENSOR) {
        if (arg->kind == LV_STR && arg->word)
            lower_unknown_name(L, arg);
        lower_fail_at(L, arg->loc, "argument '%s' of %s must be a tensor, not %s", p->name, d->name, lower_kind_words(arg));
    }
    const ir_type *at = type_of(L, arg);
    if (t->dtype) {
        int dt = ir_dtype_from_name(t->dtype);
        if (dt < 0)
            lower_fail_at(L, t->loc, "unknown dtype '%s' (expected u8, i32, i64, f16, bf16, f32 or f64)", t->dtype);
        if (dt != (int)at->dtype)
            lower_fail_at(L, arg->loc, "argument '%s' of %s must be %s, got %s", p->name, d->name, t->dtype,
                    ir_dtype_name(at->dtype));
    }
    if (!t->has_dims)
        return;
    int rank = 0;
    for (const ast_arg *a = t->dims; a; a = a->next)
        rank++;
    char *ts = ir_type_str(at);
    char msg[160];
    snprintf(msg, sizeof msg, "%s", ts);
    free(ts);
    if (t->any_leading && at->rank < rank)
        lower_fail_at(L, arg->loc, "argument '%s' of %s must have rank %d or more, got %s", p->name, d->name, rank, msg);
    if (!t->any_leading && rank != at->rank)
        lower_fail_at(L, arg->loc, "argument '%s' of %s must have rank %d, got %s", p->name, d->name, rank, msg);
    /* [..., k]: the named dims are the argument's last ones */
    int i = at->rank - rank;
    for (const ast_arg *a = t->dims; a; a = a->next, i++) {
        const ast_expr *de = a->value;
        if (de->kind == AST_IDENT && !lower_lookup(callee, de->s) && strcmp(de->s, "batch")) {
            lower_bind(L, callee, de->s, num_lv((double)at->dim[i], true, de->loc));
            continue;
        }
        lv dv = lower_eval(L, callee, de);
        int64_t want = lower_as_dim(L, &dv, "a dimension");
        if (want != at->dim[i])
            lower_fail_at(L, arg->loc, "argument '%s' of %s: dimension %d must be %lld, got %s", p->name,
                    d->name, i, (long long)want, msg);
    }
}

/* The dtype of a call's number operands: the first floating-point tensor
 * operand's (where(label == 3, w, 0) makes 0 w's dtype, not label's),
 * else the first tensor's, else f32. */
static ir_dtype first_float_dtype(lower *L, const call_args *ca)
{
    for (int i = 0; i < ca->npos; i++)
        if (ca->pos[i].kind == LV_TENSOR && ir_dtype_is_float(type_of(L, &ca->pos[i])->dtype))
            return type_of(L, &ca->pos[i])->dtype;
    for (int i = 0; i < ca->npos; i++)
        if (ca->pos[i].kind == LV_TENSOR)
            return type_of(L, &ca->pos[i])->dtype;
    return IR_F32;
}

/* Parameters a layer op creates when called with just its input:
 * batchnorm(x) and layernorm(x). */
static int implicit_param(lower *L, const char *prefix, const char *name, ir_value_kind kind,
                          int64_t c, ir_dtype dt, const char *init, kl_loc loc)
{
    char *full = kl_xasprintf("%s.%s", prefix, name);
    ir_type t = {dt, 1, {c}};
    int id = ir_declare(L->g, kind, full, &t, loc);
    free(full);
    ir_attrs_set_str(&ir_val(L->g, id)->attrs, "init", init);
    return id;
}

/* cross_entropy and accuracy over the last axis of logits of any rank:
 * logits [d1, ..., dn, C] with labels [d1, ..., dn] become the op's
 * [N, C] and [N] (N = d1 ... dn) through reshapes, which are views. */
static void flatten_logits(lower *L, frame *f, const ast_expr *e, ir_op op, int *in)
{
    const ir_type *lt = &ir_val(L->g, in[0])->type, *yt = &ir_val(L->g, in[1])->type;
    if (lt->rank <= 2 && yt->rank <= 1)
        return;
    bool ok = lt->rank >= 2 && yt->rank == lt->rank - 1;
    for (int i = 0; ok && i < yt->rank; i++)
        ok = yt->dim[i] == lt->dim[i];
    if (!ok) {
        char *ls = ir_type_str(lt), *ys = ir_type_str(yt);
        char lb[96], yb[96];
        snprintf(lb, sizeof lb, "%s", ls);
        snprintf(yb, sizeof yb, "%s", ys);
        free(ls);
        free(ys);
        lower_fail_at(L, e->loc, "%s: labels must have the shape of the logits without their last axis "
                      "(logits [..., C], labels [...]), got logits %s and labels %s", ir_op_name(op), lb, yb);
    }
    int64_t rows = ir_type_numel(yt), flat[2] = {rows, lt->dim[lt->rank - 1]};
    ir_attrs a = {0};
    ir_attrs_set_ints(&a, "shape", flat, 2);
    in[0] = lower_emit(L, f, IR_OP_RESHAPE, &in[0], 1, &a, e->loc);
    ir_attrs_set_ints(&a, "shape", flat, 1);
    in[1] = lower_emit(L, f, IR_OP_RESHAPE, &in[1], 1, &a, e->loc);
    ir_attrs_free(&a);
}

static lv call_op(lower *L, frame *f, const ast_expr *e, ir_op op)
{
    const ir_op_info *info = &ir_ops[op];
    call_args ca;
    lower_eval_args(L, f, e, &ca);
    const char *precision = take_precision(L, &ca);
    kl_loc split_loc = {0, 0};
    const char *split = take_split(L, &ca, &split_loc);
    int stage = take_stage(L, &ca), first_node = L->g->nodes.n;
    if (split && op != IR_OP_MATMUL)
        lower_fail_at(L, split_loc, "split = %s applies to matmul and to calls of defs with one matmul (dense), not to %s",
                      split, info->name);
    ir_dtype dt = first_float_dtype(L, &ca);
    int in[64], nin = 0;
    ir_attrs *attrs = &L->tmp_attrs;
    /* Positional arguments fill the operands the op needs, then optional
     * tensor operands, then attributes in the op table's order. */
    for (int i = 0; i < ca.npos; i++) {
        lv *a = &ca.pos[i];
        bool operand = nin < info->min_in ||
                       (a->kind == LV_TENSOR && (info->max_in < 0 || nin < info->max_in) && attrs->n == 0);
        if (operand) {
            if (nin == 64)
                lower_fail_at(L, a->loc, "%s: too many operands", info->name);
            char what[64];
            snprintf(what, sizeof what, "operand %d of %s", nin + 1, info->name);
            in[nin++] = lower_as_tensor(L, f, a, dt, what);
            continue;
        }
        if (a->kind == LV_TENSOR) {
            if (info->max_in >= 0 && nin >= info->max_in)
                lower_fail_at(L, a->loc, "%s takes %d tensor operand%s, got more", info->name, info->max_in,
                        info->max_in == 1 ? "" : "s");
            lower_fail_at(L, a->loc, "%s: a tensor cannot follow the attributes", info->name);
        }
        ir_attr at = {kl_xstrdup(""), {0}, a->loc};
        kl_vec_push(*attrs, at);
        lower_to_attr(L, a, info->name, &attrs->v[attrs->n - 1].val);
    }
    for (int i = 0; i < ca.nkw; i++) {
        const lv *a = &ca.kwval[i];
        if (a->kind == LV_TENSOR)
            lower_fail_at(L, ca.kw[i]->loc, "argument '%s' of %s must not be a tensor", ca.kw[i]->name, info->name);
        ir_attr at = {kl_xstrdup(ca.kw[i]->name), {0}, ca.kw[i]->loc};
        kl_vec_push(*attrs, at);
        lower_to_attr(L, a, info->name, &attrs->v[attrs->n - 1].val);
    }
    /* Layers that make their own parameters. */
    if ((op == IR_OP_BATCHNORM || op == IR_OP_LAYERNORM) && nin == 1) {
        const ir_type *x = &ir_val(L->g, in[0])->type;
        bool bn = op == IR_OP_BATCHNORM;
        if (!ir_dtype_is_float(x->dtype) || (bn && x->rank != 2 && x->rank != 4) || x->rank < 1) {
            char *ts = ir_type_str(x);
            char tbuf[96];
            snprintf(tbuf, sizeof tbuf, "%s", ts);
            free(ts);
            lower_fail_at(L, e->loc, "%s needs a float input of rank %s, got %s", info->name,
                    bn ? "2 or 4" : "1 or more", tbuf);
        }
        int64_t c = bn ? x->dim[1] : x->dim[x->rank - 1];
        int k = lower_next_instance(L, f, info->name);
        char *base = kl_xasprintf("%s.%d", info->name, k);
        char *prefix = lower_scoped(L, f, base);
        free(base);
        /* Scale, shift and statistics are f32 (f64 for f64 inputs). */
        ir_dtype pdt = x->dtype == IR_F64 ? IR_F64 : IR_F32;
        in[nin++] = implicit_param(L, prefix, "gamma", IR_VAL_PARAM, c, pdt, "ones", e->loc);
        in[nin++] = implicit_param(L, prefix, "beta", IR_VAL_PARAM, c, pdt, "zeros", e->loc);
        if (bn) {
            in[nin++] = implicit_param(L, prefix, "running_mean", IR_VAL_STATE, c, pdt, "zeros", e->loc);
            in[nin++] = implicit_param(L, prefix, "running_var", IR_VAL_STATE, c, pdt, "ones", e->loc);
        }
    }
    if (op == IR_OP_BATCHNORM && nin == 5)
        for (int i = 3; i < 5; i++)
            if (!ir_is_persistent(ir_val(L->g, in[i])))
                lower_fail_at(L, e->loc, "batchnorm: the running statistics (operands 4 and 5) must be declared, not computed");
    /* Check the operand count here so the message names the call. */
    if (nin < info->min_in || (info->max_in >= 0 && nin > info->max_in)) {
        if (info->min_in == info->max_in)
            lower_fail_at(L, e->loc, "%s takes %d tensor operand%s, got %d", info->name, info->min_in,
                    info->min_in == 1 ? "" : "s", nin);
        lower_fail_at(L, e->loc, "%s takes %d to %d tensor operands, got %d", info->name, info->min_in,
                info->max_in, nin);
    }
    if ((op == IR_OP_CROSS_ENTROPY || op == IR_OP_ACCURACY) && nin == 2)
        flatten_logits(L, f, e, op, in);
    if (precision)
        ir_attrs_set_str(attrs, "_precision", precision);
    if (split)
        ir_attrs_set_str(attrs, "split", split);
    int v = lower_emit(L, f, op, in, nin, attrs, e->loc);
    ir_attrs_free(attrs);
    mark_stage(L, first_node, stage);
    return tensor_lv(v, e->loc);
}

/* Calls that are neither defs nor ops: casts and shape queries. */
static bool call_builtin(lower *L, frame *f, const ast_expr *e, lv *out)
{
    int dt = ir_dtype_from_name(e->s);
    bool is_channels = !strcmp(e->s, "channels"), is_dim = !strcmp(e->s, "dim");
    if (dt < 0 && !is_channels && !is_dim)
        return false;
    call_args ca;
    lower_eval_args(L, f, e, &ca);
    if (ca.nkw)
        lower_fail_at(L, ca.kw[0]->loc, "%s takes no keyword arguments", e->s);
    int want = is_dim ? 2 : 1;
    if (ca.npos != want)
        lower_fail_at(L, e->loc, "%s takes %d argument%s, got %d", e->s, want, want == 1 ? "" : "s", ca.npos);
    lv *x = &ca.pos[0];
    if (dt >= 0) {
        if (x->kind == LV_NUM) {
            *out = *x;
            return true;
        }
        int v = lower_as_tensor(L, f, x, IR_F32, "the operand of a cast");
        if (ir_val(L->g, v)->type.dtype == (ir_dtype)dt) {
            *out = *x;
            return true;
        }
        ir_attrs a = {0};
        ir_attrs_set_str(&a, "to", e->s);
        int r = lower_emit(L, f, IR_OP_CAST, &v, 1, &a, e->loc);
        ir_attrs_free(&a);
        *out = tensor_lv(r, e->loc);
        return true;
    }
    if (x->kind != LV_TENSOR) {
        if (x->kind == LV_STR && x->word)
            lower_unknown_name(L, x);
        lower_fail_at(L, x->loc, "%s needs a tensor, not %s", e->s, lower_kind_words(x));
    }
    const ir_type *t = type_of(L, x);
    double axis = 1;
    if (is_dim) {
        axis = lower_as_number(L, &ca.pos[1], "the axis");
        if (axis != floor(axis))
            lower_fail_at(L, ca.pos[1].loc, "the axis must be an integer");
    }
    /* Range-checked as a double: a huge axis must not reach an int. */
    if (axis < -t->rank || axis >= t->rank)
        lower_fail_at(L, e->loc, "%s: axis %g is out of range for rank %d", e->s, axis, t->rank);
    int ax = axis < 0 ? (int)axis + t->rank : (int)axis;
    *out = num_lv((double)t->dim[ax], true, e->loc);
    return true;
}

lv lower_call(lower *L, frame *f, const ast_expr *e)
{
    const ast_def *d = lower_find_def(L, e->s);
    if (d)
        return call_def(L, f, e, d);
    lv out;
    if (call_builtin(L, f, e, &out))
        return out;
    int op = ir_op_from_name(e->s);
    if (op >= 0 && (ir_ops[op].flags & IR_F_USER))
        return call_op(L, f, e, op);
    lower_fail_at(L, e->loc, "unknown function '%s'", e->s);
}
