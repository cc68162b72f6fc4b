/* Dtypes, types and attributes: the small value types the IR is made of. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static const struct {
    const char *name;
    int size;
} dtypes[] = {
#define X(id, name, size) {name, size},
    IR_DTYPES(X)
#undef X
};

const char *ir_dtype_name(ir_dtype t)
{
    kl_check((unsigned)t < IR_NDTYPES);
    return dtypes[t].name;
}

int ir_dtype_size(ir_dtype t)
{
    kl_check((unsigned)t < IR_NDTYPES);
    return dtypes[t].size;
}

bool ir_dtype_is_float(ir_dtype t)
{
    return t == IR_F16 || t == IR_BF16 || t == IR_F32 || t == IR_F64;
}

int ir_dtype_from_name(const char *name)
{
    for (int i = 1; i < IR_NDTYPES; i++)
        if (!strcmp(name, dtypes[i].name))
            return i;
    return -1;
}

int64_t ir_type_numel(const ir_type *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dim[i];
    return n;
}

int64_t ir_type_bytes(const ir_type *t)
{
    return ir_type_numel(t) * ir_dtype_size(t->dtype);
}

bool ir_type_eq(const ir_type *a, const ir_type *b)
{
    if (a->dtype != b->dtype || a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i])
            return false;
    return true;
}

bool ir_type_in_range(const ir_type *t)
{
    if (t->dtype <= IR_NONE || t->dtype >= IR_NDTYPES || t->rank < 0 || t->rank > IR_MAX_RANK)
        return false;
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->dim[i] < 1 || t->dim[i] > IR_MAX_DIM || n > IR_MAX_NUMEL / t->dim[i])
            return false;
        n *= t->dim[i];
    }
    return true;
}

void ir_type_print(kl_buf *b, const ir_type *t)
{
    kl_buf_printf(b, "%s[", ir_dtype_name(t->dtype));
    for (int i = 0; i < t->rank; i++)
        kl_buf_printf(b, "%s%lld", i ? "," : "", (long long)t->dim[i]);
    kl_buf_putc(b, ']');
}

char *ir_type_str(const ir_type *t)
{
    kl_buf b = {0};
    ir_type_print(&b, t);
    return kl_buf_take(&b);
}

/* ---- attributes ---- */

void ir_attr_val_free(ir_attr_val *v)
{
    free(v->s);
    for (int i = 0; i < v->nitems; i++)
        ir_attr_val_free(&v->items[i]);
    free(v->items);
    if (v->args) {
        ir_attrs_free(v->args);
        free(v->args);
    }
    memset(v, 0, sizeof *v);
}

void ir_attr_val_copy(ir_attr_val *dst, const ir_attr_val *src)
{
    *dst = *src;
    dst->s = src->s ? kl_xstrdup(src->s) : NULL;
    /* An empty list may still own an allocation (ir_attr_val_ints(v, 0)):
     * never share it. */
    dst->items = NULL;
    if (src->nitems) {
        dst->items = kl_xcalloc((size_t)src->nitems, sizeof *dst->items);
        for (int i = 0; i < src->nitems; i++)
            ir_attr_val_copy(&dst->items[i], &src->items[i]);
    }
    if (src->args) {
        dst->args = kl_xcalloc(1, sizeof *dst->args);
        ir_attrs_copy(dst->args, src->args);
    }
}

void ir_attrs_free(ir_attrs *a)
{
    for (int i = 0; i < a->n; i++) {
        free(a->v[i].key);
        ir_attr_val_free(&a->v[i].val);
    }
    free(a->v);
    memset(a, 0, sizeof *a);
}

void ir_attrs_copy(ir_attrs *dst, const ir_attrs *src)
{
    memset(dst, 0, sizeof *dst);
    for (int i = 0; i < src->n; i++) {
        ir_attr a = {kl_xstrdup(src->v[i].key), {0}, src->v[i].loc};
        ir_attr_val_copy(&a.val, &src->v[i].val);
        kl_vec_push(*dst, a);
    }
}

ir_attr *ir_attrs_find(const ir_attrs *a, const char *key)
{
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->v[i].key, key))
            return &a->v[i];
    return NULL;
}

void ir_attrs_set(ir_attrs *a, const char *key, ir_attr_val val)
{
    ir_attr *old = ir_attrs_find(a, key);
    if (old) {
        ir_attr_val_free(&old->val);
        old->val = val;
        return;
    }
    ir_attr at = {kl_xstrdup(key), val, val.loc};
    kl_vec_push(*a, at);
}

void ir_attrs_remove(ir_attrs *a, const char *key)
{
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->v[i].key, key))
            continue;
        free(a->v[i].key);
        ir_attr_val_free(&a->v[i].val);
        memmove(&a->v[i], &a->v[i + 1], (size_t)(a->n - i - 1) * sizeof *a->v);
        a->n--;
        return;
    }
}

ir_attr_val ir_attr_val_int(int64_t i)
{
    return (ir_attr_val){.kind = IR_ATTR_INT, .i = i, .f = (double)i};
}

ir_attr_val ir_attr_val_float(double f)
{
    return (ir_attr_val){.kind = IR_ATTR_FLOAT, .f = f};
}

ir_attr_val ir_attr_val_str(const char *s)
{
    return (ir_attr_val){.kind = IR_ATTR_STR, .s = kl_xstrdup(s)};
}

