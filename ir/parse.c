/* Reads the IR text form written by ir/print.c back into a graph.
 *
 * A small hand-written lexer and recursive-descent parser: the format is
 * line-oriented and regular, so a grammar generator would add more than it
 * saves. Every node's result types are checked against its op's shape rule
 * here, so a hand-edited dump gets errors with the dump's own locations. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

enum { T_EOF, T_IDENT, T_VALUE, T_INT, T_FLOAT, T_STRING, T_PUNCT };

typedef struct tok {
    int kind;
    char *text; /* identifier, %name (without %), string contents */
    int64_t i;
    double f;
    char punct;
    kl_loc loc;
} tok;

/* What a node line holds while it is parsed. */
typedef struct node_tmp {
    char *names[4];
    ir_attrs attrs;
    KL_VEC(int) in;
    char *opname, *scope, *pattern;
} node_tmp;

typedef struct parser {
    const kl_source *src;
    size_t pos;
    int line, col;
    tok t;
    ir_graph *g;
    jmp_buf fail;
    int depth;
    node_tmp nt;
    char *taken; /* take_ident's result while it reads the next token */
} parser;

#define MAX_NESTING 32

static KL_NORETURN void fail_at(parser *p, kl_loc loc, const char *fmt, ...) KL_PRINTF(3, 4);
static void fail_at(parser *p, kl_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_verror_at(p->src, loc, fmt, ap);
    va_end(ap);
    longjmp(p->fail, 1);
}

static int peekc(parser *p)
{
    return p->pos < p->src->len ? (unsigned char)p->src->text[p->pos] : -1;
}

static void advance(parser *p)
{
    if (p->src->text[p->pos] == '\n')
        p->line++, p->col = 1;
    else
        p->col++;
    p->pos++;
}

static bool ident_char(int c)
{
    return isalnum(c) || c == '_' || c == '.';
}

static void next(parser *p)
{
    free(p->t.text);
    memset(&p->t, 0, sizeof p->t);
    for (;;) {
        int c = peekc(p);
        if (c == '#') {
            while (peekc(p) >= 0 && peekc(p) != '\n')
                advance(p);
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            advance(p);
        } else {
            break;
        }
    }
    tok *t = &p->t;
    t->loc = (kl_loc){p->line, p->col};
    int c = peekc(p);
    if (c < 0) {
        t->kind = T_EOF;
        return;
    }
    size_t start = p->pos;
    if (c == '%' ) {
        advance(p);
        start = p->pos;
        while (peekc(p) >= 0 && ident_char(peekc(p)))
            advance(p);
        if (p->pos == start)
            fail_at(p, t->loc, "expected a value name after '%%'");
        t->kind = T_VALUE;
        t->text = kl_xstrndup(p->src->text + start, p->pos - start);
        return;
    }
    if (isalpha(c) || c == '_') {
        while (peekc(p) >= 0 && ident_char(peekc(p)))
            advance(p);
        t->kind = T_IDENT;
        t->text = kl_xstrndup(p->src->text + start, p->pos - start);
        return;
    }
    if (isdigit(c) || c == '-') {
        advance(p);
        if (c == '-' && !isdigit(peekc(p))) {
            t->kind = T_PUNCT;
            t->punct = '-';
            return;
        }
        bool is_float = false;
        while (peekc(p) >= 0) {
            int d = peekc(p);
            if (isdigit(d)) {
                advance(p);
            } else if (d == '.' || d == 'e' || d == 'E') {
                is_float = true;
                advance(p);
                if ((d == 'e' || d == 'E') && (peekc(p) == '-' || peekc(p) == '+'))
                    advance(p);
            } else {
                break;
            }
        }
        char *text = kl_xstrndup(p->src->text + start, p->pos - start);
        char *end;
        errno = 0;
        if (is_float) {
            t->kind = T_FLOAT;
            t->f = strtod(text, &end);
        } else {
            t->kind = T_INT;
            t->i = strtoll(text, &end, 10);
        }
        /* A float may underflow to a subnormal (the printer writes those,
         * and strtod flags them ERANGE); only overflow is malformed. */
        bool bad = *end || (errno == ERANGE && (!is_float || isinf(t->f)));
        free(text);
        if (bad)
            fail_at(p, t->loc, "malformed number");
        return;
    }
    if (c == '"') {
        advance(p);
        kl_buf b = {0};
        for (;;) {
            int d = peekc(p);
            if (d < 0 || d == '\n') {
                kl_buf_free(&b);
                fail_at(p, t->loc, "unterminated string");
            }
            advance(p);
            if (d == '"')
                break;
            if (d == '\\') {
                int e = peekc(p);
                if (e < 0) {
                    kl_buf_free(&b);
                    fail_at(p, t->loc, "unterminated string");
                }
                advance(p);
                if (e == 'n')
                    d = '\n';
                else if (e == 't')
                    d = '\t';
                else if (e == 'x' && isxdigit(peekc(p))) {
                    char hex[3] = {0};
                    for (int k = 0; k < 2 && isxdigit(peekc(p)); k++) {
                        hex[k] = (char)peekc(p);
                        advance(p);
                    }
                    d = (int)strtol(hex, NULL, 16);
                } else
                    d = e;
            }
            if (d == 0) {
                kl_buf_free(&b);
                fail_at(p, t->loc, "a string may not contain a NUL byte");
            }
            kl_buf_putc(&b, (char)d);
        }
        t->kind = T_STRING;
        t->text = kl_buf_take(&b);
        return;
    }
    if (strchr("{}()[],:=@", c)) {
        advance(p);
        t->kind = T_PUNCT;
        t->punct = (char)c;
        return;
    }
    if (isprint(c))
        fail_at(p, t->loc, "unexpected character '%c'", c);
    fail_at(p, t->loc, "unexpected byte 0x%02x (is this a text file?)", c);
}

