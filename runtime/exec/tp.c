/* The slices of tensor-parallel params (tp.h). */
#include <stdlib.h>
#include <string.h>

#include "tp.h"
#include "runtime/data/values.h"

int kl_tp_axis(const ir_value *v, int *ranks)
{
    if (!ir_attrs_find(&v->attrs, "tp_axis"))
        return -1;
    *ranks = (int)ir_attr_int(&v->attrs, "tp_ranks", 1);
    return (int)ir_attr_int(&v->attrs, "tp_axis", 0);
}

ir_type kl_tp_full_type(const ir_type *t, int axis, int ranks)
{
    ir_type f = *t;
    f.dim[axis] *= ranks;
    return f;
}

void kl_tp_copy_slice(const ir_type *full, int axis, int ranks, int index, void *fullp, void *slicep, bool to_full)
{
    /* full as [outer, dim[axis], inner]; the slice [outer, dim[axis] /
     * ranks, inner] starts at index x dim[axis] / ranks. */
    int64_t outer = 1, inner = 1, d = full->dim[axis], part = d / ranks;
    for (int k = 0; k < axis; k++)
        outer *= full->dim[k];
    for (int k = axis + 1; k < full->rank; k++)
        inner *= full->dim[k];
    size_t esz = (size_t)ir_dtype_size(full->dtype), run = (size_t)(part * inner) * esz;
    for (int64_t o = 0; o < outer; o++) {
        char *f = (char *)fullp + (size_t)((o * d + index * part) * inner) * esz;
        char *s = (char *)slicep + (size_t)o * run;
        if (to_full)
            memcpy(f, s, run);
        else
            memcpy(s, f, run);
    }
}

int64_t kl_tp_size(const ir_value *v)
{
    int ranks = 1, axis = kl_tp_axis(v, &ranks);
    if (axis < 0)
        return -1;
    return ir_attr_int(&v->attrs, "tp_size", v->type.dim[axis] * ranks);
}

void kl_tp_pad(const ir_type *padded, int axis, int64_t size, void *paddedp, void *realp, bool to_padded)
{
    /* padded as [outer, P, inner], real as [outer, size, inner]; the
     * padding (the last P - size units) is zeros. */
    int64_t outer = 1, inner = 1, d = padded->dim[axis];
    kl_check(size <= d);
    for (int k = 0; k < axis; k++)
        outer *= padded->dim[k];
    for (int k = axis + 1; k < padded->rank; k++)
        inner *= padded->dim[k];
    size_t esz = (size_t)ir_dtype_size(padded->dtype), run = (size_t)(size * inner) * esz,
           gap = (size_t)((d - size) * inner) * esz;
    for (int64_t o = 0; o < outer; o++) {
        char *p = (char *)paddedp + (size_t)(o * d * inner) * esz;
        char *r = (char *)realp + (size_t)o * run;
        if (to_padded) {
            memcpy(p, r, run);
            memset(p + run, 0, gap);
        } else {
            memcpy(r, p, run);
        }
    }
}

void kl_tp_init(const ir_value *v, uint64_t seed, int index, void *host)
{
    int ranks = 1;
    int axis = kl_tp_axis(v, &ranks);
    ir_value whole = *v;
    whole.type = kl_tp_full_type(&v->type, axis, ranks);
    ir_type padded = whole.type;
    /* The real size initialised as one rank would (fans included). */
    whole.type.dim[axis] = kl_tp_size(v);
    void *real = kl_xcalloc(1, (size_t)ir_type_bytes(&whole.type) + 1);
    void *full = kl_xcalloc(1, (size_t)ir_type_bytes(&padded) + 1);
    kl_init_values(&whole, seed, real);
    kl_tp_pad(&padded, axis, whole.type.dim[axis], full, real, true);
    kl_tp_copy_slice(&padded, axis, ranks, index, full, host, false);
    free(real);
    free(full);
}
