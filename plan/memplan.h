/* Memory planning of a plan's arena (plan/memplan.c, inplace.c,
 * memplan_report.c).
 *
 * The plan builder (plan/plan.c) asks, for every generated kernel,
 * which results may be written over an operand that dies there (in-place
 * results; the two kernel buffers are then printed without restrict), and
 * once every step is known it computes each arena buffer's live range over
 * the steps and places the buffers in one arena:
 *
 *   liveness   a buffer is live from the first step that touches it to the
 *              last, in plan (schedule) order over every phase; views and
 *              in-place results share their base buffer's range. Pinned
 *              buffers (inputs, the loss, reports, values the caller keeps)
 *              are live over the whole step: the runtime writes and reads
 *              them between runs.
 *   offsets    the heap simulator: buffers by decreasing size (and by other
 *              orderings) into the best-fitting free gap among the buffers
 *              live at the same time; the smallest arena wins. Offsets are
 *              multiples of KL_ARENA_ALIGN.
 *
 * Running only some phases (forward and backward per micro-batch, the
 * update once per step) is safe with ranges over the whole schedule: a
 * skipped step only skips writes, and every value a step reads is written
 * earlier in the same run (plan_check verifies this for each run). */
#ifndef KILN_MEMPLAN_H
#define KILN_MEMPLAN_H

#include "codegen/kir.h"
#include "plan.h"

#define KL_ARENA_ALIGN 256

typedef struct cg_group cg_group;

/* The in-place results of a kernel built for grp: pairs {operand, result}
 * of kernel buffer indices. A result qualifies when it comes from its
 * operand through operand 0 of ops the op table marks IR_F_INPLACE, the
 * operand is an arena temporary read by nothing after this group, neither
 * is pinned, and the kernel reads each operand element only where it then
 * writes the same result element (plan_kernel_inplace_ok). */
int plan_inplace_pairs(const kl_plan *p, const cg_group *grp, const kir_kernel *k, int pairs[][2], int max);
/* True when kernel k may write buffer out over buffer in: every load of in
 * and store of out sits directly in one loop nest that visits each of
 * out's elements once, at the same index, and no load of in follows a
 * store of out in that body. */
bool plan_kernel_inplace_ok(const kir_kernel *k, int in, int out);

/* KL_ARG_READ / WRITE of kernel buffer buf, with WRITE_FIRST when the
 * kernel's first access to it is a store to every element (a loop nest
 * as large as the buffer, no condition) before any load. */
unsigned plan_kernel_arg_use(const kir_kernel *k, int buf);

/* Sets first/last of every arena buffer (steps, in plan order). */
void plan_liveness(kl_plan *p);
/* The same over the steps marked in steps (NULL: all) and the extra
 * touches: a buffer a run reads or writes at a step's place outside its
 * kernels (a pipeline stage's transfers); a buffer neither touches is
 * not live (its offset 0, never dereferenced). */
void plan_liveness_of(kl_plan *p, const bool *steps, const kl_touch *extra, int nextra);
/* Offsets by the heap simulator (best of several orderings); sets
 * arena_bytes, arena_lower_bound and arena_unplanned. */
void plan_assign_offsets(kl_plan *p);
/* Every buffer in its own memory, in buffer order (planning off). */
void plan_assign_unplanned(kl_plan *p);

/* The buffer whose data b holds: b itself, or the base of a reshape view
 * (an in-place result is other data in its operand's memory; the memory's
 * owner is plan_real_buffer). */
int plan_data_of(const kl_plan *p, int b);

/* "arena 12.34 MB (lower bound 12.01 MB, 1.03x; unplanned 40.00 MB)" */
char *plan_summary(const kl_plan *p);
/* The report: the summary, buffer counts, and the top largest arena
 * buffers with their live ranges and offsets; every line starts with
 * prefix (e.g. "# "). */
char *plan_report(const kl_plan *p, int top, const char *prefix);
/* A text timeline: one row per arena buffer ordered by offset, a bar over
 * the steps it is live; rows at the same offsets share memory. */
char *plan_timeline(const kl_plan *p);
/* A name for buffer b: the value's name, or "scratch of <step label>". */
char *plan_buffer_name(const kl_plan *p, int b);

/* The plan checker: offsets aligned and inside the arena, no two buffers
 * live at the same time overlap, and a simulation of micro_batches runs
 * (forward and backward each, the update with the last, the inputs
 * written before each) finds every read of an arena buffer after a write
 * of the same data in that run, and the pinned values intact after each
 * run; with GEMM epilogues, once more as the CUDA backend runs them (D,
 * aux and the bias gradient written in the GEMM step, apart from what it
 * reads, the covered kernel steps skipped). Returns the number of problems; the first few are described in
 * why (when not NULL). */
int plan_check(const kl_plan *p, int micro_batches, kl_buf *why);

#endif
