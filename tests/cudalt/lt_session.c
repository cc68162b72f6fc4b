/* Training through the session with the GEMM epilogues done in the GEMM
 * step, as the CUDA backend does them with cuBLASLt, on the CPU: a CPU
 * backend whose gemm_epilogue applies the host stand-in of cuBLASLt's
 * epilogues (tests/cuda/lt_emu.h) to the CPU's product, against a plain
 * CPU backend, over several SGD steps of one model.
 *
 * What it checks that the kernel-by-kernel comparison (kernel_check)
 * cannot: the session skips exactly the kernel steps the epilogues cover
 * (launches counted), and the memory plan keeps every buffer the epilogue
 * writes in the GEMM step apart from what is still live there (a result
 * written one step early over a dead operand's memory would change the
 * loss). Losses per step and every parameter at the end agree within 1e-5
 * relative (the stand-in's f32 tanh GELU and the kernels' differ in the
 * last bits).
 *
 *   lt_session MODEL.kl STEPS */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/lt_emu.h"
#include "driver/compile.h"
#include "runtime/exec/backend.h"
#include "runtime/exec/session.h"
#include "unit/session_fixture.h"

static kl_backend_ops cpu_ops, standin_ops;
static int launches[2], epilogues;

static void count_launch(kl_backend *be, const kl_plan *plan, int kernel, void *const *bufs, const kl_kargs *args)
{
    launches[be->ops == &standin_ops]++;
    cpu_ops.launch(be, plan, kernel, bufs, args);
}

static bool standin_gemm_epilogue(kl_backend *be, const kl_gemm *g, void *a, void *b, void *c, const kl_epi_ptrs *x)
{
    (void)c;
    size_t bytes = (size_t)(g->m * g->n * ir_dtype_size(g->out_dtype));
    void *acc = kl_xmalloc(bytes + 1);
    cpu_ops.gemm(be, g, a, b, acc);
    kl_lt_call lc = kl_lt_describe(g);
    lt_emu_apply(&lc, g->out_dtype, acc, x->d, x->bias, x->aux);
    free(acc);
    epilogues++;
    return true;
}

static kl_exec *make(kl_session *s, const char *path)
{
    kl_compile_opts co = {.mode = KL_MODE_TRAIN, .verify = true};
    kl_compiled *c = kl_compile_file(path, &co);
    if (!c)
        exit(1);
    kl_exec *e = kl_compiled_exec(s, c, NULL);
    if (!e)
        exit(1);
    return e;
}

static double rel(double a, double b)
{
    return fabs(a - b) / fmax(fabs(b), 1e-30);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: lt_session MODEL.kl STEPS\n");
        return 2;
    }
    int steps = atoi(argv[2]);
    kl_backend *plain = fixture_cpu_backend(), *standin = fixture_cpu_backend();
    cpu_ops = *plain->ops;
    standin_ops = cpu_ops;
    standin_ops.launch = count_launch;
    standin_ops.gemm_epilogue = standin_gemm_epilogue;
    kl_backend_ops counted = cpu_ops;
    counted.launch = count_launch;
    plain->ops = &counted;
    standin->ops = &standin_ops;
    kl_session *sp = kl_session_new(plain, 5), *ss = kl_session_new(standin, 5);
    kl_exec *a = make(sp, argv[1]), *b = make(ss, argv[1]);
    int covered = 0, failures = 0;
    for (int i = 0; i < a->plan->steps.n; i++)
        covered += a->plan->steps.v[i].lt_covered;
    double worst = 0;
    for (int t = 1; t <= steps; t++) {
        kl_kargs args = {t, 5};
        kl_exec_random_inputs(a, (uint64_t)t);
        kl_exec_random_inputs(b, (uint64_t)t);
        kl_exec_run(a, KL_ALL_PHASES, &args);
        kl_exec_run(b, KL_ALL_PHASES, &args);
        double la = kl_exec_scalar(a, a->g->loss), lb = kl_exec_scalar(b, b->g->loss);
        worst = fmax(worst, rel(lb, la));
        if (!(rel(lb, la) <= 1e-5)) {
            printf("FAIL: step %d: loss %.9g with the epilogues in the GEMM step, %.9g without\n", t, lb, la);
            failures++;
        }
    }
    for (int i = 0; i < sp->persist.n; i++) {
        kl_persist *p = &sp->persist.v[i], *q = kl_session_find(ss, p->name);
        if (!q) {
            printf("FAIL: %s missing with the epilogues in the GEMM step\n", p->name);
            failures++;
            continue;
        }
        double maxabs = 0, maxdiff = 0;
        for (int64_t k = 0, n = ir_type_numel(&p->type); k < n; k++) {
            double x = kl_load_as(p->type.dtype, p->ptr, k), y = kl_load_as(q->type.dtype, q->ptr, k);
            maxabs = fmax(maxabs, fabs(x));
            maxdiff = fmax(maxdiff, fabs(x - y));
            if (isnan(x) != isnan(y))
                maxdiff = INFINITY;
        }
        double r = maxdiff / fmax(maxabs, 1e-30);
        worst = fmax(worst, r);
        if (!(r <= 1e-5)) {
            printf("FAIL: %s differs by %.3g relative with the epilogues in the GEMM step\n", p->name, r);
            failures++;
        }
    }
    /* Each run skips every covered step once the GEMM before it took the
     * epilogue. */
    if (covered == 0 || epilogues != covered * steps || launches[1] != launches[0] - covered * steps) {
        printf("FAIL: %d covered kernel steps, %d epilogues applied, %d launches against %d without (want %d, %d)\n",
               covered, epilogues, launches[1], launches[0], covered * steps, launches[0] - covered * steps);
        failures++;
    }
    printf("%s, %d steps: %d GEMM epilogues in the GEMM step (%d per step), %d kernel launches instead of %d; "
           "losses and %d persistent values within %.2g relative of the plain CPU run\n",
           argv[1], steps, epilogues, covered, launches[1], launches[0], sp->persist.n, worst);
    kl_exec_free(a);
    kl_exec_free(b);
    kl_session_free(sp);
    kl_session_free(ss);
    plain->ops = &cpu_ops;
    standin->ops = &cpu_ops;
    plain->ops->destroy(plain);
    standin->ops->destroy(standin);
    return failures ? 1 : 0;
}
