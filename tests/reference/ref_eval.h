/* An independent reference evaluator of IR graphs: naive, in double
 * precision, one small function per op of ir/ops.def, written from the
 * op's definition (shape rules, attribute specs, the op docs), not from
 * the kernel builders in codegen/. Tests run a graph through it and
 * through the generated kernels and compare (tests/reference/reference_check.c).
 *
 * Values live as dense row-major doubles, one array per IR value. Each
 * result is rounded to its value's dtype as it is stored (an f32 value
 * holds f32 numbers), so errors do not drift apart over a deep graph;
 * everything inside an op is computed in double. */
#ifndef KILN_REF_EVAL_H
#define KILN_REF_EVAL_H

#include "ir/ir.h"

typedef struct ref_eval {
    const ir_graph *g;
    double **v;      /* per value: numel doubles, or NULL before it is set */
    int64_t step;    /* the kernels' step argument (grad_accumulate) */
    int64_t steps;   /* micro-batches per optimizer step */
} ref_eval;

ref_eval *ref_new(const ir_graph *g);
void ref_free(ref_eval *r);
/* Sets value v (inputs, params, state; or a value given from outside,
 * such as dropout's mask) from n doubles. */
void ref_set(ref_eval *r, int v, const double *x);
/* Runs every live node whose phase is in phase_mask (1 << IR_PHASE_*),
 * in graph order. Persistent operands an op mutates are written in
 * place. Panics on an operand that has no value. */
void ref_run(ref_eval *r, unsigned phase_mask);
/* The size of the terms a value of a sum (sum, mean, sum_to, add,
 * matmul) is made of: node n run again on the absolute values of its
 * operands, so that mass[i] >= |value[i]|. Rounding in the kernels (f32
 * partial sums) errs in proportion to the terms, not to the result: a
 * gradient that cancels to exactly zero in exact arithmetic (a key bias:
 * softmax ignores a shift shared by every key) comes out at the terms'
 * rounding noise, which its own size cannot bound. The caller frees;
 * NULL for every other op. */
double *ref_mass(ref_eval *r, const ir_node *n);
/* x rounded to dtype dt as storage would round it. */
double ref_round(ir_dtype dt, double x);

#endif
