/* The next token of --generate (train_generate.c): one token from one
 * row of logits. Apart from the plan so that a test can drive it with
 * fixed logits (tests/sampler). */
#ifndef KILN_DRIVER_NEXT_TOKEN_H
#define KILN_DRIVER_NEXT_TOKEN_H

#include <stdint.h>

typedef struct train_scored {
    double logit;
    int token;
} train_scored;

/* The largest logit at temperature 0 (the smaller token on a tie), else
 * a draw from softmax(row / temperature) over the top_k largest (all
 * when top_k is 0 or at least vocab), with the uniform of the stream
 * (seed, n). s: scratch of vocab entries. */
int train_sample_pick(const float *row, int64_t vocab, double temperature, int64_t top_k, uint64_t seed, int64_t n,
                      train_scored *s);

#endif
