/* The compile function: a model file, or a graph, to a runnable plan, by
 * one path that every tool, the training executable and every test take
 * (driver/compile.c). */
#ifndef KILN_COMPILE_H
#define KILN_COMPILE_H

#include "plan/plan.h"
#include "frontend/lower.h"
#include "passes/pipeline.h"
#include "runtime/exec/session.h"

typedef struct kl_compile_opts {
    /* train settings over the train block ("batch" -> "64"): NULL-
     * terminated key/value pairs, or NULL */
    const char *const *kv;
    /* the stage to stop after: "lower" (the frontend), a pass of the pass
     * table, "passes" (every pass of the table), "kernels", "memplan",
     * "check", or "all" (NULL: all) */
    const char *stop_after;
    bool verify;     /* the IR verifier after every pass */
    kl_mode mode;    /* train: forward, backward, update; eval: forward */
    bool no_fusion;  /* one kernel per node (the unfused baseline) */
    const kl_plan_opts *plan; /* kept values, memory planning off (NULL: defaults) */
    int ranks;       /* the ranks the run has (the shard pass); 0 or 1: one */
    /* the plan runs on another machine (kiln plan for a GPU cluster): its
     * size is not checked against this machine's memory */
    bool elsewhere;
} kl_compile_opts;

typedef struct kl_compiled {
    ir_graph *g;
    kl_plan *plan;       /* NULL when stopped before kernel lowering */
    bool memory_planned; /* the plan has its offsets (memory planning ran) */
} kl_compiled;

/* load -> IR passes (pass_table, those of o->mode) -> kernel lowering ->
 * memory planning -> plan check, stopping after o->stop_after. Passes the
 * graph already went through (an IR dump records them) are skipped; a
 * graph that records memory planning gets its plan again (the plan is not
 * part of the dump). NULL after an error (reported). */
kl_compiled *kl_compile_file(const char *path, const kl_compile_opts *o);
kl_compiled *kl_compile_source(const kl_source *src, const kl_compile_opts *o);
/* The same from a loaded graph, which it takes (and frees on error). */
kl_compiled *kl_compile_graph(ir_graph *g, const kl_compile_opts *o);
void kl_compiled_free(kl_compiled *c);
/* c's graph, to compile further with kl_compile_graph (after "passes",
 * with plan options that name values of the final graph); frees the rest. */
ir_graph *kl_compiled_take_graph(kl_compiled *c);
/* An exec of c's finished plan in session s (kl_exec_new, or
 * kl_exec_new_sharing with host when host is not NULL); takes c. NULL
 * after an error. */
kl_exec *kl_compiled_exec(kl_session *s, kl_compiled *c, kl_exec *host);

/* The load stage alone: src lowered with the overrides kv (NULL-terminated
 * pairs, or NULL), to compile later with kl_compile_graph. */
ir_graph *kl_compile_load(const kl_source *src, const char *const *kv);

/* True when name is a stage kl_compile_opts.stop_after accepts. */
bool kl_compile_has_stage(const char *name);
/* "lower, autodiff, ..., check" for help texts; caller frees. */
char *kl_compile_stage_names(void);

#endif
