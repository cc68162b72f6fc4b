/* The model summary (driver/model_summary.c): a table of the model file's
 * calls with their output, params, GEMM FLOPs, saved activations and
 * precision, printed by `kiln ir --summary` and at a training run's start. */
#ifndef KILN_MODEL_SUMMARY_H
#define KILN_MODEL_SUMMARY_H

#include <stdio.h>

#include "plan/plan.h"

/* The summary of p (a training plan, memory planned) of batch samples
 * per micro-batch and accumulate micro-batches per optimizer step. */
void kl_model_summary(const kl_plan *p, int64_t batch, int64_t accumulate, FILE *out);
/* One rank's params, state and arena in p (a plan for world ranks, after
 * sharding), and the ZeRO report of passes/rank_memory.c. */
void kl_model_summary_ranks(const kl_plan *p, int world, FILE *out);

#endif
