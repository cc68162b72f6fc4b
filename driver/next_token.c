/* The next token of --generate, drawn from one row of logits: see next_token.h. */
#include <math.h>
#include <stdlib.h>

#include "next_token.h"
#include "base/scalar.h"

/* Larger logits first; on a tie the smaller token (a fixed order). */
static int by_logit(const void *a, const void *b)
{
    const train_scored *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->token - y->token;
}

int train_sample_pick(const float *row, int64_t vocab, double temperature, int64_t top_k, uint64_t seed, int64_t n,
                      train_scored *s)
{
    for (int64_t i = 0; i < vocab; i++)
        s[i] = (train_scored){row[i], (int)i};
    qsort(s, (size_t)vocab, sizeof *s, by_logit);
    if (temperature == 0)
        return s[0].token;
    int64_t k = top_k > 0 && top_k < vocab ? top_k : vocab;
    /* Weights exp((logit - max) / temperature), in place: the max is read
     * once before the loop overwrites s[0] (reading s[0].logit inside it
     * gave every token but the first exp((logit - 1) / temperature)). */
    double max = s[0].logit, sum = 0;
    for (int64_t i = 0; i < k; i++)
        sum += s[i].logit = exp((s[i].logit - max) / temperature);
    double u = (double)(kl_mix(kl_mix(seed ^ 0x67656e65726174ull) ^ (uint64_t)n) >> 11) * 0x1p-53 * sum;
    for (int64_t i = 0; i < k; i++)
        if ((u -= s[i].logit) < 0)
            return s[i].token;
    return s[k - 1].token;
}
