/* Mutations of a valid checkpoint and safetensors file, read back by the
 * checked readers (runtime/ckpt/checkpoint.c, runtime/ckpt/safetensors.c): each
 * mutant (bytes changed, inserted or cut; a checkpoint's checksum
 * recomputed so that its structural checks are what is exercised) is
 * either read whole or refused with an error; never a crash, a hang or an
 * out-of-bounds read (run under KILN_SANITIZE to see those). Counts how
 * many were refused: a reader that refused nothing would be broken.
 *
 *   ckpt_mutate CKPT ST N SEED */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/safetensors.h"

static uint64_t rng;

static uint64_t next(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return rng >> 17;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = kl_xmalloc(*n + 64);
    if (fread(d, 1, *n, f) != *n)
        exit(2);
    fclose(f);
    return d;
}

/* One mutant of src in out (room for n + 64 bytes); its size. Changes
 * favour the head of the file, where the fields are. */
static size_t mutate(const unsigned char *src, size_t n, unsigned char *out, bool checksum)
{
    memcpy(out, src, n);
    size_t head = n < 512 ? n : 512, m = n;
    int edits = 1 + (int)(next() % 3);
    for (int e = 0; e < edits; e++) {
        size_t at = next() % 4 ? next() % head : next() % m;
        switch (next() % 4) {
        case 0: /* a random byte */
            out[at] = (unsigned char)next();
            break;
        case 1: /* a bit */
            out[at] ^= (unsigned char)(1u << (next() % 8));
            break;
        case 2: /* a u32 of an extreme value */
            if (at + 4 <= m) {
                uint32_t v = next() % 2 ? 0xffffffffu : (uint32_t)(next() % 300);
                memcpy(out + at, &v, 4);
            }
            break;
        default: /* cut the tail */
            m = at + 1 < m ? at + 1 + (size_t)(next() % 16) : m;
            if (m > n)
                m = n;
        }
    }
    if (checksum && m >= 8) {
        uint64_t h = kl_hash_bytes(KL_HASH_INIT, out, m - 8);
        memcpy(out + m - 8, &h, 8);
    }
    return m;
}

static void spit(const char *path, const unsigned char *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(d, 1, n, f) != n || fclose(f))
        exit(2);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: ckpt_mutate CKPT ST N SEED\n");
        return 2;
    }
    int iters = atoi(argv[3]);
    rng = strtoull(argv[4], NULL, 10);
    FILE *quiet = fopen("/dev/null", "w");
    kl_diag_set_stream(quiet);
    size_t cn, sn;
    unsigned char *c = slurp(argv[1], &cn), *s = slurp(argv[2], &sn);
    unsigned char *buf = kl_xmalloc((cn > sn ? cn : sn) + 64);
    int refused[2] = {0, 0};
    for (int i = 0; i < iters; i++) {
        bool ck = i % 2 == 0;
        size_t m = mutate(ck ? c : s, ck ? cn : sn, buf, ck);
        spit("mutant", buf, m);
        if (ck) {
            kl_ckpt k;
            if (kl_ckpt_read(&k, "mutant"))
                refused[0]++;
            else
                kl_ckpt_free(&k);
        } else {
            kl_st_file f;
            if (kl_st_read(&f, "mutant"))
                refused[1]++;
            else
                kl_st_free(&f);
        }
    }
    kl_diag_set_stream(stderr);
    printf("%d checkpoint mutants: %d refused; %d safetensors mutants: %d refused; no crash\n", (iters + 1) / 2,
           refused[0], iters / 2, refused[1]);
    free(c);
    free(s);
    free(buf);
    fclose(quiet);
    remove("mutant");
    return refused[0] > 0 && refused[1] > 0 ? 0 : 1;
}
