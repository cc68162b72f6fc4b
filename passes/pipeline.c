/* The pass pipeline, top to bottom. Each pass is one file in passes/ whose
 * header comment says what it requires and provides. After each pass the
 * verifier runs when asked (tests, debug builds), so a broken pass is
 * caught where it breaks. */
#include <string.h>

#include "pipeline.h"

typedef int (*pass_fn)(ir_graph *g);

static const char *const pass_names[] = {"lower"};

static int run_pass(ir_graph *g, const char *name, pass_fn fn, const kl_pipeline_opts *o, bool *stop)
{
    if (*stop)
        return 0;
    if (fn(g))
        return -1;
    ir_graph_mark_pass(g, name);
    if (o->verify && ir_verify(g))
        kl_panic("the graph fails the verifier after pass %s", name);
    if (o->stop_after && !strcmp(o->stop_after, name))
        *stop = true;
    return 0;
}

int kl_pipeline_run(ir_graph *g, const kl_pipeline_opts *o)
{
    bool stop = o->stop_after && !strcmp(o->stop_after, "lower");
    /* No passes yet beyond lowering (frontend/lower.c). */
    (void)run_pass;
    (void)stop;
    (void)g;
    return 0;
}

bool kl_pipeline_has_pass(const char *name)
{
    if (!strcmp(name, "all"))
        return true;
    for (size_t i = 0; i < KL_ARRAY_LEN(pass_names); i++)
        if (!strcmp(pass_names[i], name))
            return true;
    return false;
}

const char *kl_pipeline_pass_names(void)
{
    return "lower";
}
