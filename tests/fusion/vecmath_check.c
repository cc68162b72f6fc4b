/* base/scalar.h's vectorisable GELU helpers against libm in double:
 * kl_erf within 5e-7 of erf over [-12, 12] (every 1e-5), kl_exp_nonpos
 * within 2 ulp of exp over [-87, 0], kl_npdf against the density in
 * double; NaN stays NaN, the infinities give erf's and exp's limits.
 * The generated CPU kernels carry these very lines (the @text vecmath
 * region). */
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
    double werf = 0, wexp = 0, wpdf = 0;
    for (double xd = -12; xd <= 12; xd += 1e-5) {
        float x = (float)xd;
        werf = fmax(werf, fabs(kl_erf(x) - erf((double)x)));
        double pdf = 0.398942280401432678 * exp(-0.5 * (double)x * (double)x);
        wpdf = fmax(wpdf, fabs(kl_npdf(x) - pdf));
    }
    for (double xd = -87; xd <= 0; xd += 1e-5) {
        float x = (float)xd;
        double e = exp((double)x);
        /* in units of the float's spacing at e */
        wexp = fmax(wexp, fabs(kl_exp_nonpos(x) - e) / (e * 0x1p-23));
    }
    check("erf", werf, 5e-7);
    check("exp_nonpos ulp", wexp, 2);
    check("npdf", wpdf, 5e-8);
    expect("kl_erf(NaN)", kl_erf(NAN), NAN);
    expect("kl_erf(inf)", kl_erf(INFINITY), 1);
    expect("kl_erf(-inf)", kl_erf(-INFINITY), -1);
    expect("kl_erf(0)", kl_erf(0), 0);
    expect("kl_exp_nonpos(NaN)", kl_exp_nonpos(NAN), NAN);
    expect("kl_exp_nonpos(-inf)", kl_exp_nonpos(-INFINITY), 0);
    expect("kl_exp_nonpos(-100)", kl_exp_nonpos(-100), 0);
    expect("kl_exp_nonpos(0)", kl_exp_nonpos(0), 1);
    expect("kl_npdf(inf)", kl_npdf(INFINITY), 0);
    return failures ? 1 : 0;
}
