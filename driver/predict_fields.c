/* --predict on a model that declares its outputs (output NAME = EXPR)
 * and has no classifier: one .npy (format 1.0) whose records hold every
 * declared output of a sample, in declaration order, each in its own
 * dtype and per-sample shape, so the header names and shapes them:
 *
 *   {'descr': [('z', '<f4', (8,)), ('pred', '<i4')], 'fortran_order': False, 'shape': (43,), }
 *
 * np.load(OUT)['z'] is then a (samples, 8) array. bf16 has no NumPy
 * dtype: it is widened to '<f4' (exactly). The rows are the evaluation's,
 * in the test set's order; rows a short batch repeats are left out. */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"

struct predict_fields {
    int n;
    int value[16];
    const char *name[16];
    ir_type type[16];
    int64_t per[16];       /* elements per sample */
    int elt[16];           /* bytes per element in the file */
    size_t record;         /* bytes per sample */
    int64_t count, done;
    unsigned char *rows;   /* count records */
};

/* The file's dtype of an IR dtype (bf16 widened). */
static const char *npy_descr(ir_dtype d)
{
    switch (d) {
    case IR_U8:
        return "|u1";
    case IR_I32:
        return "<i4";
    case IR_I64:
        return "<i8";
    case IR_F16:
        return "<f2";
    case IR_F64:
        return "<f8";
    default:
        return "<f4";
    }
}

predict_fields *train_fields_begin(const ir_graph *g, int64_t count, int64_t batch)
{
    if (g->outputs.n > 16) {
        kl_error("--predict: the model declares %d outputs; at most 16 are written", g->outputs.n);
        return NULL;
    }
    predict_fields *p = kl_xcalloc(1, sizeof *p);
    p->n = g->outputs.n;
    p->count = count;
    for (int i = 0; i < p->n; i++) {
        const ir_type *t = &ir_val(g, g->outputs.v[i].value)->type;
        if (t->rank < 1 || t->dim[0] != batch) {
            kl_error("--predict: output '%s' is %s[%lld...]: its first dimension is not the batch (%lld), so it "
                     "has no row per sample",
                     g->outputs.v[i].name, ir_dtype_name(t->dtype), t->rank ? (long long)t->dim[0] : 0LL,
                     (long long)batch);
            free(p);
            return NULL;
        }
        p->value[i] = g->outputs.v[i].value;
        p->name[i] = g->outputs.v[i].name;
        p->type[i] = *t;
        p->per[i] = ir_type_numel(t) / t->dim[0];
        p->elt[i] = t->dtype == IR_BF16 ? 4 : ir_dtype_size(t->dtype);
        p->record += (size_t)(p->per[i] * p->elt[i]);
    }
    p->rows = kl_xcalloc((size_t)count * p->record + 1, 1);
    return p;
}

void train_fields_batch(predict_fields *p, kl_exec *e, const kl_batch *b)
{
    size_t at = 0;
    int64_t first = p->done;
    for (int i = 0; i < p->n; i++) {
        const ir_type *t = &p->type[i];
        size_t bytes = (size_t)ir_type_bytes(t), row = (size_t)(p->per[i] * p->elt[i]);
        unsigned char *host = kl_xmalloc(bytes ? bytes : 1);
        kl_exec_read(e, p->value[i], host, bytes);
        for (int64_t r = 0; r < b->size && first + r < p->count; r++) {
            unsigned char *dst = p->rows + (size_t)(first + r) * p->record + at;
            if (t->dtype == IR_BF16)
                for (int64_t j = 0; j < p->per[i]; j++) {
                    float x = (float)kl_load_as(t->dtype, host, r * p->per[i] + j);
                    memcpy(dst + 4 * j, &x, 4);
                }
            else
                memcpy(dst, host + (size_t)r * row, row);
        }
        free(host);
        at += row;
    }
    p->done = first + b->size < p->count ? first + b->size : p->count;
}

int train_npy_begin(kl_outfile *o, const char *path, kl_buf *dict)
{
    /* The header pads to a multiple of 64 bytes with the magic and ends in
     * a newline; its length is a u16. */
    while ((10 + dict->len + 1) % 64)
        kl_buf_putc(dict, ' ');
    kl_buf_putc(dict, '\n');
    if (dict->len > 65535) {
        kl_error("%s: the header is %zu bytes, more than a .npy 1.0 header holds", path, dict->len);
        kl_buf_free(dict);
        return -1;
    }
    if (kl_outfile_begin(o, path)) {
        kl_buf_free(dict);
        return -1;
    }
    unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(dict->len & 0xff),
                               (unsigned char)(dict->len >> 8)};
    kl_outfile_write(o, magic, 10);
    kl_outfile_write(o, dict->s, dict->len);
    kl_buf_free(dict);
    return 0;
}

int train_fields_finish(predict_fields *p, const char *path)
{
    int rc = -1;
    if (p->done != p->count) {
        kl_error("%s: %lld of %lld test samples evaluated", path, (long long)p->done, (long long)p->count);
        goto done;
    }
    kl_buf h = {0};
    kl_buf_puts(&h, "{'descr': [");
    for (int i = 0; i < p->n; i++) {
        kl_buf_printf(&h, "%s('%s', '%s'", i ? ", " : "", p->name[i], npy_descr(p->type[i].dtype));
        if (p->type[i].rank > 1) {
            kl_buf_puts(&h, ", (");
            for (int k = 1; k < p->type[i].rank; k++)
                kl_buf_printf(&h, "%lld,%s", (long long)p->type[i].dim[k], k + 1 < p->type[i].rank ? " " : "");
            kl_buf_puts(&h, ")");
        }
        kl_buf_puts(&h, ")");
    }
    kl_buf_printf(&h, "], 'fortran_order': False, 'shape': (%lld,), }", (long long)p->count);
    kl_outfile o;
    if (train_npy_begin(&o, path, &h))
        goto done;
    kl_outfile_write(&o, p->rows, (size_t)p->count * p->record);
    rc = kl_outfile_commit(&o, 0666);
done:
    free(p->rows);
    free(p);
    return rc;
}
