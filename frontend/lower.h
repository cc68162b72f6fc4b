/* Lowering a parsed model file to the IR: defs are inlined (every call
 * gets its own parameters, named by the call path such as
 * "conv_bn_relu.1.k"), shapes and dtypes are inferred through the op
 * table, symbolic dimensions are bound (batch from the train block or an
 * override), and nodes keep their source locations. */
#ifndef KILN_LOWER_H
#define KILN_LOWER_H

#include "ir/ir.h"
#include "ast.h"

typedef struct kl_lower_opts {
    /* train settings given on the command line ("batch" -> "64"), applied
     * over the train block before lowering; NULL-terminated pairs */
    const char *const *overrides;
} kl_lower_opts;

/* Returns the graph, or NULL after reporting an error. */
ir_graph *kl_lower(const kl_source *src, const ast_program *prog, const kl_lower_opts *opts);

/* Reads a model file (.kl) or an IR dump (.kir, or any file that starts
 * with "graph"), parses, lowers and verifies it. NULL after an error. */
ir_graph *kl_load(const char *path, const kl_lower_opts *opts);
ir_graph *kl_load_source(const kl_source *src, const kl_lower_opts *opts);

#endif
