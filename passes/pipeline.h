/* The pass table: every IR pass, in order, with the modes it runs in
 * (passes/pipeline.c). The compile function (driver/compile.c) runs it;
 * `kiln ir --after` and its help text read the names from it. */
#ifndef KILN_PIPELINE_H
#define KILN_PIPELINE_H

#include "passes.h"

typedef enum kl_mode { KL_MODE_TRAIN, KL_MODE_EVAL } kl_mode;

enum { PASS_TRAIN = 1, PASS_EVAL = 2 };

typedef struct pass_entry {
    const char *name;
    int (*run)(ir_graph *g, const pass_ctx *cx);
    unsigned modes; /* PASS_TRAIN | PASS_EVAL */
} pass_entry;

extern const pass_entry pass_table[];
extern const int pass_table_len;

/* The index of the pass named name in pass_table, or -1. */
int pass_index(const char *name);

#endif
