/* Pipeline parallelism at training time: the stages are cut by the
 * compiler (passes/pipeline_stages.c, shown by `kiln ir --after pipeline`),
 * but no schedule runs them across ranks in this build, so a run asking
 * for pipeline_parallel > 1 is refused before any work instead of
 * training the whole model on every rank. */
#include "trainer.h"

int train_pipeline_check(trainer *t)
{
    int P = t->cfg.pipeline_parallel;
    if (P <= 1)
        return 0;
    kl_error("%s: pipeline_parallel = %d (schedule %s): pipeline execution is not built; the stages the compiler cuts are "
             "shown by kiln ir %s --after pipeline --set pipeline_parallel=%d\n"
             "---> train with pipeline_parallel = 1, or split the model with tensor_parallel and the state with shard",
             t->model, P, kl_pipe_schedule_name(t->cfg.pipeline_schedule), t->model, P);
    return -1;
}