static const char *tok_desc(const tok *t, char *buf, size_t n)
{
    switch (t->kind) {
    case T_EOF: return "end of file";
    case T_IDENT: snprintf(buf, n, "'%s'", t->text); return buf;
    case T_VALUE: snprintf(buf, n, "'%%%s'", t->text); return buf;
    case T_INT: case T_FLOAT: return "a number";
    case T_STRING: return "a string";
    default: snprintf(buf, n, "'%c'", t->punct); return buf;
    }
}

static KL_NORETURN void expected(parser *p, const char *what)
{
    char buf[80];
    fail_at(p, p->t.loc, "expected %s, found %s", what, tok_desc(&p->t, buf, sizeof buf));
}

static bool is_punct(parser *p, char c)
{
    return p->t.kind == T_PUNCT && p->t.punct == c;
}

static bool is_word(parser *p, const char *w)
{
    return p->t.kind == T_IDENT && !strcmp(p->t.text, w);
}

static void expect_punct(parser *p, char c)
{
    if (!is_punct(p, c)) {
        char what[8] = {'\'', c, '\'', 0};
        expected(p, what);
    }
    next(p);
}

/* The name is held in p->taken while the next token is read, so an error
 * in that token frees it too. */
static char *take_ident(parser *p, const char *what)
{
    if (p->t.kind != T_IDENT)
        expected(p, what);
    p->taken = p->t.text;
    p->t.text = NULL;
    next(p);
    char *s = p->taken;
    p->taken = NULL;
    return s;
}

static int64_t take_int(parser *p, const char *what)
{
    if (p->t.kind != T_INT)
        expected(p, what);
    int64_t v = p->t.i;
    next(p);
    return v;
}

/* ---- attribute values ---- */

static void parse_attrs_body(parser *p, ir_attrs *a, char close);

