/* Helpers the passes share. */
#include <string.h>

#include "passes.h"

void pass_error(const ir_graph *g, kl_loc loc, const char *fmt, ...)
{
    kl_source src = {.name = g->source ? g->source : g->name};
    kl_source file;
    bool have = g->source && loc.line > 0 && kl_source_read_quiet(&file, g->source) == 0;
    va_list ap;
    va_start(ap, fmt);
    kl_verror_at(have ? &file : &src, loc, fmt, ap);
    va_end(ap);
    if (have)
        kl_source_free(&file);
}

int pass_find_role(const ir_graph *g, const char *role)
{
    for (int i = 0; i < g->decls.n; i++) {
        const char *r = ir_attr_str(&ir_val(g, g->decls.v[i])->attrs, "role", NULL);
        if (r && !strcmp(r, role))
            return g->decls.v[i];
    }
    return -1;
}

static void add_bytes(int64_t *per_dtype, const ir_value *v)
{
    per_dtype[v->type.dtype] += ir_type_bytes(&v->type);
}

static void print_bytes(kl_buf *b, const char *what, const int64_t *per_dtype)
{
    int64_t total = 0;
    for (int d = 0; d < IR_NDTYPES; d++)
        total += per_dtype[d];
    kl_buf_printf(b, "%s %.2f MB", what, (double)total / 1e6);
    bool first = true;
    for (int d = 0; d < IR_NDTYPES; d++) {
        if (!per_dtype[d])
            continue;
        kl_buf_printf(b, "%s%s %.2f", first ? " (" : ", ", ir_dtype_name(d), (double)per_dtype[d] / 1e6);
        first = false;
    }
    kl_buf_puts(b, first ? "" : ")");
}

char *pass_memory_summary(const ir_graph *g)
{
    int64_t params[IR_NDTYPES] = {0}, copies[IR_NDTYPES] = {0}, state[IR_NDTYPES] = {0};
    int64_t acts[IR_NDTYPES] = {0}, grads[IR_NDTYPES] = {0}, consts[IR_NDTYPES] = {0};
    for (int i = 0; i < g->values.n; i++) {
        const ir_value *v = ir_val(g, i);
        const char *role = ir_attr_str(&v->attrs, "role", "");
        if (v->kind == IR_VAL_PARAM || (v->kind == IR_VAL_STATE && !strcmp(role, "zero3_master"))) {
            add_bytes(params, v); /* zero3: the params' slices */
        } else if (v->kind == IR_VAL_STATE) {
            add_bytes(!strcmp(role, "lowp") ? copies : state, v);
        } else if (v->kind == IR_VAL_TEMP && v->def >= 0) {
            const ir_node *n = ir_nd(g, v->def);
            if (n->dead || n->op == IR_OP_CONST || ir_op_is_view(n->op))
                continue;
            if (n->phase == IR_PHASE_FORWARD)
                add_bytes(acts, v);
            else if (n->phase == IR_PHASE_BACKWARD)
                add_bytes(grads, v);
            else if (n->phase == IR_PHASE_STARTUP)
                add_bytes(consts, v);
        }
    }
    kl_buf b = {0};
    print_bytes(&b, "params", params);
    if (copies[IR_BF16] || copies[IR_F16]) {
        kl_buf_puts(&b, "; ");
        print_bytes(&b, "low-precision copies", copies);
    }
    kl_buf_puts(&b, "; ");
    print_bytes(&b, "optimizer and other state", state);
    kl_buf_puts(&b, "; ");
    print_bytes(&b, "activations", acts);
    kl_buf_puts(&b, "; ");
    print_bytes(&b, "gradients and other backward values", grads);
    int64_t nconst = 0;
    for (int d = 0; d < IR_NDTYPES; d++)
        nconst += consts[d];
    if (nconst) {
        kl_buf_puts(&b, "; ");
        print_bytes(&b, "start-up constants", consts);
    }
    return kl_buf_take(&b);
}
