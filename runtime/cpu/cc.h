/* The host C compiler (runtime/cpu/cc.c): which one, and the flags generated
 * kernels and kiln build's executables are compiled with. */
#ifndef KILN_CC_H
#define KILN_CC_H

/* How host-compiled code evaluates floating point: the same for the
 * kernels, kiln build's executable and the CUDA emulation (tests/cuda),
 * on every x86-64 CPU. Every operation rounds as written: no contraction
 * of a*b+c into a fused multiply-add (which gnu11 allows by default and
 * -march=native enables where the CPU has FMA), no fast-math. No SLP
 * (straight-line) vectorization: GCC 12 at -O3 with AVX-512 drops the
 * double -> float -> double round trip there (the last 4 of 20 elements
 * of (double)(float)x * 2 came back unrounded; tests/unit/test_jit.c). */
#define KL_CC_FP_FLAGS "-ffp-contract=off -fno-tree-slp-vectorize -fno-math-errno"
/* The C compiler used for kernels (and by kiln build): $KILN_CC, else $CC,
 * else cc; its words, then kl_cc_flags(), start the command
 * (runtime/cpu/cc.c). */
const char *kl_cc(void);
const char *kl_cc_flags(void);
/* $KILN_MARCH, checked (a bad value exits): "native" when unset. */
const char *kl_cc_march(void);

#endif
