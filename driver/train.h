/* The training executable's entry point (runtime/train.c). */
#ifndef KILN_TRAIN_H
#define KILN_TRAIN_H

#include "runtime/backend.h"
#include "ir/train_config.h"

/* Parses flags, lowers the model with them, loads data, builds the plans
 * and trains. Returns the process exit status. */
int kl_train_main(int argc, char **argv, const char *model_name, const char *model_src,
                  const kl_builtin_kernel *builtins);
/* The learning rate at optimizer step t (1-based) of total. */
double kl_schedule_lr(const kl_train_config *c, double base, int64_t t, int64_t total);
/* The batch used for evaluation of count samples. */
int64_t kl_eval_batch(int64_t count, int64_t batch);

#endif
