/* Private to the C printer (emit_c.c, emit_c_stage.c): the printer's
 * state and the staged rows around a leaf loop.
 *
 * GCC 12 vectorises neither F16C's conversions nor _Float16's, only the
 * software ones (a dozen instructions an element each way). So a leaf
 * loop's f16 loads and stores whose index is a base the loop does not
 * change plus the loop's variable widen and narrow whole rows with F16C
 * (kl_f16_widen_row, kl_f16_narrow_row: one instruction per 8 elements)
 * before and after the loop, into float arrays on the stack that the
 * loop reads and writes. Legal when the loop does not both load and store
 * a buffer it stages, stores a staged buffer once, and touches buffers
 * that share memory with another (in-place results) at one index only
 * (aliased_in_step). */
#ifndef KILN_EMIT_C_H
#define KILN_EMIT_C_H

#include "print_expr.h"

#define STAGE_MIN 8         /* shorter rows: the calls cost more than they save */
#define STAGE_FLOATS 16384  /* floats in all of a loop's rows, on the stack */
#define STAGE_ROWS 16
#define STAGE_LOADS 64
/* Longer loops without accumulators, and leaf loops that OpenMP shares
 * out (`omp for`), run in chunks of this many, each with its rows. Short
 * enough that a chunk's conversions overlap the next chunk's arithmetic
 * in the core's out-of-order window: Adam's update with its f16 copies
 * (divides and a square root an element) 0.127 ms at 256 against 0.138
 * at 2048 (fp32 without copies: 0.121; 64: 0.127, 512: 0.133), the MLP's
 * input scaling 0.0243 against 0.0263 (one thread, Zen 4). */
#define STAGE_CHUNK 256

typedef struct staging {
    int var;                            /* the loop's variable */
    int64_t extent;                     /* the rows' length (a chunk's, at most) */
    bool chunked;                       /* rows of chunk kl_c, kl_n long */
    const kir_stmt *outer;              /* rows of planes around this loop (plan_plane), else NULL */
    char offset[64];                    /* the element of var's value: printed after it */
    int nrows;
    const kir_expr *index[STAGE_ROWS];  /* a load's or store's index: base + var */
    int buf[STAGE_ROWS];
    /* Strided planes (plan_strided): a row's length, its first element
     * (index at both variables 0, plus delta), its steps per element of
     * the leaf (a) and of the loop around it (b), and its index's least
     * and greatest constant offsets against index[r] (loads that differ
     * by a constant share the row); for stores, whether the 16-bit
     * values are exact (kl_bf16_trunc). */
    int64_t len[STAGE_ROWS], delta[STAGE_ROWS], a[STAGE_ROWS], b[STAGE_ROWS], dmax[STAGE_ROWS];
    bool trunc[STAGE_ROWS];
    const kir_stmt *store[STAGE_ROWS];  /* the store a row takes (NULL: a load's row) */
    /* A store row's twin: a store of the same value at the same index
     * into an fp32 buffer of the loop (the optimizer's fp32 master weight
     * beside its f16 copy). The row is then not printed: the f16 values
     * are narrowed from that buffer after the loop (NULL: none). */
    const kir_stmt *twin[STAGE_ROWS];
    char name[STAGE_ROWS][24];
    const kir_expr *loads[STAGE_LOADS]; /* staged load nodes, their rows and the rows' names */
    int load_row[STAGE_LOADS];
    const char *load_name[STAGE_LOADS];
    const char *load_index[STAGE_LOADS]; /* the subscript of the load's row, or NULL */
    int64_t load_d[STAGE_LOADS];         /* strided planes: the load's offset against index[row] */
    char load_sub[STAGE_LOADS][96];
    /* Strided planes: the stores that write rows, their rows and offsets. */
    const kir_stmt *stores[STAGE_LOADS];
    int store_row[STAGE_LOADS];
    int64_t store_d[STAGE_LOADS];
    int nstores;
    int nloads;
    bool strided;                       /* rows of strided planes (plan_strided) */
    bool bf16;                          /* bf16 rows too (planes: plan_plane) */
    bool hoisted[STAGE_ROWS];           /* a load row widened before the loop around (plan_hoist) */
} staging;

