/* The IR unit tests' helpers (tests/unit/test_ir.c, test_ir_text.c):
 * types and attributes from text, and the diagnostics of a call captured. */
#ifndef KILN_TEST_IR_FIXTURE_H
#define KILN_TEST_IR_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/grad.h"
#include "codegen/cg.h"


/* "f32[2,3]" -> a type; "f32[]" is a scalar. */
static inline ir_type type_of(const char *text)
{
    ir_type t = {0};
    const char *br = strchr(text, '[');
    assert_non_null(br);
    char dt[16];
    snprintf(dt, sizeof dt, "%.*s", (int)(br - text), text);
    int d = ir_dtype_from_name(dt);
    assert_true(d > 0);
    t.dtype = (ir_dtype)d;
    for (const char *p = br + 1; *p && *p != ']';) {
        char *end;
        t.dim[t.rank++] = strtoll(p, &end, 10);
        assert_true(end > p);
        p = *end == ',' ? end + 1 : end;
    }
    return t;
}

static inline char *type_text(const ir_type *t)
{
    return ir_type_str(t);
}

/* "key=value; key=value": a value is [ints], an int, a float (with '.' or
 * 'e'), or a name. An empty key ("=2") makes a positional argument. */
static inline void attrs_from(ir_attrs *a, const char *text)
{
    memset(a, 0, sizeof *a);
    char *copy = kl_xstrdup(text), *save = NULL;
    for (char *item = strtok_r(copy, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        while (*item == ' ')
            item++;
        char *eq = strchr(item, '=');
        assert_non_null(eq);
        *eq = 0;
        const char *v = eq + 1;
        ir_attr_val val;
        if (*v == '[') {
            int64_t xs[16];
            int n = 0;
            for (const char *p = v + 1; *p && *p != ']';) {
                char *end;
                xs[n++] = strtoll(p, &end, 10);
                p = *end == ',' ? end + 1 : end;
            }
            val = ir_attr_val_ints(xs, n);
        } else if ((*v >= '0' && *v <= '9') || *v == '-') {
            val = strpbrk(v, ".e") ? ir_attr_val_float(strtod(v, NULL)) : ir_attr_val_int(strtoll(v, NULL, 10));
        } else {
            val = ir_attr_val_str(v);
        }
        /* Append rather than set: positional entries share the empty key. */
        ir_attr at = {kl_xstrdup(item), val, {0, 0}};
        kl_vec_push(*a, at);
    }
    free(copy);
}

static inline char *attrs_text(const ir_attrs *a)
{
    kl_buf b = {0};
    ir_attrs_print(&b, a);
    return kl_buf_take(&b);
}

/* What the diagnostics stream received while fn ran. */
typedef struct capture {
    char *buf;
    size_t len;
    FILE *f;
} capture;

static inline void capture_start(capture *c)
{
    c->buf = NULL;
    c->len = 0;
    c->f = open_memstream(&c->buf, &c->len);
    assert_non_null(c->f);
    kl_diag_set_stream(c->f);
}

static inline char *capture_end(capture *c)
{
    kl_diag_set_stream(NULL);
    fclose(c->f);
    return c->buf;
}

/* ---- NumPy broadcasting ---- */

#endif
