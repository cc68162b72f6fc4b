/* kiln pack: converts a data set into WebDataset tar shards (pack.c) from
 * the inputs in pack_sources.c (an IDX data set, an ImageFolder tree) and
 * pack_npy.c (NumPy arrays). Text and token ids become token files
 * (runtime/data/tokens.h) instead. */
#ifndef KILN_PACK_H
#define KILN_PACK_H

#include <stdbool.h>
#include <stdint.h>

#include "base/support.h"

#define PACK_MAX_MEMBERS 8
#define PACK_MAX_SPLITS 3

/* One sample: members that share its key, each stored as KEY.EXT. The
 * buffers are reused from sample to sample. */
typedef struct pack_sample {
    int n;
    char ext[PACK_MAX_MEMBERS][64];
    kl_buf data[PACK_MAX_MEMBERS];
} pack_sample;

/* Appends a member (ext copied) and returns its buffer, emptied. */
kl_buf *pack_sample_add(pack_sample *s, const char *ext);
/* A label as a .cls member's bytes: decimal, as WebDataset writes it. */
void pack_put_cls(kl_buf *b, int64_t label);

typedef struct pack_input pack_input;
struct pack_input {
    const char *kind;       /* "idx", "imagefolder", "npy" */
    char *source;           /* the path(s) as given, for the manifest */
    int nsplits;
    char *split_name[PACK_MAX_SPLITS];
    int64_t split_count[PACK_MAX_SPLITS];
    kl_buf class_names;     /* a JSON array, or empty */
    int64_t num_classes;    /* -1 when the input has no labels */
    /* Appends the manifest's "fields" object (JSON) once every sample was
     * read (an ImageFolder's image shapes are known only then). */
    void (*fields)(pack_input *in, kl_buf *json);
    /* Fills sample i of split k; 0, or -1 after an error naming the file. */
    int (*sample)(pack_input *in, int split, int64_t i, pack_sample *s);
    void (*free)(pack_input *in);
    void *ctx;
};

/* limit: at most this many samples per split (0: all). Each returns 0
 * with *in filled, or -1 after an error naming the file and the reason. */
int pack_open_idx(const char *dir, int64_t limit, pack_input *in);
int pack_open_imagefolder(const char *root, int64_t limit, pack_input *in);
/* fields[i] = "NAME=FILE.npy" (NAME "npy" when only FILE is given) for the
 * train split, test_fields likewise for the test split (ntest may be 0). */
int pack_open_npy(char **fields, int nfields, char **test_fields, int ntest, int64_t limit, pack_input *in);
void pack_input_free(pack_input *in);
/* A 1-D integer .npy of token ids (GPT-2 BPE ids, say): *ids (malloc'd)
 * holds its n values, *max_id the largest. 0, or -1 after an error naming
 * the file (not a 1-D integer array, empty, a negative id or one of 2^32
 * or more). */
int pack_read_token_ids(const char *path, uint32_t **ids, int64_t *n, uint32_t *max_id);
/* Adds split name with count samples (at most limit when limit > 0). */
void pack_add_split(pack_input *in, const char *name, int64_t count, int64_t limit);

/* Appends the whole of a regular file to b; -1 after an error naming it. */
int pack_read_file(const char *path, kl_buf *b);

/* `kiln pack ARGS`: the command's exit status. */
int kl_pack_main(int argc, char **argv);

/* A JSON string literal for s. */

#endif
