/* safetensors files (https://github.com/huggingface/safetensors), written
 * and read (safetensors.c):
 *
 *   u64 N (little-endian), N bytes of JSON header, the data
 *
 * The header maps each tensor's name to {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]} (offsets into the data, which follows
 * the header), and "__metadata__" to an object of strings. */
#ifndef KILN_SAFETENSORS_H
#define KILN_SAFETENSORS_H

#include "runtime/exec/session.h"

typedef struct kl_st_tensor {
    char *name;
    ir_type type;              /* dtype: one Kiln has (F32, BF16, F16, F64, I32, I64, U8) */
    const unsigned char *data; /* ir_type_bytes(&type) bytes */
} kl_st_tensor;

typedef struct kl_st_file {
    kl_source file;
    int n;
    kl_st_tensor *v;
    const kl_st_tensor **by_name; /* v sorted by name: kl_st_find's index */
    int nmeta;
    char **meta; /* key, value, key, value ... */
} kl_st_file;

/* Reads and checks path: the header's length and JSON, every tensor's
 * dtype, shape and offsets (inside the data, byte count = the shape's,
 * no two non-empty ones overlapping), no duplicate names, in
 * O(n log n) time for n tensors. -1 after an error naming the
 * file and the tensor or field. */
int kl_st_read(kl_st_file *f, const char *path);
void kl_st_free(kl_st_file *f);
/* The tensor named name, or NULL: a binary search (O(log n)). */
const kl_st_tensor *kl_st_find(const kl_st_file *f, const char *name);

/* Writes n tensors (names in the given order) through outfile.h, each
 * converted to dtype out (IR_NONE: as it is), with metadata (NULL-ended
 * key, value pairs). Returns 0 or -1 after an error naming path. */
int kl_st_write(const char *path, const kl_st_tensor *t, int n, ir_dtype out, const char *const *meta);

/* The safetensors name of a dtype ("F32"), or NULL. */
const char *kl_st_dtype_name(ir_dtype t);

/* Whether a persistent value of this role is part of the model itself:
 * its params and the state its forward pass reads (running statistics),
 * not the optimizer's or the run's. What export writes and --init reads. */
bool kl_st_model_role(const char *role);

/* --init: fills the session's model values (kl_st_model_role) from the
 * file, converting dtypes; names and shapes must match. Without partial,
 * every model value must be in the file and every tensor of the file in
 * the model (an error lists what is missing and what is extra); with
 * partial, the values the file lacks or has in another shape keep their
 * initial values and the file's extra tensors are ignored, each listed on
 * stderr. Low-precision copies are rebuilt. Returns 0 or -1. */
int kl_st_init_session(kl_session *s, const char *path, bool partial, bool quiet);

/* The model values (kl_st_model_role) of a checkpoint (version 3) or a
 * session, converted to out (IR_NONE: as they are), with metadata
 * kiln.model, kiln.step, kiln.version, kiln.precision and kiln.format
 * (KL_ST_EXPORT_FORMAT: the version of this layout, model values under
 * their model-file names). 0 or -1. */
#define KL_ST_EXPORT_FORMAT "1"
struct kl_ckpt;
int kl_ckpt_export(const struct kl_ckpt *c, const char *path, ir_dtype out);
int kl_session_export(kl_session *s, const char *path, ir_dtype out, const char *model, const char *precision,
                      uint64_t step);

#endif
