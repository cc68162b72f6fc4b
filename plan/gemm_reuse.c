/* gemm_reuse: which 16-bit GEMM operands a later GEMM step of the same
 * run reads unchanged (plan_mark_gemm_reuse).
 *
 * requires: memory planning (arena offsets and views); provides: the
 * keep and reuse ids of kl_gemm. A backend that converts an operand
 * before its library GEMM (the CPU widens f16 and bf16 to fp32) may keep
 * the converted copy of a keep operand and hand it to the operands whose
 * reuse names it, instead of converting the same elements again: the
 * weight read by a forward GEMM and by its input gradient's, the
 * activation read by a forward GEMM and by its weight gradient's.
 *
 * Rule: operand Y of GEMM step j reuses operand X of GEMM step i < j when
 * both read the same buffer's memory (views followed), the same number of
 * elements from its start, in the same dtype, and no step from i to j - 1
 * writes memory that overlaps it (a kernel's written arguments, a GEMM's
 * C and its epilogue's buffers, every buffer a collective touches; arena
 * buffers overlap when their byte ranges do, so a buffer that later takes
 * the same arena bytes ends the reuse). That holds when the steps run in
 * the plan's order with nothing else writing in between: a backend keeps
 * copies only within one run of the steps (runtime/exec/session.c). */
#include <stdlib.h>

#include "plan.h"

typedef struct span {
    int real;          /* the buffer whose memory it is */
    bool arena;
    int64_t lo, hi;    /* arena: its bytes */
} span;

static span span_of(const kl_plan *p, int buf)
{
    int r = plan_real_buffer(p, buf);
    const kl_buffer *b = &p->buffers.v[r];
    span s = {r, b->region == KL_REGION_ARENA, b->offset, b->offset + b->bytes};
    return s;
}

static bool overlap(span x, span y)
{
    if (x.arena && y.arena)
        return x.lo < y.hi && y.lo < x.hi;
    return x.real == y.real;
}

/* Elements a GEMM operand reads from its buffer's start (the CPU
 * backend's widened extent). */
static int64_t extent(int64_t off, int64_t stride, int64_t batch, int64_t each)
{
    return off + stride * (batch - 1) + each;
}

typedef struct operand {
    int step, which; /* which: 0 A, 1 B */
    span mem;
    int64_t n;
    ir_dtype dt;
} operand;

static operand operand_of(const kl_plan *p, int step, int which)
{
    const kl_gemm *g = &p->steps.v[step].gemm;
    operand o = {step, which, span_of(p, which ? g->b : g->a), 0, g->dtype};
    o.n = which ? extent(g->off_b, g->stride_b, g->batch, g->k * g->n)
                : extent(g->off_a, g->stride_a, g->batch, g->m * g->k);
    return o;
}

static bool writes(const kl_plan *p, const kl_step *st, span mem)
{
    if (st->kind == KL_STEP_KERNEL) {
        for (int k = 0; k < st->nargs; k++)
            if ((st->rw[k] & (KL_ARG_WRITE | KL_ARG_WRITE_FIRST)) && overlap(span_of(p, st->args[k]), mem))
                return true;
        return false;
    }
    int bufs[IR_KERNEL_MAX_BUFS];
    int n = plan_step_buffers(st, bufs);
    /* A GEMM: every buffer but A and B (C, the epilogue's); a collective:
     * all of them. */
    for (int k = st->kind == KL_STEP_GEMM ? 2 : 0; k < n; k++)
        if (overlap(span_of(p, bufs[k]), mem))
            return true;
    return false;
}

static int *slot(kl_gemm *g, int which, bool keep)
{
    return keep ? (which ? &g->keep_b : &g->keep_a) : (which ? &g->reuse_b : &g->reuse_a);
}

void plan_mark_gemm_reuse(kl_plan *p)
{
    int next_id = 1;
    for (int i = 0; i < p->steps.n; i++) {
        kl_gemm *g = &p->steps.v[i].gemm;
        if (p->steps.v[i].kind == KL_STEP_GEMM)
            g->keep_a = g->keep_b = g->reuse_a = g->reuse_b = 0;
    }
    for (int i = 0; i < p->steps.n; i++) {
        if (p->steps.v[i].kind != KL_STEP_GEMM)
            continue;
        ir_dtype dt = p->steps.v[i].gemm.dtype;
        if (dt != IR_F16 && dt != IR_BF16)
            continue;
        for (int which = 0; which < 2; which++) {
            if (*slot(&p->steps.v[i].gemm, which, false))
                continue; /* reads an earlier step's copy, which covers the later readers too */
            operand x = operand_of(p, i, which);
            int id = 0;
            for (int j = i + 1; j < p->steps.n; j++) {
                kl_step *st = &p->steps.v[j];
                if (st->kind == KL_STEP_GEMM && st->gemm.dtype == dt)
                    for (int w = 0; w < 2; w++) {
                        operand y = operand_of(p, j, w);
                        if (y.mem.real != x.mem.real || y.n != x.n || *slot(&st->gemm, w, false))
                            continue;
                        if (!id)
                            id = next_id++;
                        *slot(&st->gemm, w, false) = id;
                    }
                if (writes(p, st, x.mem))
                    break;
            }
            *slot(&p->steps.v[i].gemm, which, true) = id;
        }
    }
}
