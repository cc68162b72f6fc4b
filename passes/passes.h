/* One function per pass; see each file's header for what it requires and
 * provides, and passes/pipeline.c for the order. A pass returns 0, or -1
 * after reporting a user error. */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "../ir/ir.h"

int pass_eval_mode(ir_graph *g);
int pass_autodiff(ir_graph *g);
int pass_optimizer(ir_graph *g);
int pass_precision(ir_graph *g);
int pass_accumulate(ir_graph *g);
int pass_simplify(ir_graph *g);
int pass_fusion(ir_graph *g);
/* The fusion pass with fusion off: one kernel per node (kiln bench's
 * baseline, --no-fusion). */
int pass_fusion_none(ir_graph *g);
int pass_schedule(ir_graph *g);
int pass_recompute(ir_graph *g);
int pass_memplan(ir_graph *g);

/* Reports a pass's user error against the model file the graph came from. */
void pass_error(const ir_graph *g, kl_loc loc, const char *fmt, ...) KL_PRINTF(3, 4);
/* Bytes per kind of value and dtype: params, low-precision copies, state,
 * forward temporaries (activations) and backward temporaries, each the sum
 * of every value's size (before memory planning). One line; caller frees. */
char *pass_memory_summary(const ir_graph *g);
/* The persistent value with attribute role = ROLE, or -1. */
int pass_find_role(const ir_graph *g, const char *role);

#endif