ir_attr_val ir_attr_val_ints(const int64_t *v, int n)
{
    ir_attr_val l = {.kind = IR_ATTR_LIST, .nitems = n};
    l.items = kl_xcalloc((size_t)n, sizeof *l.items);
    for (int i = 0; i < n; i++)
        l.items[i] = ir_attr_val_int(v[i]);
    return l;
}

void ir_attrs_set_int(ir_attrs *a, const char *key, int64_t i) { ir_attrs_set(a, key, ir_attr_val_int(i)); }
void ir_attrs_set_float(ir_attrs *a, const char *key, double f) { ir_attrs_set(a, key, ir_attr_val_float(f)); }
void ir_attrs_set_str(ir_attrs *a, const char *key, const char *s) { ir_attrs_set(a, key, ir_attr_val_str(s)); }
void ir_attrs_set_ints(ir_attrs *a, const char *key, const int64_t *v, int n) { ir_attrs_set(a, key, ir_attr_val_ints(v, n)); }

int64_t ir_attr_int(const ir_attrs *a, const char *key, int64_t dflt)
{
    ir_attr *at = ir_attrs_find(a, key);
    if (!at)
        return dflt;
    if (at->val.kind == IR_ATTR_INT)
        return at->val.i;
    if (at->val.kind == IR_ATTR_FLOAT)
        return (int64_t)at->val.f;
    return dflt;
}

double ir_attr_float(const ir_attrs *a, const char *key, double dflt)
{
    ir_attr *at = ir_attrs_find(a, key);
    if (!at)
        return dflt;
    if (at->val.kind == IR_ATTR_FLOAT)
        return at->val.f;
    if (at->val.kind == IR_ATTR_INT)
        return (double)at->val.i;
    return dflt;
}

const char *ir_attr_str(const ir_attrs *a, const char *key, const char *dflt)
{
    ir_attr *at = ir_attrs_find(a, key);
    return at && (at->val.kind == IR_ATTR_STR || at->val.kind == IR_ATTR_CALL) ? at->val.s : dflt;
}

int ir_attr_ints(const ir_attrs *a, const char *key, int64_t *out, int max)
{
    ir_attr *at = ir_attrs_find(a, key);
    if (!at)
        return -1;
    if (at->val.kind == IR_ATTR_INT) {
        if (max < 1)
            return -1;
        out[0] = at->val.i;
        return 1;
    }
    if (at->val.kind != IR_ATTR_LIST || at->val.nitems > max)
        return -1;
    for (int i = 0; i < at->val.nitems; i++) {
        if (at->val.items[i].kind != IR_ATTR_INT)
            return -1;
        out[i] = at->val.items[i].i;
    }
    return at->val.nitems;
}

static bool is_plain_ident(const char *s)
{
    if (!*s || !(isalpha((unsigned char)*s) || *s == '_'))
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_' || *s == '.'))
            return false;
    return true;
}

bool ir_attr_val_is_word(const ir_attr_val *v)
{
    return v->kind == IR_ATTR_STR && is_plain_ident(v->s);
}

void ir_print_quoted(kl_buf *b, const char *s)
{
    kl_buf_putc(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            kl_buf_printf(b, "\\%c", c);
        else if (c == '\n')
            kl_buf_puts(b, "\\n");
        else if (c == '\t')
            kl_buf_puts(b, "\\t");
        else if (c < 32 || c == 127)
            kl_buf_printf(b, "\\x%02x", c);
        else
            kl_buf_putc(b, (char)c);
    }
    kl_buf_putc(b, '"');
}

void ir_attr_val_print(kl_buf *b, const ir_attr_val *v)
{
    switch (v->kind) {
    case IR_ATTR_INT:
        kl_buf_printf(b, "%lld", (long long)v->i);
        break;
    case IR_ATTR_FLOAT:
        kl_buf_put_double(b, v->f);
        break;
    case IR_ATTR_STR:
        if (is_plain_ident(v->s) && strcmp(v->s, "nan") && strcmp(v->s, "inf"))
            kl_buf_puts(b, v->s);
        else
            ir_print_quoted(b, v->s);
        break;
    case IR_ATTR_LIST:
        kl_buf_putc(b, '[');
        for (int i = 0; i < v->nitems; i++) {
            if (i)
                kl_buf_puts(b, ", ");
            ir_attr_val_print(b, &v->items[i]);
        }
        kl_buf_putc(b, ']');
        break;
    case IR_ATTR_CALL:
        kl_buf_printf(b, "%s(", v->s);
        for (int i = 0; v->args && i < v->args->n; i++) {
            kl_buf_printf(b, "%s%s = ", i ? ", " : "", v->args->v[i].key);
            ir_attr_val_print(b, &v->args->v[i].val);
        }
        kl_buf_putc(b, ')');
        break;
    }
}

void ir_attrs_print(kl_buf *b, const ir_attrs *a)
{
    if (!a->n)
        return;
    kl_buf_putc(b, '{');
    for (int i = 0; i < a->n; i++) {
        kl_buf_printf(b, "%s%s = ", i ? ", " : "", a->v[i].key);
        ir_attr_val_print(b, &a->v[i].val);
    }
    kl_buf_putc(b, '}');
}
