/* kiln bench --check-fusion (tools/fusion_check.c): each fused kernel of
 * a plan against the sum of its parts' kernels in the unfused plan. */
#ifndef KILN_FUSION_CHECK_H
#define KILN_FUSION_CHECK_H

#include <stdbool.h>

#include "plan/plan.h"

/* One fused kernel step of more than one part: its time (with the other
 * kernel steps of its group, when it lowers to several) and the sum of
 * the times of the unfused plan's kernel steps of its nodes. */
typedef struct kl_fusion_group {
    int step;         /* in the fused plan */
    int parts;        /* nodes of the unfused kernel steps it replaces */
    double fused_ms, parts_ms;
    bool slow;        /* fused_ms > parts_ms * (1 + margin) */
} kl_fusion_group;

/* The fused plan's kernel steps that replace the kernel steps of two or
 * more nodes of the unfused plan (matched by IR node: an unfused step's node is in the
 * fused group of the same node of the fused graph: same op, phase,
 * source location and scope, in order), with the steps' times
 * (fused_ms per fused step, unfused_ms per unfused step), each marked
 * slow against margin. Both plans must come from the same model and
 * options. out has room for fused->steps.n; returns how many. matched
 * (may be NULL): how many unfused kernel steps found their fused step
 * (all of them unless the fused graph lacks a node of the unfused one). */
int kl_fusion_groups(const kl_plan *fused, const double *fused_ms, const kl_plan *unfused, const double *unfused_ms,
                     double margin, kl_fusion_group *out, int *matched);

#endif
