/* Lowering statements: assignments, param and input declarations (with a
 * param's initializer and options), reports, return. See lower.c. */
#include <stdlib.h>
#include <string.h>

#include "lower_state.h"

/* ---- statements ---- */

/* Evaluates a declared type's dimensions to sizes. */
static void eval_type(lower *L, frame *f, const ast_type *t, ir_dtype dflt, ir_type *out, const char *what)
{
    out->dtype = dflt;
    if (t->dtype) {
        int dt = ir_dtype_from_name(t->dtype);
        if (dt < 0)
            lower_fail_at(L, t->loc, "unknown dtype '%s' (expected u8, i32, i64, f16, bf16, f32 or f64)", t->dtype);
        out->dtype = dt;
    } else if (dflt == IR_NONE) {
        lower_fail_at(L, t->loc, "%s needs a dtype, such as f32[...]", what);
    }
    if (!t->has_dims)
        lower_fail_at(L, t->loc, "%s needs a shape, such as [batch, 10]", what);
    if (t->any_leading)
        lower_fail_at(L, t->loc, "'...' (any leading dimensions) is only allowed in a def parameter's annotation; "
                      "%s needs its whole shape", what);
    out->rank = 0;
    int64_t total = 1;
    for (const ast_arg *a = t->dims; a; a = a->next) {
        if (out->rank == IR_MAX_RANK)
            lower_fail_at(L, a->loc, "more than %d dimensions", IR_MAX_RANK);
        lv d = lower_eval(L, f, a->value);
        if (d.kind == LV_STR && d.word)
            lower_fail_at(L, d.loc, "unknown dimension '%s'", d.s);
        int64_t n = lower_as_dim(L, &d, "a dimension");
        if (total > ((int64_t)1 << 40) / n) {
            /* Name the dimensions: one may come from a flag (--batch). */
            char dims[IR_MAX_RANK * 24 + 8] = "";
            size_t len = 0;
            for (int d = 0; d < out->rank; d++)
                len += (size_t)snprintf(dims + len, sizeof dims - len, "%lld, ", (long long)out->dim[d]);
            snprintf(dims + len, sizeof dims - len, "%lld%s", (long long)n, a->next ? ", ..." : "");
            lower_fail_at(L, a->loc, "%s is too large: [%s] passes 2^40 elements", what, dims);
        }
        total *= n;
        out->dim[out->rank++] = n;
    }
}

/* Initializers a param may name; the spec fills their defaults. */
static const struct {
    const char *name, *spec;
} inits[] = {
    {"zeros", ""},
    {"ones", ""},
    {"constant", "value:float"},
    {"normal", "mean:float=0 std:float=0.01"},
    {"uniform", "low:float=-0.05 high:float=0.05"},
    {"xavier", "gain:float=1"},
    {"kaiming", "gain:float=1.4142135623730951"},
};

static void param_init(lower *L, frame *f, const ast_arg *opt, ir_attrs *attrs, int rank)
{
    ir_attr_val *v = &L->tmp_val;
    kl_loc loc = opt ? opt->loc : (kl_loc){0, 0};
    if (!opt) {
        *v = ir_attr_val_str(rank >= 2 ? "xavier" : "zeros");
    } else {
        const ast_expr *e = opt->value;
        loc = e->loc;
        if (e->kind == AST_IDENT) {
            *v = ir_attr_val_str(e->s);
        } else if (e->kind == AST_CALL) {
            call_args ca;
            lower_eval_args(L, f, e, &ca);
            v->kind = IR_ATTR_CALL;
            v->s = kl_xstrdup(e->s);
            v->args = kl_xcalloc(1, sizeof *v->args);
            for (int i = 0; i < ca.npos + ca.nkw; i++) {
                bool pos = i < ca.npos;
                ir_attr at = {kl_xstrdup(pos ? "" : ca.kw[i - ca.npos]->name), {0},
                              pos ? ca.pos_loc[i] : ca.kw[i - ca.npos]->loc};
                kl_vec_push(*v->args, at);
                lower_to_attr(L, pos ? &ca.pos[i] : &ca.kwval[i - ca.npos], e->s, &v->args->v[i].val);
            }
        } else {
            lower_fail_at(L, e->loc, "init must name an initializer, such as kaiming or normal(std = 0.02)");
        }
    }
    size_t k;
    for (k = 0; k < KL_ARRAY_LEN(inits) && strcmp(inits[k].name, v->s); k++)
        ;
    if (k == KL_ARRAY_LEN(inits))
        lower_fail_at(L, loc, "unknown initializer '%s' (expected zeros, ones, constant, normal, uniform, xavier or kaiming)", v->s);
    if (v->kind == IR_ATTR_STR && inits[k].spec[0]) {
        /* A bare name: the call with its defaults, so the dump shows them. */
        v->kind = IR_ATTR_CALL;
        v->args = kl_xcalloc(1, sizeof *v->args);
    }
    if (v->kind == IR_ATTR_CALL) {
        char err[256];
        if (ir_spec_normalize(inits[k].spec, inits[k].name, v->args, err, sizeof err))
            lower_fail_at(L, loc, "%s", err);
        if (!v->args->n) {
            ir_attrs_free(v->args);
            free(v->args);
            v->args = NULL;
            v->kind = IR_ATTR_STR;
        }
    }
    ir_attrs_set(attrs, "init", *v);
    memset(v, 0, sizeof *v);
}