static void parse_value(parser *p, ir_attr_val *v)
{
    if (++p->depth > MAX_NESTING)
        fail_at(p, p->t.loc, "values nested more than %d deep", MAX_NESTING);
    v->loc = p->t.loc;
    if (p->t.kind == T_INT) {
        *v = ir_attr_val_int(p->t.i);
        v->loc = p->t.loc;
        next(p);
    } else if (p->t.kind == T_FLOAT) {
        *v = ir_attr_val_float(p->t.f);
        v->loc = p->t.loc;
        next(p);
    } else if (is_punct(p, '-')) {
        kl_loc loc = p->t.loc;
        next(p);
        if (!is_word(p, "inf"))
            expected(p, "a number");
        *v = ir_attr_val_float(-1.0 / 0.0);
        v->loc = loc;
        next(p);
    } else if (p->t.kind == T_STRING) {
        *v = ir_attr_val_str(p->t.text);
        v->loc = p->t.loc;
        next(p);
    } else if (p->t.kind == T_IDENT) {
        kl_loc loc = p->t.loc;
        if (is_word(p, "inf") || is_word(p, "nan")) {
            *v = ir_attr_val_float(p->t.text[0] == 'i' ? 1.0 / 0.0 : 0.0 / 0.0);
            v->loc = loc;
            next(p);
        } else {
            /* v owns the name before the next token is read. */
            v->kind = IR_ATTR_STR;
            v->s = take_ident(p, "a value");
            if (is_punct(p, '(')) {
                v->kind = IR_ATTR_CALL;
                v->args = kl_xcalloc(1, sizeof *v->args);
                next(p);
                parse_attrs_body(p, v->args, ')');
            }
            v->loc = loc;
        }
    } else if (is_punct(p, '(')) {
        /* A group, (metric = accuracy, patience = 2): a call without a name. */
        v->kind = IR_ATTR_CALL;
        v->s = kl_xstrdup("");
        v->args = kl_xcalloc(1, sizeof *v->args);
        v->loc = p->t.loc;
        next(p);
        parse_attrs_body(p, v->args, ')');
    } else if (is_punct(p, '[')) {
        kl_loc loc = p->t.loc;
        next(p);
        v->kind = IR_ATTR_LIST;
        v->loc = loc;
        int cap = 0;
        while (!is_punct(p, ']')) {
            if (v->nitems && !is_punct(p, ','))
                expected(p, "',' or ']'");
            if (v->nitems)
                next(p);
            if (v->nitems == cap) {
                cap = cap ? 2 * cap : 4;
                v->items = kl_xrealloc(v->items, sizeof *v->items * (size_t)cap);
            }
            memset(&v->items[v->nitems], 0, sizeof *v->items);
            v->nitems++;
            parse_value(p, &v->items[v->nitems - 1]);
        }
        next(p);
    } else {
        expected(p, "a value");
    }
    p->depth--;
}

/* Whether the token is a name followed by '=' (a keyed value). */
static bool at_key(parser *p)
{
    if (p->t.kind != T_IDENT)
        return false;
    size_t i = p->pos;
    while (i < p->src->len && (p->src->text[i] == ' ' || p->src->text[i] == '\t'))
        i++;
    return i < p->src->len && p->src->text[i] == '=';
}

/* key = value, ... up to close ('}' or ')'), which is consumed. A call's
 * arguments may also be positional (key ""), as in a model file's train
 * block: ir_spec_normalize names them. */
static void parse_attrs_body(parser *p, ir_attrs *a, char close)
{
    bool first = true;
    while (!is_punct(p, close)) {
        if (!first)
            expect_punct(p, ',');
        first = false;
        kl_loc loc = p->t.loc;
        if (close == ')' && !at_key(p)) {
            ir_attr at = {kl_xstrdup(""), {0}, loc};
            kl_vec_push(*a, at);
            parse_value(p, &a->v[a->n - 1].val);
            continue;
        }
        char *key = take_ident(p, "an attribute name");
        if (ir_attrs_find(a, key)) {
            free(key);
            fail_at(p, loc, "attribute given twice");
        }
        ir_attr at = {key, {0}, loc};
        kl_vec_push(*a, at);
        expect_punct(p, '=');
        parse_value(p, &a->v[a->n - 1].val);
    }
    next(p);
}

/* ---- types and values ---- */

static void parse_type(parser *p, ir_type *t)
{
    kl_loc loc = p->t.loc;
    if (p->t.kind != T_IDENT)
        expected(p, "a dtype");
    int dt = ir_dtype_from_name(p->t.text);
    if (dt < 0)
        fail_at(p, loc, "unknown dtype '%s' (expected u8, i32, i64, f16, bf16, f32 or f64)", p->t.text);
    next(p);
    t->dtype = dt;
    t->rank = 0;
    expect_punct(p, '[');
    while (!is_punct(p, ']')) {
        if (t->rank)
            expect_punct(p, ',');
        if (t->rank == IR_MAX_RANK)
            fail_at(p, p->t.loc, "more than %d dimensions", IR_MAX_RANK);
        kl_loc dl = p->t.loc;
        int64_t d = take_int(p, "a dimension");
        if (d <= 0 || d > IR_MAX_DIM)
            fail_at(p, dl, "dimension out of range");
        t->dim[t->rank++] = d;
    }
    next(p);
    /* Guard against sizes whose byte count overflows. */
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (n > IR_MAX_NUMEL / t->dim[i])
            fail_at(p, loc, "tensor too large");
        n *= t->dim[i];
    }
}

