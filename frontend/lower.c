/* Lowering the syntax tree to the IR. See lower.h.
 *
 * Evaluation is direct: each expression is evaluated once, in order, to a
 * "lowered value" (a tensor in the graph, a compile-time number, a name or
 * a list). Calls of defs are inlined by evaluating the def's body in a new
 * frame. A user error reports file:line:col and unwinds through fail; the
 * arena and the half-built graph are freed there.
 *
 * This file holds the errors, the train block, the whole program and the
 * entry points; names, values and expressions are lower_expr.c, calls
 * lower_call.c, statements lower_stmt.c (lower_state.h: what they share). */
#include <stdlib.h>
#include <string.h>

#include "lower_state.h"
#include "ir/train_config.h"

/* ---- errors ---- */

/* Ends lowering after an error was reported. An error inside a def's
 * body points at a line of the def; as compilers do for inlined code,
 * notes name each call that led there, innermost first. */
KL_NORETURN void lower_bail(lower *L)
{
    for (const frame *f = L->at; f && f->def; f = f->caller)
        kl_note_at(L->src, f->call_loc, "'%s' is called from here", f->def->name);
    longjmp(L->fail, 1);
}

void lower_fail_at(lower *L, kl_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_verror_at(L->src, loc, fmt, ap);
    va_end(ap);
    lower_bail(L);
}

const char *lower_kind_words(const lv *v)
{
    switch (v->kind) {
    case LV_NONE: return "the result of a def with no return";
    case LV_TENSOR: return "a tensor";
    case LV_NUM: return "a number";
    case LV_STR: return v->word ? "a name" : "a string";
    case LV_LIST: return "a list";
    }
    return "?";
}

/* ---- the train block ---- */

/* Converts a train block value in place: out is already owned by the
 * graph, so an error part-way leaves nothing unowned. */
static void expr_to_attr(lower *L, const ast_expr *e, int depth, ir_attr_val *out)
{
    if (depth > 16)
        lower_fail_at(L, e->loc, "value nested too deeply");
    out->loc = e->loc;
    switch (e->kind) {
    case AST_NUM:
        *out = e->is_int ? ir_attr_val_int(e->ival) : ir_attr_val_float(e->num);
        break;
    case AST_STR:
    case AST_IDENT:
        *out = ir_attr_val_str(e->s);
        break;
    case AST_NEG:
    case AST_BINOP: {
        frame top = {0};
        lv n = lower_eval(L, &top, e);
        if (n.kind != LV_NUM)
            lower_fail_at(L, e->loc, "expected a number here");
        *out = n.is_int ? ir_attr_val_int(n.i) : ir_attr_val_float(n.f);
        break;
    }
    case AST_LIST: {
        int n = 0;
        for (ast_arg *a = e->args; a; a = a->next)
            n++;
        out->kind = IR_ATTR_LIST;
        out->items = kl_xcalloc((size_t)(n ? n : 1), sizeof *out->items);
        for (ast_arg *a = e->args; a; a = a->next)
            expr_to_attr(L, a->value, depth + 1, &out->items[out->nitems++]);
        break;
    }
    case AST_CALL:
        out->kind = IR_ATTR_CALL;
        out->s = kl_xstrdup(e->s);
        out->args = kl_xcalloc(1, sizeof *out->args);
        for (ast_arg *a = e->args; a; a = a->next) {
            ir_attr at = {kl_xstrdup(a->name ? a->name : ""), {0}, a->loc};
            kl_vec_push(*out->args, at);
            expr_to_attr(L, a->value, depth + 1, &out->args->v[out->args->n - 1].val);
        }
        break;
    }
    out->loc = e->loc;
}

static int lower_train(lower *L, const ast_block *train, const kl_lower_opts *opts)
{
    ir_attrs *t = &L->g->train;
    for (const ast_arg *a = train ? train->items : NULL; a; a = a->next) {
        ir_attr at = {kl_xstrdup(a->name), {0}, a->loc};
        kl_vec_push(*t, at);
        expr_to_attr(L, a->value, 0, &t->v[t->n - 1].val);
    }
    if (kl_train_check(t, L->src))
        return -1;
    if (kl_train_set_all(t, opts ? opts->overrides : NULL))
        return -1;
    L->batch = ir_attr_int(t, "batch", 32);
    if (!ir_attrs_find(t, "batch"))
        ir_attrs_set_int(t, "batch", L->batch);
    return 0;
}

/* ---- the whole program ---- */

/* Every def that keep_fp32 names must be called (as for recompute): a
 * misspelt name would otherwise leave its calls in low precision. */
static void check_kept_defs(lower *L)
{
    ir_attr *a = ir_attrs_find(&L->g->train, "keep_fp32");
    for (int i = 0; a && a->val.kind == IR_ATTR_LIST && i < a->val.nitems; i++) {
        const ir_attr_val *item = &a->val.items[i];
        if (item->kind != IR_ATTR_STR)
            continue;
        bool called = false;
        for (int k = 0; k < L->called.n && !called; k++)
            called = !strcmp(L->called.v[k]->name, item->s);
        if (!called)
            lower_fail_at(L, item->loc.line > 0 ? item->loc : a->loc,
                    "keep_fp32 names '%s', but the model calls no def of that name", item->s);
    }
}

