/* Constructors and destructors of the syntax tree. */
#include <stdlib.h>

#include "ast.h"

ast_expr *ast_expr_new(ast_expr_kind kind, kl_loc loc)
{
    ast_expr *e = kl_xcalloc(1, sizeof *e);
    e->kind = kind;
    e->loc = loc;
    return e;
}

ast_arg *ast_arg_new(char *name, ast_expr *value, kl_loc loc)
{
    ast_arg *a = kl_xcalloc(1, sizeof *a);
    a->name = name;
    a->value = value;
    a->loc = loc;
    return a;
}

#define DEFINE_APPEND(fn, T)        \
    T *fn(T *a, T *b)               \
    {                               \
        if (!a)                     \
            return b;               \
        T *p = a;                   \
        while (p->next)             \
            p = p->next;            \
        p->next = b;                \
        return a;                   \
    }
DEFINE_APPEND(ast_arg_append, ast_arg)

/* Statements are appended one at a time, as many as the file has lines:
 * the first one remembers the last, so appending does not walk the list. */
ast_stmt *ast_stmt_append(ast_stmt *a, ast_stmt *b)
{
    if (!a)
        return b;
    ast_stmt *p = a->last ? a->last : a;
    while (p->next)
        p = p->next;
    p->next = b;
    while (p->next)
        p = p->next;
    a->last = p;
    return a;
}
DEFINE_APPEND(ast_param_append, ast_param)
DEFINE_APPEND(ast_item_append, ast_item)

/* Iterates down the first operand: a chain a + b + c + ... grows to the
 * left without growing the parser's stack, so it may be as long as the
 * file. The recursion that remains is bounded by the parser's stack. */
void ast_expr_free(ast_expr *e)
{
    while (e) {
        ast_expr *first = e->a;
        free(e->s);
        ast_expr_free(e->b);
        ast_args_free(e->args);
        free(e);
        e = first;
    }
}

void ast_args_free(ast_arg *a)
{
    while (a) {
        ast_arg *next = a->next;
        free(a->name);
        ast_expr_free(a->value);
        free(a);
        a = next;
    }
}

void ast_type_free(ast_type *t)
{
    if (!t)
        return;
    free(t->dtype);
    ast_args_free(t->dims);
    free(t);
}

void ast_stmts_free(ast_stmt *s)
{
    while (s) {
        ast_stmt *next = s->next;
        free(s->name);
        ast_type_free(s->type);
        ast_expr_free(s->value);
        ast_args_free(s->opts);
        free(s->word);
        free(s);
        s = next;
    }
}

void ast_params_free(ast_param *p)
{
    while (p) {
        ast_param *next = p->next;
        free(p->name);
        ast_type_free(p->type);
        ast_expr_free(p->dflt);
        free(p);
        p = next;
    }
}

void ast_def_free(ast_def *d)
{
    if (!d)
        return;
    free(d->name);
    ast_params_free(d->params);
    ast_stmts_free(d->body);
    free(d);
}

void ast_block_free(ast_block *b)
{
    if (!b)
        return;
    free(b->name);
    ast_stmts_free(b->body);
    ast_args_free(b->items);
    free(b);
}

void ast_items_free(ast_item *i)
{
    while (i) {
        ast_item *next = i->next;
        ast_def_free(i->def);
        ast_block_free(i->block);
        free(i);
        i = next;
    }
}

void ast_program_free(ast_program *p)
{
    ast_items_free(p->items);
    p->items = NULL;
}
