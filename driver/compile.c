/* The compile function, top to bottom:
 *
 *   load      the frontend: a model file (or an IR dump) to a graph
 *   passes    the rows of pass_table for the mode (passes/pipeline.c),
 *             the verifier after each when asked; each row is a stage of
 *             its own, and "passes" names the end of them all
 *   kernels   kernel lowering: one kernel per fusion group, library calls
 *             (plan_lower)
 *   memplan   memory planning: liveness, offsets (plan_memory); the
 *             plan's bytes checked against the machine's memory
 *   check     the plan checker (plan_check) over the train block's
 *             micro-batches: a broken plan is an internal error here
 *
 * Every caller (kiln ir/build/bench, the training executable, the budget
 * search, the tests) comes through here, and recompute measures its
 * candidates through the hook this file hands it, so no later stage is
 * ever called by hand elsewhere. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "plan/memplan.h"
#include "ir/train_config.h"

static bool already_ran(const ir_graph *g, const char *name)
{
    for (int i = 0; i < g->passes.n; i++)
        if (!strcmp(g->passes.v[i], name))
            return true;
    return false;
}

static bool is(const char *stop, const char *name)
{
    return stop && !strcmp(stop, name);
}

/* recompute's hook: the passes after recompute (fused: candidates are
 * measured as fused plans, whatever the compile's fusion setting), kernel
 * lowering and memory planning of g, which the caller owns. */
static int64_t measure_arena(void *arg, ir_graph *g)
{
    (void)arg;
    pass_ctx cx = {.no_fusion = false};
    for (int i = pass_index("recompute") + 1; i < pass_table_len; i++)
        if ((pass_table[i].modes & PASS_TRAIN) && pass_table[i].run(g, &cx))
            return -1;
    kl_plan *p = plan_lower(g, NULL);
    plan_memory(p);
    int64_t arena = p->arena_bytes;
    plan_free(p);
    return arena;
}

/* The plan's params, state and arena fit in the machine's memory; the
 * hint scales the batch down in proportion to the arena. Checked before
 * the checker (whose map of the arena grows with it) and before any
 * runtime allocates the plan: a batch or a param too large is a user's
 * error with a hint, not an out-of-memory abort minutes later. */
static int check_plan_size(const ir_graph *g, const kl_plan *p, int64_t batch)
{
    int64_t persistent = 0;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (ir_is_persistent(v))
            persistent += ir_type_bytes(&v->type); /* each below 2^53 (ir_type_in_range) */
    }
    int64_t total = persistent + p->arena_bytes, machine = kl_machine_memory();
    if (total <= machine)
        return 0;
    char what[256], hint[160], ps[32];
    kl_format_bytes(ps, sizeof ps, persistent);
    /* The file first, as every error about a model file names it. */
    snprintf(what, sizeof what, "%s: model %s: the plan (params and state %s + the arena of batch %lld)",
             g->source ? g->source : "(no file)", g->name, ps, (long long)batch);
    int64_t room = machine - persistent, fit = p->arena_bytes > 0 ? (int64_t)((double)batch * (double)room / (double)p->arena_bytes) : 0;
    if (room <= 0)
        snprintf(hint, sizeof hint, "the params and optimizer state alone do not fit: make the model smaller");
    else if (fit >= 1 && fit < batch)
        snprintf(hint, sizeof hint, "try --batch %lld (or less) with --accumulate to keep the effective batch", (long long)fit);
    else
        snprintf(hint, sizeof hint, "try a smaller --batch");
    return kl_check_alloc(what, total, 0, hint);
}

/* The IR passes of o->mode; true when stopped. -1 in *rc after an error. */
static bool run_passes(ir_graph *g, const kl_compile_opts *o, int *rc)
{
    if (is(o->stop_after, "lower"))
        return true;
    bool train = o->mode == KL_MODE_TRAIN && !already_ran(g, "eval_mode");
    /* A pass this mode skips would never stop the loop below: the whole
     * pipeline would run and pass for the stage asked for. */
    int stop = o->stop_after ? pass_index(o->stop_after) : -1;
    if (stop >= 0 && !(pass_table[stop].modes & (train ? PASS_TRAIN : PASS_EVAL))) {
        const char *mode = train ? "training"
                           : o->mode == KL_MODE_EVAL ? "evaluation (--eval)"
                                                     : "evaluation (this IR dump went through eval_mode)";
        kl_error("%s: stage '%s' does not run in %s; it runs only in %s", g->source ? g->source : g->name,
                 o->stop_after, mode, train ? "evaluation (--eval)" : "training");
        *rc = -1;
        return true;
    }
    pass_ctx cx = {.no_fusion = o->no_fusion, .measure_arena = measure_arena, .measure_arg = NULL, .ranks = o->ranks};
    for (int i = 0; i < pass_table_len; i++) {
        const pass_entry *p = &pass_table[i];
        if (!(p->modes & (train ? PASS_TRAIN : PASS_EVAL)))
            continue;
        if (!already_ran(g, p->name)) {
            if (p->run(g, &cx)) {
                *rc = -1;
                return true;
            }
            ir_graph_mark_pass(g, p->name);
            if (o->verify && ir_verify(g))
                kl_panic("the graph fails the verifier after pass %s", p->name);
        }
        if (is(o->stop_after, p->name))
            return true;
    }
    return is(o->stop_after, "passes");
}