static void exec_param(lower *L, frame *f, const ast_stmt *s)
{
    if (lower_lookup(f, s->name) && lower_lookup(f, s->name)->val.kind == LV_TENSOR) {
        const ir_value *old = ir_val(L->g, lower_lookup(f, s->name)->val.v);
        if (old->kind == IR_VAL_PARAM && !strcmp(old->name, lower_scoped(L, f, s->name)))
            lower_fail_at(L, s->name_loc, "param '%s' is declared twice", s->name);
    }
    ir_type t;
    eval_type(L, f, s->type, IR_F32, &t, "a param");
    if (!ir_dtype_is_float(t.dtype))
        lower_fail_at(L, s->type->loc, "a param must have a float dtype (f16, bf16, f32 or f64), not %s",
                ir_dtype_name(t.dtype));
    const ast_arg *init = NULL;
    int decay = -1;
    for (const ast_arg *o = s->opts; o; o = o->next) {
        for (const ast_arg *q = s->opts; q != o; q = q->next)
            if (!strcmp(q->name, o->name))
                lower_fail_at(L, o->loc, "param option '%s' is given twice", o->name);
        if (!strcmp(o->name, "init")) {
            init = o;
        } else if (!strcmp(o->name, "decay")) {
            lv d = lower_eval(L, f, o->value);
            double x = lower_as_number(L, &d, "decay");
            if (x != 0 && x != 1)
                lower_fail_at(L, o->value->loc, "decay must be 0 or 1");
            decay = (int)x;
        } else {
            lower_fail_at(L, o->loc, "unknown param option '%s' (options: init, decay)", o->name);
        }
    }
    const char *name = lower_scoped(L, f, s->name);
    if (ir_find_value(L->g, name) >= 0)
        lower_fail_at(L, s->name_loc, "'%s' is already defined", s->name);
    int id = ir_declare(L->g, IR_VAL_PARAM, name, &t, s->loc);
    param_init(L, f, init, &ir_val(L->g, id)->attrs, t.rank);
    if (decay >= 0)
        ir_attrs_set_int(&ir_val(L->g, id)->attrs, "decay", decay);
    lower_bind(L, f, s->name, tensor_lv(id, s->name_loc));
}

static void exec_input(lower *L, frame *f, const ast_stmt *s)
{
    if (f->def)
        lower_fail_at(L, s->loc, "inputs are declared in the model block, not inside a def");
    if (lower_lookup(f, s->name))
        lower_fail_at(L, s->name_loc, "'%s' is already defined", s->name);
    ir_type t;
    eval_type(L, f, s->type, IR_NONE, &t, "an input");
    int id = ir_declare(L->g, IR_VAL_INPUT, s->name, &t, s->loc);
    lower_bind(L, f, s->name, tensor_lv(id, s->name_loc));
}

/* A metric's direction when its report does not say: a loss or an
 * error (by its name: loss, error, err, mse, mae, rmse, nll, perplexity,
 * ppl as a word of it) is better lower; anything else (an accuracy, a
 * score) higher. */
static bool lower_is_better_name(const char *name)
{
    static const char *const lower_words[] = {"loss", "error", "err", "mse", "mae", "rmse", "nll", "perplexity", "ppl"};
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "_");
        for (size_t i = 0; i < KL_ARRAY_LEN(lower_words); i++)
            if (strlen(lower_words[i]) == n && !strncmp(p, lower_words[i], n))
                return true;
        p += n;
        while (*p == '_')
            p++;
    }
    return false;
}

