/* One function per pass; see each file's header for what it requires and
 * provides, and passes/pipeline.c for the table that orders them. A pass returns 0, or -1
 * after reporting a user error. */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "ir/ir.h"

/* What the compile function (driver/compile.c) hands every pass. */
typedef struct pass_ctx {
    bool no_fusion; /* fusion makes one group per node (the unfused baseline) */
    /* The arena bytes of the plan of g (a candidate graph the pass owns)
     * after the passes that follow recomputation, kernel lowering and
     * memory planning; -1 after an error. recompute measures with it. */
    int64_t (*measure_arena)(void *arg, ir_graph *g);
    void *measure_arg;
    int ranks; /* the world the graph is compiled for (shard); 0 or 1: one rank */
} pass_ctx;

/* tensor_parallel: split = column|row pairs cut across tensor_parallel
 * ranks (passes/shard_tp.c), before autodiff. */
int pass_shard_tp(ir_graph *g, const pass_ctx *cx);
/* The tensor-parallel group size g was split for (its params'
 * tp_ranks), or 1. */
int pass_tp_ranks(const ir_graph *g);
/* Params per rank of a tensor-parallel graph for a world of ranks, split
 * and replicated, against one rank's; one line (caller frees), NULL when
 * g is not split. */
char *pass_tp_memory(const ir_graph *g, int ranks);
/* Whether value v is cut by tensor parallelism (a split param's slice). */
bool pass_tp_is_split(const ir_graph *g, int v);
/* The gradients' squared norm over a tensor-parallel group (clip, fp16's
 * inf/NaN check): each rank sums its split params' squares and 1/T of its
 * replicated params' (equal on every rank of the group, so counted once in
 * all), then pass_tp_norm_sum all-reduces the total over the group. Both
 * return their operand unchanged when g is not split. sq: the squared
 * norm of param's gradient (or of a slice of such). */
int pass_tp_norm_share(ir_graph *g, int sq, int param);
int pass_tp_norm_sum(ir_graph *g, int total);
/* sync_batchnorm = true: batch norm's statistics all-reduced over the
 * data-parallel ranks (passes/sync_batchnorm.c), before autodiff. */
int pass_sync_batchnorm(ir_graph *g, const pass_ctx *cx);
/* pipeline: pipeline_parallel = P cuts the forward graph into P stages
 * (each live node's _stage; passes/pipeline_stages.c), before autodiff. */
int pass_pipeline_stages(ir_graph *g, const pass_ctx *cx);
/* The stages g was cut into (its forward nodes' _stage), or 0 when none. */
int pass_pipeline_count(const ir_graph *g);
/* The stages of a cut graph for a world of ranks: each stage's ops, FLOPs
 * and params, what crosses each cut, the balance and the schedule's
 * bubble; "# pipeline: " lines (caller frees), NULL when g is not cut. */
char *pass_pipeline_report(const ir_graph *g, int ranks);
/* Every node's stage in a cut graph after any pass (stage[g->nodes.n]:
 * 0 to P-1, -1 for dead nodes; passes/pipeline_assign.c); returns P, or
 * 0 when g is not cut (stage untouched). */
int pass_pipeline_assign(const ir_graph *g, int *stage);
/* The nodes from index `from` on (those a pass just emitted) run on
 * stage: their _stage (nothing when stage < 0). */
void pass_pipeline_mark(ir_graph *g, int from, int stage);
int pass_eval_mode(ir_graph *g, const pass_ctx *cx);
int pass_autodiff(ir_graph *g, const pass_ctx *cx);
int pass_optimizer(ir_graph *g, const pass_ctx *cx);
int pass_precision(ir_graph *g, const pass_ctx *cx);
int pass_accumulate(ir_graph *g, const pass_ctx *cx);
int pass_shard(ir_graph *g, const pass_ctx *cx);
/* shard = zero1 (stage 1) or zero2 (stage 2) on ranks > 1 ranks
 * (passes/shard_zero.c). */
int pass_shard_zero(ir_graph *g, int ranks, int64_t bucket_bytes, int stage);
/* Params, gradients and optimizer state per rank against ZeRO's formulas
 * for each stage, for ranks ranks; one line, caller frees. */
char *pass_rank_memory(const ir_graph *g, int ranks);
/* The model's params (elements), whole or (zero3) as the slices hold them. */
int64_t pass_param_count(const ir_graph *g);
/* The ranks g's collectives were made for (their ranks attribute), or 1
 * when it has none: what a dump says about its world. */
int pass_graph_ranks(const ir_graph *g);
int pass_simplify(ir_graph *g, const pass_ctx *cx);
int pass_constants(ir_graph *g, const pass_ctx *cx);
int pass_recompute(ir_graph *g, const pass_ctx *cx);
/* With cx->no_fusion, one kernel per node (kiln bench's baseline,
 * --no-fusion). */
int pass_fusion(ir_graph *g, const pass_ctx *cx);
int pass_schedule(ir_graph *g, const pass_ctx *cx);

/* Reports a pass's user error against the model file the graph came from. */
void pass_error(const ir_graph *g, kl_loc loc, const char *fmt, ...) KL_PRINTF(3, 4);
/* Bytes per kind of value and dtype: params, low-precision copies, state,
 * forward temporaries (activations) and backward temporaries, each the sum
 * of every value's size (before memory planning). One line; caller frees. */
char *pass_memory_summary(const ir_graph *g);
/* The persistent value with attribute role = ROLE, or -1. */
int pass_find_role(const ir_graph *g, const char *role);

#endif
