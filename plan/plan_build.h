/* What plan.c, which lowers a fused graph to a plan, lends the files that
 * lower one kind of node to steps of their own (conv.c). Private to plan/. */
#ifndef KILN_PLAN_BUILD_H
#define KILN_PLAN_BUILD_H

#include "codegen/cg.h"
#include "plan.h"

/* A scratch buffer (not an IR value) of numel elements; returns its
 * buffer index. A kernel names it by plan_scratch_id(index). */
int plan_scratch(kl_plan *p, ir_dtype dt, int64_t numel);
int plan_scratch_id(int buf);
/* The buffer of value v (or of a scratch id), made on first request. */
int plan_buffer_of(kl_plan *p, int v);

/* Builds a kernel for grp by hand instead of from its nodes. */
typedef void (*plan_kernel_builder)(cg_builder *b, void *arg);
/* Appends a kernel step for grp; custom, when not NULL, builds it. */
void plan_add_kernel_step_with(kl_plan *p, const cg_group *grp, plan_kernel_builder custom, void *arg);

/* Appends the steps of convolution node n (conv2d or one of its
 * gradients), which grp holds alone (conv.c). */
void plan_add_conv_steps(kl_plan *p, const cg_group *grp, const ir_node *n);

/* Records in GEMM step `gemm` the cuBLASLt epilogue that computes what
 * kernel step `kernel` (right after it, computing grp) does, when there
 * is one (lt_epilogue.c). */
void plan_match_lt_epilogue(kl_plan *p, int gemm, int kernel, const cg_group *grp);

#endif
