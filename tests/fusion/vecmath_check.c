/* base/scalar.h's vectorisable exp of non-positive values (the CPU
 * attention's softmax; the generated kernels use libmvec: unit.vmath)
 * against libm in double: kl_exp_nonpos within 2 ulp of exp over
 * [-87, 0] (every 1e-5); NaN stays NaN, -inf and values below -87 give
 * 0. */
#include <math.h>
#include <stdio.h>

#include "base/scalar.h"

static int failures;

static void check(const char *what, double worst, double bound)
{
    printf("%-14s worst %.3g (bound %.3g)\n", what, worst, bound);
    if (!(worst <= bound)) {
        printf("FAIL: %s\n", what);
        failures++;
    }
}

static void expect(const char *what, double got, double want)
{
    if (!(got == want || (isnan(got) && isnan(want)))) {
        printf("FAIL: %s = %.9g, expected %.9g\n", what, got, want);
        failures++;
    }
}

int main(void)
{
    double wexp = 0;
    for (double xd = -87; xd <= 0; xd += 1e-5) {
        float x = (float)xd;
        double e = exp((double)x);
        /* in units of the float's spacing at e */
        wexp = fmax(wexp, fabs(kl_exp_nonpos(x) - e) / (e * 0x1p-23));
    }
    check("exp_nonpos ulp", wexp, 2);
    expect("kl_exp_nonpos(NaN)", kl_exp_nonpos(NAN), NAN);
    expect("kl_exp_nonpos(-inf)", kl_exp_nonpos(-INFINITY), 0);
    expect("kl_exp_nonpos(-100)", kl_exp_nonpos(-100), 0);
    expect("kl_exp_nonpos(0)", kl_exp_nonpos(0), 1);
    return failures ? 1 : 0;
}
