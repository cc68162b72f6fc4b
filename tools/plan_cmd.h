/* kiln plan (tools/plan_cmd.c): the parallel layout, micro-batch and
 * precision for a cluster, chosen from the model's plans alone. Returns
 * the exit status. */
#ifndef KILN_PLAN_CMD_H
#define KILN_PLAN_CMD_H

int kl_plan_main(int argc, char **argv);

#endif
