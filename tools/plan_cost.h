/* The cost model of kiln plan (tools/plan_cost.c): one training plan's
 * optimizer step on a cluster, predicted from the plan alone.
 *
 *   each GEMM       max(FLOPs / (peak x eff.gemm), bytes / bw) + launch
 *   attention       the same with its FLOPs (2 t_q t_k (d + d_v) a head
 *                   forward, halved when causal; 3 and 4 products for the
 *                   two backward kernels) and eff.attention
 *   other kernels   bytes / (bw x eff.kernel) + launch
 *   collectives     alpha-beta, the faster of a ring and a tree over the
 *                   group's ranks on the link they share (across nodes
 *                   when the group spans nodes): all_reduce ring
 *                   2 (n-1) alpha + 2 (n-1)/n S / bw, tree 2 log2(n)
 *                   alpha + 2 S / bw; reduce_scatter and all_gather the
 *                   ring's half; bw = link x eff.link
 *   the step        the executor's order: forward and backward once per
 *                   micro-batch, the update with the last; with overlap on
 *                   a collective runs on a channel of its own from where
 *                   the schedule placed it, and a step touching its
 *                   memory waits for it (runtime/exec/overlap.h); CPU
 *                   ranks' communication thread hides it only on a core
 *                   no rank holds (world < cores), else it is in line
 *   pipeline        per stage s one micro-batch's forward and backward
 *                   F_s + B_s (with its transfers, alpha + bytes / bw):
 *                   (m - 1) max_s (F_s + B_s) + sum_s (F_s + B_s), the
 *                   ideal bubble (P - 1) / (m + P - 1); gpipe and 1f1b
 *                   take the same time (they differ in memory)
 *   CPU ranks       more ranks than cores share them: the step is at
 *                   least every rank's busy time (steps, collectives,
 *                   transfers, the host's loop; not its waits, in which
 *                   it yields the core) over the cores. */
#ifndef KILN_PLAN_COST_H
#define KILN_PLAN_COST_H

#include "cluster.h"
#include "plan/plan.h"

typedef struct kl_layout {
    const char *shard;     /* dp, zero1, zero2, zero3 */
    int T, P, D;           /* tensor, pipeline, data-parallel sizes: world = T P D */
    const char *schedule;  /* gpipe, 1f1b (P > 1) */
    int64_t micro, accumulate;
    bool recompute;
    const char *precision; /* fp32, bf16, fp16 */
    bool overlap;
} kl_layout;

typedef struct kl_cost {
    double step_s;     /* max(critical_s, cores_s) */
    double critical_s; /* the critical path: one rank's steps, waits and the pipeline's fill and drain */
    double cores_s;    /* more ranks than cores: every rank's busy time over the cores (else 0) */
    double compute_s;  /* steps bound by FLOPs (on the critical path, summed) */
    double memory_s;   /* steps bound by bytes */
    double launch_s;
    double intra_s, inter_s;       /* collective and transfer time on each link (not all exposed) */
    double exposed_intra_s, exposed_inter_s;
    double intra_bytes, inter_bytes; /* sent per rank per step on each link */
    double flops;      /* per rank per step, as the plan runs them */
    double bubble;     /* (P - 1) / (m + P - 1) */
    const char *bound; /* compute, memory, intra-node, inter-node, launch, cores */
} kl_cost;

/* Step times measured on this CPU (tools/plan_calib.c). */
typedef struct kl_calib kl_calib;
/* Times the model's one-rank plans (train overrides kv, NULL-terminated
 * pairs) at each precision and micro-batch; NULL after an error (reported). */
kl_calib *kl_calib_measure(const char *file, const char *const *kv, const char *const *precisions, int nprec,
                           const int64_t *micros, int nmicro);
void kl_calib_free(kl_calib *c);
/* A step's seconds from the measured points of its key, or -1 when none. */
double kl_calib_seconds(const kl_calib *c, const kl_plan *p, const kl_step *st);
/* The context factor at a micro-batch (1 without calibration), and the
 * bandwidth of the timed kernels (bytes/s; 0 without). */
double kl_calib_factor(const kl_calib *c, int64_t micro);
double kl_calib_kernel_bw(const kl_calib *c);
int kl_calib_points(const kl_calib *c);

/* Predicts p's step (the plan one rank of layout L runs) on c, with the
 * measured step times of calib where it has them (NULL: the roofline). */
void kl_plan_cost(const kl_plan *p, const kl_cluster *c, const kl_calib *calib, const kl_layout *L, kl_cost *out);

/* An attention kernel's FLOPs (0 for other kernels). */
double kl_attention_flops(const kl_kernel_src *k);

#endif
