/* The op table instantiated from ops.def, and the attribute checker that
 * reads each row's attribute spec. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "shape.h"

const ir_op_info ir_ops[IR_NOPS] = {
#define OP(id, name, min_in, max_in, nout, kc, flags, prec, shape, grad, writes, body, spec) \
    [IR_OP_##id] = {name, min_in, max_in, nout, kc, flags, prec, shape, writes, spec},
#include "ops.def"
#undef OP
};

int ir_op_from_name(const char *name)
{
    for (int i = 0; i < IR_NOPS; i++)
        if (!strcmp(ir_ops[i].name, name))
            return i;
    return -1;
}

const char *ir_kernel_class_name(ir_kernel_class k)
{
    static const char *names[] = {"source", "elementwise", "reduction", "gemm", "conv",
                                  "pool", "norm", "move", "random", "update", "collective", "attention"};
    kl_check((unsigned)k < KL_ARRAY_LEN(names));
    return names[k];
}

/* ---- attribute specs ---- */

/* Splits a spec into entries; returns how many. */
static int spec_parse(const char *spec, ir_attr_spec *e, int max)
{
    int n = 0;
    const char *p = spec;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        kl_check(n < max);
        ir_attr_spec *s = &e[n++];
        memset(s, 0, sizeof *s);
        size_t len = strcspn(p, " ");
        char tok[80];
        kl_check(len < sizeof tok);
        memcpy(tok, p, len);
        tok[len] = 0;
        p += len;
        char *colon = strchr(tok, ':'), *eq = strchr(tok, '=');
        kl_check(colon != NULL);
        *colon = 0;
        if (eq) {
            *eq = 0;
            strcpy(s->dflt, eq + 1);
        }
        strcpy(s->name, tok);
        strcpy(s->type, colon + 1);
    }
    return n;
}

int ir_op_attr_spec(ir_op op, ir_attr_spec *out, int max)
{
    return spec_parse(ir_ops[op].attr_spec, out, max);
}

int ir_spec_parse(const char *spec, ir_attr_spec *out, int max)
{
    return spec_parse(spec, out, max);
}

static int attr_err(char *err, size_t errlen, const char *fmt, ...) KL_PRINTF(3, 4);
static int attr_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static bool is_int_list(const ir_attr_val *v)
{
    if (v->kind != IR_ATTR_LIST)
        return false;
    for (int i = 0; i < v->nitems; i++)
        if (v->items[i].kind != IR_ATTR_INT)
            return false;
    return true;
}

/* Converts v in place to the spec type; -1 when it cannot be. */
static int coerce(ir_attr_val *v, const char *type)
{
    if (!strcmp(type, "int"))
        return v->kind == IR_ATTR_INT ? 0 : -1;
    if (!strcmp(type, "float")) {
        if (v->kind == IR_ATTR_INT) {
            v->kind = IR_ATTR_FLOAT;
            v->f = (double)v->i;
        }
        return v->kind == IR_ATTR_FLOAT ? 0 : -1;
    }
    if (!strcmp(type, "str"))
        return v->kind == IR_ATTR_STR ? 0 : -1;
    if (!strcmp(type, "dtype"))
        return v->kind == IR_ATTR_STR && ir_dtype_from_name(v->s) > 0 ? 0 : -1;
    if (!strcmp(type, "ints") || !strcmp(type, "pair")) {
        bool pair = type[0] == 'p';
        if (v->kind == IR_ATTR_INT) {
            int64_t x[2] = {v->i, v->i};
            kl_loc loc = v->loc;
            *v = ir_attr_val_ints(x, pair ? 2 : 1);
            v->loc = loc;
            return 0;
        }
        if (!is_int_list(v))
            return -1;
        return pair && v->nitems != 2 ? -1 : 0;
    }
    kl_panic("bad attribute type '%s' in the op table", type);
}

static const char *type_words(const char *type)
{
    if (!strcmp(type, "int"))
        return "an integer";
    if (!strcmp(type, "float"))
        return "a number";
    if (!strcmp(type, "str"))
        return "a name";
    if (!strcmp(type, "dtype"))
        return "a dtype (u8, i32, i64, f16, bf16, f32, f64)";
    if (!strcmp(type, "pair"))
        return "an integer or a pair of integers";
    return "an integer or a list of integers";
}