/* Loop-invariant rows (kir_c_plan_hoist): the f16 load rows of the leaf
 * loop inside a loop that are the same row in every iteration of that
 * loop, widened once before it; the leaf's staging reads them by name. */
typedef struct hoisting {
    int n;
    int buf[STAGE_ROWS];
    const kir_expr *index[STAGE_ROWS];
    char name[STAGE_ROWS][24];
    staging st;                         /* the leaf's rows, for printing the hoisted ones' starts */
    const kir_stmt *leaf;
} hoisting;

typedef struct printer {
    kir_printer e;       /* the shared expression printer: kernel, output, indent */
    const kir_stmt *red; /* the innermost open RED loop that owns accumulators */
    bool region;         /* inside one parallel region: nests are `omp for` */
    const staging *st;   /* the rows staged around the leaf loop being printed */
    const staging *pl;   /* rows staged around a leaf loop's outer loop (plan_plane) */
    const kir_stmt *around; /* the innermost loop whose body is being printed */
    const hoisting *hoist;  /* rows widened before the loop being printed (plan_hoist), or NULL */
    /* Prints statement list s (emit_c.c's print_stmts): the staged-row
     * planner's trial print of a body, to see which rows it reads. */
    void (*print_body)(const struct printer *p, const kir_stmt *s);
} printer;

static inline void ind(printer *p)
{
    kir_print_indent(&p->e);
}

/* ---- staged rows (emit_c_stage.c) ---- */

/* A loop without inner loops, conditions or atomics, whose iterations are
 * independent: it may be vectorised. */
bool kir_c_is_leaf_loop(const kir_stmt *s);

/* The rows to stage around leaf loop s (bf16: bf16 ones too); false when
 * there are none. */
bool kir_c_plan_staging(const printer *p, const kir_stmt *s, bool chunked, bool bf16, staging *st);
/* Rows of planes: rows staged once around serial loop s whose leaf loop's
 * rows are contiguous over s's iterations (*leaf_out: that leaf). */
bool kir_c_plan_plane(const printer *p, const kir_stmt *s, staging *st, const kir_stmt **leaf_out);
/* Strided planes: the runs of elements the 16-bit loads of the leaf under
 * serial loop s read, staged once around s (*leaf_out: that leaf). */
bool kir_c_plan_strided(const printer *p, const kir_stmt *s, staging *st, const kir_stmt **leaf_out);
/* Loop-invariant rows: the load rows of the leaf loop of loop s whose
 * index s does not change, widened once before s (false: none). */
bool kir_c_plan_hoist(const printer *p, const kir_stmt *s, hoisting *h);
/* Prints the hoisted rows' arrays and their widening. */
void kir_c_print_hoist(printer *p, const kir_stmt *s, const hoisting *h);
/* Marks the rows of st, staged around leaf loop `loop`, that p's hoisted
 * rows stand for (read by name, neither declared nor widened there). */
void kir_c_use_hoisted(const printer *p, const kir_stmt *loop, staging *st);
/* Leaves out the load rows that printing leaf loop s does not read;
 * false when no row is left. */
bool kir_c_drop_unread_rows(const printer *p, const kir_stmt *s, staging *st);
/* Prints the loads of st as its rows' elements (st NULL: as loads). */
void kir_c_use_staging(printer *p, const staging *st);
/* Fetches ahead the rows that leaf loop s reads and writes in the next
 * iteration of loop `around`, where they lie far from this iteration's. */
void kir_c_print_prefetch(printer *p, const kir_stmt *s, const kir_stmt *around);
/* The rows' arrays and their widening before loop `loop`, and the
 * narrowing of the stored rows after it. */
void kir_c_print_staging_begin(printer *p, const kir_stmt *loop, const staging *st);
void kir_c_print_staging_end(printer *p, const kir_stmt *loop, const staging *st);
/* The row a staged store writes (*d: its offset there), or -1. */
int kir_c_staged_store(const printer *p, const kir_stmt *s, int64_t *d);

#endif
