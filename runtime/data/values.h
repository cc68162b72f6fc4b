/* Host values of any dtype, apart from any session or backend (values.c):
 * elements stored and loaded as doubles, runs of them converted between
 * dtypes, and the initial values of a persistent value. */
#ifndef KILN_VALUES_H
#define KILN_VALUES_H

#include "ir/ir.h"

/* Initialises a persistent value from its "init" attribute (zeros, ones,
 * constant, normal, uniform, xavier, kaiming), with a stream of the
 * session's seed and the value's name: adding a param does not change how
 * the others start. Writes host memory of t's dtype. */
void kl_init_values(const ir_value *v, uint64_t seed, void *host);

/* Writes x as dtype dt at dst (float dtypes and integers). */
void kl_store_as(ir_dtype dt, void *dst, int64_t i, double x);
double kl_load_as(ir_dtype dt, const void *src, int64_t i);
/* n values of dtype from at src written as dtype to at dst, each as
 * kl_store_as(to, dst, i, kl_load_as(from, src, i)) writes it (a copy
 * when the dtypes are the same). src and dst do not overlap. */
void kl_convert_values(ir_dtype to, void *dst, ir_dtype from, const void *src, int64_t n);
/* The index of the first inf or nan among n values of dtype dt at src
 * (any alignment: a file's bytes), or -1; -1 for an integer dtype. */
int64_t kl_first_nonfinite(ir_dtype dt, const void *src, int64_t n);

#endif
