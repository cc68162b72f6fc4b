/* Drives --generate's sampling step (driver/next_token.c) with fixed logits:
 *   sampler_draws TEMPERATURE TOP_K SEED N < logits
 * reads the logits (one number per line, the vocabulary), draws tokens
 * 0..N-1 of the stream SEED and prints how often each token came out,
 * one count per line. tests/gpt/sampler.sh compares the counts with
 * its own softmax. */
#include <stdio.h>
#include <stdlib.h>

#include "driver/next_token.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s TEMPERATURE TOP_K SEED N < logits\n", argv[0]);
        return 2;
    }
    double temperature = atof(argv[1]);
    int64_t top_k = atoll(argv[2]), n = atoll(argv[4]);
    uint64_t seed = strtoull(argv[3], NULL, 10);
    float row[4096];
    int64_t vocab = 0;
    while (vocab < 4096 && scanf("%f", &row[vocab]) == 1)
        vocab++;
    if (vocab == 0) {
        fprintf(stderr, "%s: no logits on stdin\n", argv[0]);
        return 2;
    }
    train_scored *s = malloc(sizeof *s * (size_t)vocab);
    int64_t *count = calloc((size_t)vocab, sizeof *count);
    if (!s || !count)
        return 2;
    for (int64_t i = 0; i < n; i++)
        count[train_sample_pick(row, vocab, temperature, top_k, seed, i, s)]++;
    for (int64_t t = 0; t < vocab; t++)
        printf("%lld\n", (long long)count[t]);
    free(s), free(count);
    return 0;
}
