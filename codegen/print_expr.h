/* One expression printer for every target.
 *
 * The kernel IR's expressions, constants, loads and stores print here,
 * once, from a target description: how the target spells its types,
 * constants, 16-bit conversions and the few operators whose text differs
 * (tinygrad's CStyleLanguage: one table, a target overrides only the
 * entries that truly differ). codegen/emit_c.c and codegen/emit_cuda.c
 * print the statements, which differ where the targets do (loops against
 * threads, reductions, shared memory, launches).
 *
 * Operator formats are printf-like with these directives:
 *   %a %b   the operands
 *   %T      the result's C type        %u  the target's 64-bit unsigned type
 *   %f      "f" for f32 math (expf), "" for f64
 *   %d      "_d" for f64 helpers (kl_max_d), "" for f32
 *   %1 %0   the constant one or zero in the result's type
 *   %i      the expression's integer payload (kl_rand's salt)
 * A target's entry, where it has one, replaces the shared one. */
#ifndef KILN_PRINT_EXPR_H
#define KILN_PRINT_EXPR_H

#include "kir.h"

#define KIR_NUNOPS (KU_UNIFORM + 1)
#define KIR_NBINOPS (KB_IMOD + 1)

typedef struct kir_target {
    const char *i64, *u64;            /* the 64-bit integer types */
    const char *storage[IR_NDTYPES];  /* a buffer's element type */
    const char *load[IR_NDTYPES];     /* applied to a loaded element: widens it to its compute type */
    const char *store[IR_NDTYPES];    /* applied to a value stored as bf16/f16 (from f32) */
    const char *load_scalar[IR_NDTYPES]; /* load's, in kernels marked scalar_f16 (NULL: load's) */
    const char *nan[2], *inf[2], *ninf[2]; /* [0] f32, [1] f64 */
    const char *not_cond;             /* NOT of a condition (0 or 1) */
    const char *cond_and, *cond_or;   /* AND/OR of two conditions when the right one does not load */
    const char *un[KIR_NUNOPS];       /* overrides of the shared formats (float results) */
    const char *bin[KIR_NBINOPS];
} kir_target;

extern const kir_target kir_target_c, kir_target_cuda;

typedef struct kir_printer {
    const kir_target *t;
    const kir_kernel *k;
    kl_buf *b;
    int indent;
    const char **rename; /* per variable: the name to print instead (NULL: none) */
    uint64_t lanes;      /* buffers read through lane registers kl_l<name>.v[kl_j]
                            (the CUDA printer's vector units) */
    /* Per variable, when set: used, it was printed by name; reprinted, a
     * use of it printed its let's value instead (print_expr.c's 16-bit
     * bits); dead, its let is left out (codegen/emit_c.c). */
    uint8_t *used, *reprinted;
    const uint8_t *dead;
    /* Loads printed as an element of a float row staged around the leaf
     * loop being printed (codegen/emit_c.c): the load nodes, the names of
     * their rows, the loop's variable (the element). */
    const kir_expr *const *staged;
    const char *const *staged_row;
    int nstaged, staged_var;
    const char *staged_offset; /* when set, printed after the variable: its element of the rows
                                  (" - kl_c": rows of a chunk from kl_c; " + h * 28LL": rows of planes) */
    const char *const *staged_index; /* when set, per staged load: its element of its row, printed
                                        instead of the variable and staged_offset (strided planes) */
    int *staged_hits; /* per staged load, when set: times printed */
    const kir_expr **inline_var; /* per variable, when set: print this value instead */
} kir_printer;

void kir_print_expr(kir_printer *p, const kir_expr *e);
/* value converted to the storage dtype of a buffer. */
void kir_print_stored(kir_printer *p, ir_dtype dt, const kir_expr *value);
/* value without the roundings to dt that storing it as dt makes again
 * (KU_ROUND_F16 or KU_ROUND_BF16 at its top). */
const kir_expr *kir_strip_rounding(ir_dtype dt, const kir_expr *value);
/* Whether kir_print_stored narrows value with the target's conversion
 * for dt (rather than moving bits, truncating or casting). */
bool kir_print_store_narrows(const kir_printer *p, ir_dtype dt, const kir_expr *value);
/* Whether it stores a bf16 value's top half (a value that is bf16
 * already: a maximum or select of bf16 loads). */
bool kir_print_store_truncates(const kir_printer *p, ir_dtype dt, const kir_expr *value);
const char *kir_print_ctype(const kir_target *t, kir_type ty);
const char *kir_print_storage(const kir_target *t, ir_dtype dt);
const char *kir_print_var(const kir_printer *p, int v);
/* An accumulator's first value: 0, -inf (max) or inf (min). */
const char *kir_print_acc_init(const kir_target *t, kir_acc_op op, kir_type ty);
/* Four spaces per level of p->indent. */
void kir_print_indent(kir_printer *p);
/* Whether evaluating e reads a buffer. */
bool kir_expr_loads(const kir_expr *e);

#endif
