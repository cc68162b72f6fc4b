/* The pass pipeline, top to bottom. Each pass is one file in passes/ whose
 * header comment says what it requires and provides. After each pass the
 * verifier runs when asked (tests, debug builds), so a broken pass is
 * caught where it breaks.
 *
 * "lower" is the frontend's lowering of a model file to the IR; code
 * generation from the final graph is cg_build_plan (codegen/plan.c). */
#include <string.h>

#include "pipeline.h"
#include "passes.h"

typedef struct run_state {
    const kl_pipeline_opts *o;
    bool stopped;
    int rc;
} run_state;

static bool already_ran(const ir_graph *g, const char *name)
{
    for (int i = 0; i < g->passes.n; i++)
        if (!strcmp(g->passes.v[i], name))
            return true;
    return false;
}

static void run(run_state *st, ir_graph *g, const char *name, int (*pass)(ir_graph *))
{
    if (st->stopped || st->rc)
        return;
    if (!already_ran(g, name)) {
        if (pass(g)) {
            st->rc = -1;
            return;
        }
        ir_graph_mark_pass(g, name);
        if (st->o->verify && ir_verify(g))
            kl_panic("the graph fails the verifier after pass %s", name);
    }
    if (st->o->stop_after && !strcmp(st->o->stop_after, name))
        st->stopped = true;
}

int kl_pipeline_run(ir_graph *g, const kl_pipeline_opts *o)
{
    run_state st = {o, o->stop_after && !strcmp(o->stop_after, "lower"), 0};
    bool train = o->mode == KL_MODE_TRAIN && !already_ran(g, "eval_mode");
    if (train) {
        run(&st, g, "autodiff", pass_autodiff);
        run(&st, g, "optimizer", pass_optimizer);
    } else {
        run(&st, g, "eval_mode", pass_eval_mode);
    }
    run(&st, g, "precision", pass_precision);
    if (train)
        run(&st, g, "accumulate", pass_accumulate);
    run(&st, g, "simplify", pass_simplify);
    if (train)
        run(&st, g, "recompute", pass_recompute);
    run(&st, g, "fusion", o->no_fusion ? pass_fusion_none : pass_fusion);
    run(&st, g, "schedule", pass_schedule);
    run(&st, g, "memplan", pass_memplan);
    return st.rc;
}

static const char *const pass_names[] = {"lower", "autodiff", "optimizer", "eval_mode", "precision", "accumulate",
                                         "simplify", "recompute", "fusion", "schedule", "memplan"};

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
    return "lower, autodiff, optimizer, precision, accumulate, simplify, recompute, fusion, schedule, memplan";
}
