/* One GEMM through a backend against an f64 reference computed from the
 * same operands (unit.dnnl and unit.gemm16 share it):
 *  - the bound: fp32 accumulation error (k * 2^-23 * sum |a b|) plus half
 *    an ulp of the result's dtype; a wrong transpose, stride or beta is
 *    off by far more;
 *  - the same call twice gives the same bits.
 * Include after cmocka.h (print_error). */
#ifndef KILN_TESTS_GEMM_CHECK_H
#define KILN_TESTS_GEMM_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/scalar.h"
#include "runtime/exec/backend.h"

typedef struct shape {
    int ta, tb;
    int64_t m, n, k, batch;
    int64_t stride_a, stride_b, stride_c, off_a, off_b, off_c;
    bool accumulate;
    double alpha, beta;
    ir_dtype out;
} shape;

static uint64_t rng = 12345;
static float uniform(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Elements from the offset to the end of the last batch item. */
static int64_t extent(int64_t off, int64_t stride, int64_t batch, int64_t each)
{
    return off + stride * (batch - 1) + each;
}

static uint16_t to16(ir_dtype dt, float v)
{
    return dt == IR_F16 ? kl_f32_to_f16(v) : kl_f32_to_bf16(v);
}

static float from16(ir_dtype dt, uint16_t h)
{
    return dt == IR_F16 ? kl_f16_to_f32(h) : kl_bf16_to_f32(h);
}

/* Runs shape s on backend be with operands of dtype in (bf16 or f16, the
 * result fp32 or of dtype in as the shape says; or f32 with an f32
 * result); returns 0 when every element is within the bound, else prints
 * the first bad one. */
static int check_shape(kl_backend *be, const shape *shp, ir_dtype in, const char *who)
{
    shape wide = *shp;
    wide.out = in == IR_F32 || shp->out == IR_F32 ? IR_F32 : in;
    const shape *s = &wide;
    size_t isize = in == IR_F32 ? 4 : 2;
    int64_t na = extent(s->off_a, s->stride_a, s->batch, s->m * s->k);
    int64_t nb = extent(s->off_b, s->stride_b, s->batch, s->k * s->n);
    int64_t nc = extent(s->off_c, s->stride_c, s->accumulate ? 1 : s->batch, s->m * s->n);
    void *a = malloc(isize * (size_t)na), *b = malloc(isize * (size_t)nb);
    size_t csize = s->out == IR_F32 ? 4 : 2;
    void *c = malloc(csize * (size_t)nc), *c2 = malloc(csize * (size_t)nc);
    double *ref = malloc(8 * (size_t)nc), *mag = malloc(8 * (size_t)nc);
    for (int64_t i = 0; i < na; i++)
        if (in == IR_F32)
            ((float *)a)[i] = uniform();
        else
            ((uint16_t *)a)[i] = to16(in, uniform());
    for (int64_t i = 0; i < nb; i++)
        if (in == IR_F32)
            ((float *)b)[i] = uniform();
        else
            ((uint16_t *)b)[i] = to16(in, uniform());
    for (int64_t i = 0; i < nc; i++) {
        float v = uniform();
        if (s->out == IR_F32)
            ((float *)c)[i] = v;
        else
            ((uint16_t *)c)[i] = to16(s->out, v);
        ref[i] = s->out == IR_F32 ? v : from16(s->out, ((uint16_t *)c)[i]);
        mag[i] = fabs(ref[i] * s->beta);
    }
    /* The reference, in the order the GEMM means: C = alpha AB + beta C,
     * then (accumulating) + alpha AB for every further item. */
    for (int64_t t = 0; t < s->batch; t++) {
        int64_t oc = s->off_c + t * s->stride_c;
        double beta = s->accumulate && t > 0 ? 1.0 : s->beta;
        for (int64_t i = 0; i < s->m; i++)
            for (int64_t j = 0; j < s->n; j++) {
                double sum = 0, abs_sum = 0;
                for (int64_t p = 0; p < s->k; p++) {
                    int64_t ia = s->off_a + t * s->stride_a + (s->ta ? p * s->m + i : i * s->k + p);
                    int64_t ib = s->off_b + t * s->stride_b + (s->tb ? j * s->k + p : p * s->n + j);
                    double x = in == IR_F32 ? ((float *)a)[ia] : from16(in, ((uint16_t *)a)[ia]);
                    double y = in == IR_F32 ? ((float *)b)[ib] : from16(in, ((uint16_t *)b)[ib]);
                    sum += x * y;
                    abs_sum += fabs(x * y);
                }
                int64_t e = oc + i * s->n + j;
                ref[e] = s->alpha * sum + beta * ref[e];
                mag[e] += fabs(s->alpha) * abs_sum;
            }
    }
    kl_gemm g = {.dtype = in, .out_dtype = s->out, .ta = s->ta, .tb = s->tb, .m = s->m, .n = s->n, .k = s->k,
                 .batch = s->batch, .stride_a = s->stride_a, .stride_b = s->stride_b, .stride_c = s->stride_c,
                 .off_a = s->off_a, .off_b = s->off_b, .off_c = s->off_c, .accumulate = s->accumulate,
                 .alpha = s->alpha, .beta = s->beta};
    memcpy(c2, c, csize * (size_t)nc);
    be->ops->gemm(be, &g, a, b, c);
    be->ops->gemm(be, &g, a, b, c2);
    int bad = memcmp(c, c2, csize * (size_t)nc) != 0;
    if (bad)
        print_error("%s: %lldx%lldx%lld: the same GEMM twice gave different bits\n", who, (long long)s->m,
                    (long long)s->n, (long long)s->k);
    double eps_out = s->out == IR_F32 ? 0x1p-24 : s->out == IR_F16 ? 0x1p-11 : 0x1p-8;
    for (int64_t e = s->off_c; e < nc && !bad; e++) {
        double got = s->out == IR_F32 ? ((float *)c)[e] : from16(s->out, ((uint16_t *)c)[e]);
        double bound = (double)(s->k * s->batch + 2) * 0x1p-23 * mag[e] + eps_out * fabs(ref[e]) + 1e-30;
        if (fabs(got - ref[e]) > bound) {
            print_error("%s: %lldx%lldx%lld ta %d tb %d batch %lld acc %d alpha %g beta %g out %s: C[%lld] = %.9g, "
                        "want %.9g +- %.3g\n",
                        who, (long long)s->m, (long long)s->n, (long long)s->k, s->ta, s->tb, (long long)s->batch,
                        s->accumulate, s->alpha, s->beta, ir_dtype_name(s->out), (long long)e, got, ref[e], bound);
            bad = 1;
        }
    }
    free(a), free(b), free(c), free(c2), free(ref), free(mag);
    return bad;
}

#endif