static int lookup(parser *p, kl_loc loc, const char *name)
{
    int v = ir_find_value(p->g, name);
    if (v < 0)
        fail_at(p, loc, "use of undefined value '%%%s'", name);
    return v;
}

static void parse_loc_suffix(parser *p, kl_loc *loc)
{
    if (!is_punct(p, '@'))
        return;
    next(p);
    int64_t line = take_int(p, "a line number");
    expect_punct(p, ':');
    int64_t col = take_int(p, "a column number");
    if (line < 1 || col < 1 || line > 100000000 || col > 100000000)
        fail_at(p, p->t.loc, "location out of range");
    loc->line = (int)line;
    loc->col = (int)col;
}

static void parse_decl(parser *p, ir_value_kind kind)
{
    next(p);
    if (p->t.kind != T_VALUE)
        expected(p, "a value name");
    if (ir_find_value(p->g, p->t.text) >= 0)
        fail_at(p, p->t.loc, "'%%%s' is defined twice", p->t.text);
    /* The line's temporaries hold the name, so an error frees it. */
    char **name = &p->nt.names[0];
    *name = kl_xstrdup(p->t.text);
    next(p);
    ir_type t;
    expect_punct(p, ':');
    parse_type(p, &t);
    int id = ir_declare(p->g, kind, *name, &t, (kl_loc){0, 0});
    free(*name);
    *name = NULL;
    ir_value *v = ir_val(p->g, id);
    if (is_punct(p, '{')) {
        next(p);
        parse_attrs_body(p, &v->attrs, '}');
    }
    parse_loc_suffix(p, &v->loc);
}

/* Releases what a half-parsed node line holds (also on the error path). */
static void node_tmp_free(node_tmp *nt)
{
    for (int i = 0; i < 4; i++)
        free(nt->names[i]);
    ir_attrs_free(&nt->attrs);
    kl_vec_free(nt->in);
    free(nt->opname);
    free(nt->scope);
    free(nt->pattern);
    memset(nt, 0, sizeof *nt);
}

