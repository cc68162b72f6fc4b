/* The host C compiler: which one ($KILN_CC, $CC, cc), the flags every
 * kernel and kiln build's executable are compiled with, and the start of
 * its argument vector (runtime/cpu/spawn.c runs it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cc.h"
#include "spawn.h"

const char *kl_cc(void)
{
    const char *kc = getenv("KILN_CC"), *cc = getenv("CC");
    if (kc && kc[strspn(kc, " \t")])
        return kc;
    if (cc && cc[strspn(cc, " \t")])
        return cc;
    return "cc";
}

void kl_argv_add_cc(kl_argv *a)
{
    kl_argv_add_words(a, kl_cc());
    kl_argv_add_words(a, kl_cc_flags());
}

/* $KILN_MARCH, checked: one word of a -march value (x86-64, x86-64-v3,
 * haswell, ...); "native" when unset or empty. */
const char *kl_cc_march(void)
{
    const char *m = getenv("KILN_MARCH");
    if (!m || !*m)
        return "native";
    if (strspn(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(m) ||
        strlen(m) > 64) {
        kl_error("KILN_MARCH='%s' is not a -march value (letters, digits, '.', '_', '-'; e.g. x86-64-v3)", m);
        exit(1);
    }
    return m;
}

const char *kl_cc_flags(void)
{
    /* The environment does not change under a run: built once. */
    static char flags[160];
    if (!flags[0])
        snprintf(flags, sizeof flags, "-O3 -march=%s -fopenmp -std=gnu11 %s", kl_cc_march(), KL_CC_FP_FLAGS);
    return flags;
}

