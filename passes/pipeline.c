/* The pass table, top to bottom. Each pass is one file in passes/ whose
 * header comment says what it requires and provides. The compile function
 * (driver/compile.c) runs the rows of its mode in this order, with the
 * verifier after each when asked; kernel lowering and memory planning
 * follow there, as stages of their own. */
#include <string.h>

#include "pipeline.h"

const pass_entry pass_table[] = {
    {"tensor_parallel", pass_shard_tp, PASS_TRAIN | PASS_EVAL},
    {"sync_batchnorm", pass_sync_batchnorm, PASS_TRAIN},
    {"pipeline", pass_pipeline_stages, PASS_TRAIN},
    {"autodiff", pass_autodiff, PASS_TRAIN},
    {"optimizer", pass_optimizer, PASS_TRAIN},
    {"eval_mode", pass_eval_mode, PASS_EVAL},
    {"precision", pass_precision, PASS_TRAIN | PASS_EVAL},
    {"accumulate", pass_accumulate, PASS_TRAIN},
    {"shard", pass_shard, PASS_TRAIN},
    {"simplify", pass_simplify, PASS_TRAIN | PASS_EVAL},
    {"constants", pass_constants, PASS_TRAIN | PASS_EVAL},
    {"recompute", pass_recompute, PASS_TRAIN},
    {"fusion", pass_fusion, PASS_TRAIN | PASS_EVAL},
    {"schedule", pass_schedule, PASS_TRAIN | PASS_EVAL},
};

const int pass_table_len = (int)KL_ARRAY_LEN(pass_table);

int pass_index(const char *name)
{
    for (int i = 0; i < pass_table_len; i++)
        if (!strcmp(pass_table[i].name, name))
            return i;
    return -1;
}