kl_compiled *kl_compile_graph(ir_graph *g, const kl_compile_opts *o)
{
    if (!g)
        return NULL;
    kl_compiled *c = kl_xcalloc(1, sizeof *c);
    c->g = g;
    int rc = 0;
    if (run_passes(g, o, &rc)) {
        if (rc) {
            kl_compiled_free(c);
            return NULL;
        }
        /* A dump that went through memory planning: its plan again. */
        if (already_ran(g, "memplan")) {
            c->plan = plan_lower(g, o->plan);
            plan_memory(c->plan);
            c->memory_planned = true;
        }
        return c;
    }

    c->plan = plan_lower(g, o->plan);
    if (is(o->stop_after, "kernels"))
        return c;

    plan_memory(c->plan);
    c->memory_planned = true;
    kl_train_config cfg;
    kl_train_read(&g->train, &cfg);
    int micro_batches = (int)cfg.accumulate;
    int64_t batch = cfg.batch;
    kl_train_config_free(&cfg);
    if (!o->elsewhere && check_plan_size(g, c->plan, batch)) {
        kl_compiled_free(c);
        return NULL;
    }
    if (!already_ran(g, "memplan"))
        ir_graph_mark_pass(g, "memplan");
    if (is(o->stop_after, "memplan"))
        return c;

    kl_buf why = {0};
    if (plan_check(c->plan, micro_batches, &why))
        kl_panic("the memory plan of %s fails the plan checker:\n%s", g->name, why.s);
    kl_buf_free(&why);
    return c;
}

kl_compiled *kl_compile_source(const kl_source *src, const kl_compile_opts *o)
{
    kl_lower_opts lo = {o->kv};
    return kl_compile_graph(kl_load_source(src, &lo), o);
}

kl_compiled *kl_compile_file(const char *path, const kl_compile_opts *o)
{
    kl_lower_opts lo = {o->kv};
    return kl_compile_graph(kl_load(path, &lo), o);
}

ir_graph *kl_compile_load(const kl_source *src, const char *const *kv)
{
    kl_lower_opts lo = {kv};
    return kl_load_source(src, &lo);
}

ir_graph *kl_compiled_take_graph(kl_compiled *c)
{
    ir_graph *g = c->g;
    plan_free(c->plan);
    free(c);
    return g;
}

void kl_compiled_free(kl_compiled *c)
{
    if (!c)
        return;
    plan_free(c->plan);
    ir_graph_free(c->g);
    free(c);
}

kl_exec *kl_compiled_exec(kl_session *s, kl_compiled *c, kl_exec *host)
{
    if (!c->plan || !c->memory_planned)
        kl_panic("an exec needs a finished plan (compiled through memory planning)");
    ir_graph *g = c->g;
    kl_plan *p = c->plan;
    free(c);
    return host ? kl_exec_new_sharing(s, g, p, host) : kl_exec_new(s, g, p);
}

bool kl_compile_has_stage(const char *name)
{
    return !strcmp(name, "all") || !strcmp(name, "lower") || pass_index(name) >= 0 || !strcmp(name, "passes") ||
           !strcmp(name, "kernels") ||
           !strcmp(name, "memplan") || !strcmp(name, "check");
}

char *kl_compile_stage_names(void)
{
    kl_buf b = {0};
    kl_buf_puts(&b, "lower");
    for (int i = 0; i < pass_table_len; i++)
        kl_buf_printf(&b, ", %s", pass_table[i].name);
    kl_buf_puts(&b, ", passes, kernels, memplan, check");
    return kl_buf_take(&b);
}