static void parse_node(parser *p)
{
    node_tmp *nt = &p->nt;
    ir_phase phase = IR_PHASE_FORWARD;
    if (is_word(p, "backward") || is_word(p, "update") || is_word(p, "forward") || is_word(p, "startup")) {
        phase = p->t.text[0] == 'b' ? IR_PHASE_BACKWARD : p->t.text[0] == 'u' ? IR_PHASE_UPDATE
              : p->t.text[0] == 's' ? IR_PHASE_STARTUP : IR_PHASE_FORWARD;
        next(p);
    }
    kl_loc name_locs[4];
    ir_type types[4];
    int nout = 0;
    kl_loc line_loc = p->t.loc;
    while (p->t.kind == T_VALUE) {
        if (nout == 4)
            fail_at(p, p->t.loc, "too many results");
        name_locs[nout] = p->t.loc;
        nt->names[nout] = kl_xstrdup(p->t.text);
        for (int i = 0; i < nout; i++)
            if (!strcmp(nt->names[i], nt->names[nout]))
                fail_at(p, p->t.loc, "'%%%s' is defined twice", nt->names[nout]);
        if (ir_find_value(p->g, nt->names[nout]) >= 0)
            fail_at(p, p->t.loc, "'%%%s' is defined twice", nt->names[nout]);
        next(p);
        expect_punct(p, ':');
        parse_type(p, &types[nout++]);
        if (is_punct(p, ','))
            next(p);
        else
            expect_punct(p, '=');
    }
    kl_loc oploc = p->t.loc;
    nt->opname = take_ident(p, "an op name");
    int op = ir_op_from_name(nt->opname);
    if (op < 0)
        fail_at(p, oploc, "unknown op '%s'", nt->opname);
    expect_punct(p, '(');
    while (!is_punct(p, ')')) {
        if (nt->in.n)
            expect_punct(p, ',');
        if (p->t.kind != T_VALUE)
            expected(p, "a value name");
        if (nt->in.n == 64)
            fail_at(p, p->t.loc, "too many operands");
        int v = lookup(p, p->t.loc, p->t.text);
        /* What the verifier checks the parser checks too, with a location. */
        if (ir_op_mutates(op, nt->in.n) && !ir_is_persistent(ir_val(p->g, v)))
            fail_at(p, p->t.loc, "%s writes operand %d in place, so '%%%s' must be a param or state",
                    nt->opname, nt->in.n + 1, p->t.text);
        kl_vec_push(nt->in, v);
        next(p);
    }
    next(p);
    if (is_punct(p, '{')) {
        next(p);
        parse_attrs_body(p, &nt->attrs, '}');
    }
    kl_loc loc = {0, 0};
    parse_loc_suffix(p, &loc);
    int group = -1;
    if (is_word(p, "in")) {
        next(p);
        nt->scope = take_ident(p, "a scope name");
    }
    if (is_word(p, "group")) {
        next(p);
        kl_loc gl = p->t.loc;
        int64_t grp = take_int(p, "a group number");
        if (grp < 0 || grp > 1000000)
            fail_at(p, gl, "group number out of range");
        group = (int)grp;
        nt->pattern = take_ident(p, "the fusion pattern of the group");
    }
    if (nout != ir_ops[op].nout)
        fail_at(p, line_loc, "%s has %d result%s, %d named", nt->opname, ir_ops[op].nout,
                ir_ops[op].nout == 1 ? "" : "s", nout);
    /* Check the types against the op's rule. */
    ir_type intypes[64];
    for (int i = 0; i < nt->in.n; i++)
        intypes[i] = ir_val(p->g, nt->in.v[i])->type;
    ir_infer inf = {.op = op, .nin = nt->in.n, .in = intypes, .attrs = &nt->attrs};
    if (ir_infer_run(&inf))
        fail_at(p, oploc, "%s", inf.err);
    for (int i = 0; i < nout; i++) {
        if (!ir_type_eq(&inf.out[i], &types[i])) {
            char *want = ir_type_str(&inf.out[i]), *have = ir_type_str(&types[i]);
            char msg[200];
            snprintf(msg, sizeof msg, "'%%%s' is written %s, but %s gives %s", nt->names[i], have, nt->opname, want);
            free(want);
            free(have);
            fail_at(p, name_locs[i], "%s", msg);
        }
    }
    ir_node *n = ir_add_node(p->g, op, nt->in.v, nt->in.n, &nt->attrs, types,
                             (const char *const *)nt->names, loc);
    n->phase = phase;
    n->scope = nt->scope;
    nt->scope = NULL;
    n->group = group;
    n->pattern = nt->pattern;
    nt->pattern = NULL;
    node_tmp_free(nt);
}