static void exec_report(lower *L, frame *f, const ast_stmt *s)
{
    if (f->def)
        lower_fail_at(L, s->loc, "report belongs in the model block, not inside a def");
    const char *name = s->name;
    if (!name) {
        if (s->value->kind != AST_CALL)
            lower_fail_at(L, s->value->loc, "name this metric: report NAME = ...");
        name = s->value->s;
    }
    for (int i = 0; i < L->g->reports.n; i++)
        if (!strcmp(L->g->reports.v[i].name, name))
            lower_fail_at(L, s->name ? s->name_loc : s->value->loc, "metric '%s' is reported twice", name);
    if (L->g->reports.n == IR_MAX_REPORTS)
        lower_fail_at(L, s->loc, "a model reports at most %d metrics ('%s' would be the %dth)", IR_MAX_REPORTS, name,
                      IR_MAX_REPORTS + 1);
    lv v = lower_eval(L, f, s->value);
    if (v.kind != LV_TENSOR || type_of(L, &v)->rank != 0)
        lower_fail_at(L, s->value->loc, "a reported metric must be a scalar tensor");
    bool lower_better = lower_is_better_name(name);
    for (const ast_arg *o = s->opts; o; o = o->next) {
        const ast_expr *x = o->value;
        if (strcmp(o->name, "better"))
            lower_fail_at(L, o->loc, "report has no option '%s' (its option: better = higher|lower)", o->name);
        if (x->kind != AST_IDENT || (strcmp(x->s, "higher") && strcmp(x->s, "lower")))
            lower_fail_at(L, x->loc, "better is higher or lower");
        lower_better = !strcmp(x->s, "lower");
    }
    /* The name is copied once every check passed (an error unwinds). */
    ir_report r = {kl_xstrdup(name), v.v, lower_better};
    kl_vec_push(L->g->reports, r);
}

/* output NAME = EXPR: binds NAME as an assignment does, and declares it
 * one of the model's outputs (per sample: its first dimension is the
 * batch), which --predict writes. */
static void exec_output(lower *L, frame *f, const ast_stmt *s)
{
    if (strcmp(s->word, "output"))
        lower_fail_at(L, s->loc, "'%s %s = ...' is no statement (an output is 'output %s = ...')", s->word, s->name,
                      s->name);
    if (f->def)
        lower_fail_at(L, s->loc, "output belongs in the model block, not inside a def");
    for (int i = 0; i < L->g->outputs.n; i++)
        if (!strcmp(L->g->outputs.v[i].name, s->name))
            lower_fail_at(L, s->name_loc, "output '%s' is declared twice", s->name);
    lv v = lower_eval(L, f, s->value);
    if (v.kind != LV_TENSOR || type_of(L, &v)->rank < 1)
        lower_fail_at(L, s->value->loc, "an output is a tensor whose first dimension is the batch");
    ir_report r = {kl_xstrdup(s->name), v.v, false};
    kl_vec_push(L->g->outputs, r);
    lower_bind(L, f, s->name, v);
}

/* Runs statements; returns what a return statement gave (LV_NONE when
 * there is none). */
lv lower_exec_body(lower *L, frame *f, const ast_stmt *body)
{
    for (const ast_stmt *s = body; s; s = s->next) {
        int first_new = L->g->values.n;
        switch (s->kind) {
        case AST_ASSIGN: {
            lv v = lower_eval(L, f, s->value);
            if (v.kind == LV_NONE)
                lower_fail_at(L, s->value->loc, "this call returns nothing");
            /* A value made by this statement takes the binding's name. */
            if (v.kind == LV_TENSOR && v.v >= first_new) {
                ir_rename_value(L->g, v.v, ir_unique_name(L->g, lower_scoped(L, f, s->name)));
            }
            lower_bind(L, f, s->name, v);
            break;
        }
        case AST_PARAM:
            exec_param(L, f, s);
            break;
        case AST_INPUT:
            exec_input(L, f, s);
            break;
        case AST_REPORT:
            exec_report(L, f, s);
            break;
        case AST_OUTPUT:
            exec_output(L, f, s);
            break;
        case AST_RETURN:
            if (!f->def)
                lower_fail_at(L, s->loc, "return is only allowed inside a def");
            if (s->next)
                lower_fail_at(L, s->next->loc, "statement after return");
            return lower_eval(L, f, s->value);
        }
    }
    return (lv){.kind = LV_NONE};
}