static void lower_program(lower *L, const ast_program *prog, const kl_lower_opts *opts)
{
    const kl_source *src = L->src;
    const ast_block *model = NULL, *train = NULL;
    for (const ast_item *it = prog->items; it; it = it->next) {
        if (it->kind == AST_ITEM_DEF) {
            const ast_def *d = it->def;
            const ast_def *old = lower_find_def(L, d->name);
            if (old) {
                kl_error_at(src, d->loc, "def '%s' is defined twice", d->name);
                kl_note_at(src, old->loc, "the first definition is here");
                lower_bail(L);
            }
            int op = ir_op_from_name(d->name);
            if ((op >= 0 && (ir_ops[op].flags & IR_F_USER)) || ir_dtype_from_name(d->name) >= 0 ||
                !strcmp(d->name, "channels") || !strcmp(d->name, "dim"))
                lower_fail_at(L, d->loc, "def '%s' would hide the built-in of that name", d->name);
            for (const ast_param *p = d->params; p; p = p->next)
                for (const ast_param *q = d->params; q != p; q = q->next)
                    if (!strcmp(p->name, q->name))
                        lower_fail_at(L, p->loc, "parameter '%s' is declared twice", p->name);
            kl_vec_push(L->defs, d);
        } else if (it->kind == AST_ITEM_MODEL) {
            if (model) {
                kl_error_at(src, it->block->loc, "a file holds one model block");
                kl_note_at(src, model->loc, "the first model block is here");
                lower_bail(L);
            }
            model = it->block;
        } else {
            if (train) {
                kl_error_at(src, it->block->loc, "a file holds one train block");
                kl_note_at(src, train->loc, "the first train block is here");
                lower_bail(L);
            }
            train = it->block;
        }
    }
    if (!model)
        lower_fail_at(L, (kl_loc){1, 1}, "no model block in this file (expected: model NAME { ... })");
    L->g = ir_graph_new(model->name);
    L->g->source = kl_xstrdup(src->name);
    if (lower_train(L, train, opts))
        lower_bail(L);
    frame top = {0};
    lower_exec_body(L, &top, model->body);
    binding *loss = lower_lookup(&top, "loss");
    if (loss) {
        if (loss->val.kind != LV_TENSOR || type_of(L, &loss->val)->rank != 0 ||
            !ir_dtype_is_float(type_of(L, &loss->val)->dtype))
            lower_fail_at(L, loss->val.loc, "the loss must be a float scalar, such as cross_entropy(logits, label)");
        L->g->loss = loss->val.v;
    }
    check_kept_defs(L);
    ir_graph_mark_pass(L->g, "lower");
}

ir_graph *kl_lower(const kl_source *src, const ast_program *prog, const kl_lower_opts *opts)
{
    lower L = {.src = src};
    if (setjmp(L.fail)) {
        ir_attrs_free(&L.tmp_attrs);
        ir_attr_val_free(&L.tmp_val);
        kl_arena_free(&L.arena);
        kl_vec_free(L.defs);
        kl_vec_free(L.called);
        ir_graph_free(L.g);
        return NULL;
    }
    lower_program(&L, prog, opts);
    kl_arena_free(&L.arena);
    kl_vec_free(L.defs);
    kl_vec_free(L.called);
    return L.g;
}

static bool looks_like_ir(const kl_source *src)
{
    const char *p = src->text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (*p != '#')
            break;
        while (*p && *p != '\n')
            p++;
    }
    return !strncmp(p, "graph ", 6) || !strncmp(p, "graph\t", 6);
}

ir_graph *kl_load_source(const kl_source *src, const kl_lower_opts *opts)
{
    if (src->len > ((size_t)1 << 28)) {
        kl_error("%s: file too large for a model (%zu bytes)", src->name, src->len);
        return NULL;
    }
    ir_graph *g;
    size_t n = strlen(src->name);
    if ((n > 4 && !strcmp(src->name + n - 4, ".kir")) || looks_like_ir(src)) {
        g = ir_parse(src);
        if (g && kl_train_check(&g->train, src)) {
            ir_graph_free(g);
            return NULL;
        }
        for (int i = 0; g && opts && opts->overrides && opts->overrides[i]; i += 2) {
            if (!strcmp(opts->overrides[i], "batch")) {
                kl_error("%s: --batch cannot change an IR dump (its shapes are fixed); rebuild from the model file",
                         src->name);
                ir_graph_free(g);
                return NULL;
            }
        }
        if (g && kl_train_set_all(&g->train, opts ? opts->overrides : NULL)) {
            ir_graph_free(g);
            return NULL;
        }
    } else {
        ast_program prog;
        if (ast_parse(src, &prog))
            return NULL;
        g = kl_lower(src, &prog, opts);
        ast_program_free(&prog);
    }
    if (g && ir_verify(g)) {
        ir_graph_free(g);
        kl_panic("the graph of %s fails the verifier right after loading", src->name);
    }
    return g;
}

ir_graph *kl_load(const char *path, const kl_lower_opts *opts)
{
    kl_source src;
    if (kl_source_read(&src, path))
        return NULL;
    ir_graph *g = kl_load_source(&src, opts);
    kl_source_free(&src);
    return g;
}