static void parse_graph_body(parser *p)
{
    while (!is_punct(p, '}')) {
        if (p->t.kind == T_EOF)
            expected(p, "'}'");
        if (is_word(p, "source")) {
            next(p);
            if (p->t.kind != T_STRING)
                expected(p, "a file name in quotes");
            free(p->g->source);
            p->g->source = kl_xstrdup(p->t.text);
            next(p);
        } else if (is_word(p, "passes")) {
            next(p);
            do {
                if (p->g->passes.n)
                    next(p);
                kl_vec_push(p->g->passes, take_ident(p, "a pass name"));
            } while (is_punct(p, ','));
        } else if (is_word(p, "train")) {
            next(p);
            expect_punct(p, '{');
            while (!is_punct(p, '}')) {
                kl_loc loc = p->t.loc;
                char *key = take_ident(p, "a train setting");
                if (ir_attrs_find(&p->g->train, key)) {
                    free(key);
                    fail_at(p, loc, "train setting given twice");
                }
                ir_attr at = {key, {0}, loc};
                kl_vec_push(p->g->train, at);
                expect_punct(p, '=');
                parse_value(p, &p->g->train.v[p->g->train.n - 1].val);
            }
            next(p);
        } else if (is_word(p, "input")) {
            parse_decl(p, IR_VAL_INPUT);
        } else if (is_word(p, "param")) {
            parse_decl(p, IR_VAL_PARAM);
        } else if (is_word(p, "state")) {
            parse_decl(p, IR_VAL_STATE);
        } else if (is_word(p, "loss")) {
            next(p);
            if (p->t.kind != T_VALUE)
                expected(p, "a value name");
            p->g->loss = lookup(p, p->t.loc, p->t.text);
            const ir_type *lt = &ir_val(p->g, p->g->loss)->type;
            if (lt->rank != 0 || !ir_dtype_is_float(lt->dtype))
                fail_at(p, p->t.loc, "the loss must be a float scalar, and '%%%s' is not", p->t.text);
            next(p);
        } else if (is_word(p, "grad")) {
            next(p);
            if (p->t.kind != T_VALUE)
                expected(p, "a param name");
            kl_loc ploc = p->t.loc;
            int param = lookup(p, ploc, p->t.text);
            next(p);
            expect_punct(p, '=');
            if (p->t.kind != T_VALUE)
                expected(p, "a value name");
            kl_loc gloc = p->t.loc;
            int grad = lookup(p, gloc, p->t.text);
            next(p);
            if (ir_val(p->g, param)->kind != IR_VAL_PARAM)
                fail_at(p, ploc, "'%%%s' is not a param", ir_val(p->g, param)->name);
            if (ir_grad_of(p->g, param) >= 0)
                fail_at(p, ploc, "a second gradient for '%%%s'", ir_val(p->g, param)->name);
            if (!ir_type_eq(&ir_val(p->g, param)->type, &ir_val(p->g, grad)->type) &&
                ir_type_numel(&ir_val(p->g, param)->type) != ir_type_numel(&ir_val(p->g, grad)->type))
                fail_at(p, gloc, "the gradient's shape differs from the param's");
            ir_grad_pair gp = {param, grad};
            kl_vec_push(p->g->grads, gp);
        } else if (is_word(p, "output")) {
            next(p);
            kl_loc loc = p->t.loc;
            char *name = take_ident(p, "an output name");
            ir_report r = {name, -1, false};
            kl_vec_push(p->g->outputs, r);
            for (int i = 0; i + 1 < p->g->outputs.n; i++)
                if (!strcmp(p->g->outputs.v[i].name, name))
                    fail_at(p, loc, "output declared twice");
            expect_punct(p, '=');
            if (p->t.kind != T_VALUE)
                expected(p, "a value name");
            p->g->outputs.v[p->g->outputs.n - 1].value = lookup(p, p->t.loc, p->t.text);
            next(p);
        } else if (is_word(p, "report")) {
            next(p);
            kl_loc loc = p->t.loc;
            char *name = take_ident(p, "a metric name");
            ir_report r = {name, -1, false};
            kl_vec_push(p->g->reports, r);
            for (int i = 0; i + 1 < p->g->reports.n; i++)
                if (!strcmp(p->g->reports.v[i].name, name))
                    fail_at(p, loc, "metric reported twice");
            expect_punct(p, '=');
            if (p->t.kind != T_VALUE)
                expected(p, "a value name");
            p->g->reports.v[p->g->reports.n - 1].value = lookup(p, p->t.loc, p->t.text);
            next(p);
            /* better = lower (higher, the default, is not printed). */
            if (is_word(p, "better")) {
                next(p);
                expect_punct(p, '=');
                if (!is_word(p, "lower") && !is_word(p, "higher"))
                    expected(p, "lower or higher");
                p->g->reports.v[p->g->reports.n - 1].lower_better = is_word(p, "lower");
                next(p);
            }
        } else {
            parse_node(p);
        }
    }
    next(p);
}

ir_graph *ir_parse(const kl_source *src)
{
    parser p = {.src = src, .line = 1, .col = 1};
    if (setjmp(p.fail)) {
        free(p.t.text);
        free(p.taken);
        node_tmp_free(&p.nt);
        ir_graph_free(p.g);
        return NULL;
    }
    next(&p);
    if (!is_word(&p, "graph"))
        expected(&p, "'graph'");
    next(&p);
    char *name = take_ident(&p, "a graph name");
    p.g = ir_graph_new(name);
    free(name);
    expect_punct(&p, '{');
    parse_graph_body(&p);
    if (p.t.kind != T_EOF)
        expected(&p, "end of file");
    free(p.t.text);
    return p.g;
}

int ir_parse_value(const kl_source *src, ir_attr_val *out)
{
    parser p = {.src = src, .line = 1, .col = 1};
    memset(out, 0, sizeof *out);
    if (setjmp(p.fail)) {
        free(p.t.text);
        free(p.taken);
        ir_attr_val_free(out);
        memset(out, 0, sizeof *out);
        return -1;
    }
    next(&p);
    parse_value(&p, out);
    if (p.t.kind != T_EOF)
        expected(&p, "the end of the value");
    free(p.t.text);
    return 0;
}