static ir_attr_val parse_default(const char *text, const char *type)
{
    if (!strcmp(type, "float"))
        return ir_attr_val_float(strtod(text, NULL));
    if (!strcmp(type, "str") || !strcmp(type, "dtype"))
        return ir_attr_val_str(text);
    ir_attr_val v = ir_attr_val_int(strtoll(text, NULL, 10));
    if (strcmp(type, "int"))
        kl_check(coerce(&v, type) == 0);
    return v;
}

int ir_spec_normalize(const char *specstr, const char *what, ir_attrs *attrs, char *err, size_t errlen)
{
    ir_attr_spec spec[12];
    int n = spec_parse(specstr, spec, 12);
    /* Positional entries (empty key) take the spec's names in order. */
    for (int i = 0; i < attrs->n; i++) {
        if (attrs->v[i].key[0])
            continue;
        if (i >= n)
            return attr_err(err, errlen, "%s takes at most %d argument%s", what, n, n == 1 ? "" : "s");
        if (ir_attrs_find(attrs, spec[i].name))
            return attr_err(err, errlen, "%s: argument '%s' given twice", what, spec[i].name);
        free(attrs->v[i].key);
        attrs->v[i].key = kl_xstrdup(spec[i].name);
    }
    for (int i = 0; i < attrs->n; i++) {
        /* An annotation, not an argument: any op may carry it (the
         * precision a model file asks for, see passes/precision.c; the
         * pipeline stage, passes/pipeline_stages.c). */
        if (!strcmp(attrs->v[i].key, "_precision") || !strcmp(attrs->v[i].key, "_stage"))
            continue;
        int k;
        for (k = 0; k < n && strcmp(spec[k].name, attrs->v[i].key); k++)
            ;
        if (k == n) {
            kl_buf names = {0};
            for (int j = 0; j < n; j++)
                kl_buf_printf(&names, "%s%s", j ? ", " : "", spec[j].name);
            attr_err(err, errlen, n ? "%s has no argument '%s' (its arguments: %s)" : "%s has no argument '%s' (it takes none)",
                     what, attrs->v[i].key, names.s ? names.s : "");
            kl_buf_free(&names);
            return -1;
        }
        if (coerce(&attrs->v[i].val, spec[k].type))
            return attr_err(err, errlen, "argument '%s' of %s must be %s", spec[k].name, what,
                            type_words(spec[k].type));
    }
    for (int k = 0; k < n; k++) {
        if (ir_attrs_find(attrs, spec[k].name) || !strcmp(spec[k].dflt, "?"))
            continue;
        if (!spec[k].dflt[0])
            return attr_err(err, errlen, "%s needs argument '%s'", what, spec[k].name);
        ir_attrs_set(attrs, spec[k].name, parse_default(spec[k].dflt, spec[k].type));
    }
    /* Canonical order: the spec's, so printing is stable. */
    for (int k = 0, pos = 0; k < n; k++) {
        for (int i = pos; i < attrs->n; i++) {
            if (strcmp(attrs->v[i].key, spec[k].name))
                continue;
            ir_attr t = attrs->v[i];
            memmove(&attrs->v[pos + 1], &attrs->v[pos], (size_t)(i - pos) * sizeof t);
            attrs->v[pos++] = t;
            break;
        }
    }
    return 0;
}

int ir_attrs_normalize(ir_op op, ir_attrs *attrs, char *err, size_t errlen)
{
    /* Positional arguments after an op's tensor operands fill its
     * attributes; too many are counted as the call wrote them, operands
     * included ("transpose takes at most 0 arguments" read as wrong). */
    ir_attr_spec spec[12];
    int n = spec_parse(ir_ops[op].attr_spec, spec, 12), positional = 0;
    for (int i = 0; i < attrs->n; i++)
        positional += !attrs->v[i].key[0];
    const ir_op_info *o = &ir_ops[op];
    if (positional > n && o->max_in >= 0) {
        char operands[48];
        if (o->min_in == o->max_in)
            snprintf(operands, sizeof operands, "%d tensor operand%s", o->max_in, o->max_in == 1 ? "" : "s");
        else
            snprintf(operands, sizeof operands, "%d to %d tensor operands", o->min_in, o->max_in);
        if (n)
            return attr_err(err, errlen, "%s takes %s, then at most %d argument%s; the call gives %d more", o->name,
                            operands, n, n == 1 ? "" : "s", positional);
        return attr_err(err, errlen, "%s takes %s and no other arguments; the call gives %d more", o->name, operands,
                        positional);
    }
    return ir_spec_normalize(o->attr_spec, o->name, attrs, err, errlen);
}
