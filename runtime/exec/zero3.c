/* ZeRO stage 3's slices of params (zero3.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero3.h"
#include "runtime/data/values.h"

ir_type kl_zero3_member_type(const ir_value *slice, int i, int64_t count)
{
    char key[32];
    snprintf(key, sizeof key, "shape_%d", i);
    ir_type t = {IR_F32, 1, {count}};
    int64_t dim[IR_MAX_RANK];
    const ir_attr *a = ir_attrs_find(&slice->attrs, key);
    if (!a)
        return t;
    int r = ir_attr_ints(&slice->attrs, key, dim, IR_MAX_RANK);
    ir_type s = {IR_F32, r, {0}};
    memcpy(s.dim, dim, sizeof(int64_t) * (size_t)r);
    return count < 0 || ir_type_numel(&s) == count ? s : t;
}

void kl_zero3_init(const ir_value *v, uint64_t seed, int rank, void *host)
{
    int64_t m = ir_type_numel(&v->type), lo = (int64_t)rank * m, at = 0;
    const char *c = ir_attr_str(&v->attrs, "params", "");
    for (int i = 0; *c; i++) {
        const char *end = strchr(c, ',');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        ir_value member = {0};
        member.name = kl_xstrndup(c, len);
        member.type = kl_zero3_member_type(v, i, -1);
        char key[32];
        snprintf(key, sizeof key, "init_%d", i);
        const ir_attr *init = ir_attrs_find(&v->attrs, key);
        if (init) {
            ir_attr_val iv;
            ir_attr_val_copy(&iv, &init->val);
            ir_attrs_set(&member.attrs, "init", iv);
        }
        int64_t n = ir_type_numel(&member.type);
        float *full = kl_xcalloc((size_t)n + 1, sizeof *full);
        kl_init_values(&member, seed, full);
        for (int64_t j = 0; j < n; j++, at++)
            if (at >= lo && at < lo + m)
                kl_store_as(v->type.dtype, host, at - lo, full[j]);
        free(full);
        free(member.name);
        ir_attrs_free(&member.attrs);
        c += len + (end ? 1 : 0);
    }
    for (; at < lo + m; at++)
        if (at >= lo)
            kl_store_as(v->type.dtype, host, at - lo, 0);
}
