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
