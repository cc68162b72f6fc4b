/* safetensors files: a writer (export), a checked reader (--init) and the
 * loading of a session's model values from one. The header's JSON is
 * read by a small parser of exactly what the format uses: one object of
 * objects with strings, non-negative integers and arrays of them. */
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "checkpoint.h"
#include "runtime/files/outfile.h"

/* Headers past this are refused (the format's own limit is 100 MB). */
#define ST_MAX_HEADER (100u << 20)

static const struct {
    ir_dtype dt;
    const char *name;
} st_dtypes[] = {
    {IR_F32, "F32"}, {IR_BF16, "BF16"}, {IR_F16, "F16"}, {IR_F64, "F64"},
    {IR_I32, "I32"}, {IR_I64, "I64"},   {IR_U8, "U8"},
};

const char *kl_st_dtype_name(ir_dtype t)
{
    for (size_t i = 0; i < KL_ARRAY_LEN(st_dtypes); i++)
        if (st_dtypes[i].dt == t)
            return st_dtypes[i].name;
    return NULL;
}

bool kl_st_model_role(const char *role)
{
    return !strcmp(role, "param") || !strcmp(role, "state");
}

/* ---- writing ---- */

/* A tensor's bytes in memory aligned for its dtype (a file's data need
 * not be). Caller frees. */
static void *aligned_copy(const kl_st_tensor *t)
{
    size_t bytes = (size_t)ir_type_bytes(&t->type);
    void *p = kl_xmalloc(bytes ? bytes : 1);
    memcpy(p, t->data, bytes);
    return p;
}

int kl_st_write(const char *path, const kl_st_tensor *t, int n, ir_dtype out, const char *const *meta)
{
    kl_buf h = {0};
    kl_buf_puts(&h, "{");
    if (meta && meta[0]) {
        kl_buf_puts(&h, "\"__metadata__\":{");
        for (int i = 0; meta[i]; i += 2) {
            kl_buf_puts(&h, i ? "," : "");
            kl_buf_put_json_str(&h, meta[i]);
            kl_buf_putc(&h, ':');
            kl_buf_put_json_str(&h, meta[i + 1]);
        }
        kl_buf_puts(&h, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        ir_dtype dt = out != IR_NONE && ir_dtype_is_float(t[i].type.dtype) ? out : t[i].type.dtype;
        uint64_t bytes = (uint64_t)ir_type_numel(&t[i].type) * (uint64_t)ir_dtype_size(dt);
        kl_buf_puts(&h, i || (meta && meta[0]) ? "," : "");
        kl_buf_put_json_str(&h, t[i].name);
        kl_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", kl_st_dtype_name(dt));
        for (int d = 0; d < t[i].type.rank; d++)
            kl_buf_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].type.dim[d]);
        kl_buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                      (unsigned long long)(off + bytes));
        off += bytes;
    }
    kl_buf_puts(&h, "}");
    /* The data starts 8-aligned: the header is padded with spaces. */
    while ((h.len + 8) % 8)
        kl_buf_putc(&h, ' ');
    kl_outfile o;
    if (kl_outfile_begin(&o, path)) {
        kl_buf_free(&h);
        return -1;
    }
    uint64_t hl = h.len;
    kl_outfile_write(&o, &hl, 8);
    kl_outfile_write(&o, h.s, h.len);
    kl_buf_free(&h);
    for (int i = 0; i < n; i++) {
        ir_dtype dt = out != IR_NONE && ir_dtype_is_float(t[i].type.dtype) ? out : t[i].type.dtype;
        int64_t numel = ir_type_numel(&t[i].type);
        if (dt == t[i].type.dtype) {
            kl_outfile_write(&o, t[i].data, (size_t)ir_type_bytes(&t[i].type));
            continue;
        }
        size_t bytes = (size_t)numel * (size_t)ir_dtype_size(dt);
        void *conv = kl_xmalloc(bytes ? bytes : 1), *in = aligned_copy(&t[i]);
        for (int64_t k = 0; k < numel; k++)
            kl_store_as(dt, conv, k, kl_load_as(t[i].type.dtype, in, k));
        kl_outfile_write(&o, conv, bytes);
        free(conv);
        free(in);
    }
    return kl_outfile_commit(&o, 0666);
}

/* ---- reading: the header's JSON ---- */

typedef struct jp {
    const char *p, *start, *end;
    char err[200];
} jp;

static void ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static bool fail(jp *j, const char *what)
{
    if (!j->err[0])
        snprintf(j->err, sizeof j->err, "%s at byte %zu of the header", what, (size_t)(j->p - j->start));
    return false;
}

static bool lit(jp *j, char c)
{
    ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

static void put_utf8(kl_buf *b, unsigned u)
{
    if (u < 0x80) {
        kl_buf_putc(b, (char)u);
    } else if (u < 0x800) {
        kl_buf_putc(b, (char)(0xc0 | u >> 6));
        kl_buf_putc(b, (char)(0x80 | (u & 63)));
    } else {
        kl_buf_putc(b, (char)(0xe0 | u >> 12));
        kl_buf_putc(b, (char)(0x80 | ((u >> 6) & 63)));
        kl_buf_putc(b, (char)(0x80 | (u & 63)));
    }
}

/* A JSON string (caller frees), or NULL. */
static char *jstr(jp *j)
{
    if (!lit(j, '"')) {
        fail(j, "expected a string");
        return NULL;
    }
    kl_buf b = {0};
    kl_buf_puts(&b, "");
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p++;
        if (c < 0x20) {
            fail(j, "a control character in a string");
            kl_buf_free(&b);
            return NULL;
        }
        if (c != '\\') {
            kl_buf_putc(&b, (char)c);
            continue;
        }
        if (j->p >= j->end)
            break;
        char e = *j->p++;
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *k = strchr(from, e);
        if (e && k) {
            kl_buf_putc(&b, to[k - from]);
        } else if (e == 'u' && j->end - j->p >= 4) {
            char hex[5] = {0};
            memcpy(hex, j->p, 4);
            char *endp;
            unsigned u = (unsigned)strtoul(hex, &endp, 16);
            if (*endp || u == 0) {
                fail(j, "a bad \\u escape");
                kl_buf_free(&b);
                return NULL;
            }
            j->p += 4;
            put_utf8(&b, u);
        } else {
            fail(j, "a bad escape in a string");
            kl_buf_free(&b);
            return NULL;
        }
    }
    if (j->p >= j->end) {
        fail(j, "an unterminated string");
        kl_buf_free(&b);
        return NULL;
    }
    j->p++;
    return kl_buf_take(&b);
}

/* A non-negative integer below 2^62. */
static bool jint(jp *j, int64_t *out)
{
    ws(j);
    int64_t v = 0;
    const char *start = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (v > ((int64_t)1 << 62) / 10)
            return fail(j, "an integer too large");
        v = v * 10 + (*j->p++ - '0');
    }
    if (j->p == start)
        return fail(j, "expected a non-negative integer");
    *out = v;
    return true;
}

/* [int, ...] of at most max; the count in *n. */
static bool jints(jp *j, int64_t *v, int max, int *n)
{
    *n = 0;
    if (!lit(j, '['))
        return fail(j, "expected '['");
    if (lit(j, ']'))
        return true;
    do {
        if (*n == max)
            return fail(j, "too many numbers in an array");
        if (!jint(j, &v[(*n)++]))
            return false;
    } while (lit(j, ','));
    return lit(j, ']') || fail(j, "expected ']'");
}

typedef struct st_entry {
    char *name, *dtype;
    int64_t shape[IR_MAX_RANK + 1], off[3];
    int rank, noff;
} st_entry;

static bool parse_tensor(jp *j, st_entry *e)
{
    if (!lit(j, '{'))
        return fail(j, "expected '{'");
    bool has_dtype = false, has_shape = false, has_off = false;
    if (!lit(j, '}'))
        do {
            char *key = jstr(j);
            if (!key || !lit(j, ':')) {
                free(key);
                return fail(j, "expected \"key\":");
            }
            bool ok;
            if (!strcmp(key, "dtype") && !has_dtype)
                ok = has_dtype = (e->dtype = jstr(j)) != NULL;
            else if (!strcmp(key, "shape") && !has_shape)
                ok = has_shape = jints(j, e->shape, IR_MAX_RANK + 1, &e->rank);
            else if (!strcmp(key, "data_offsets") && !has_off)
                ok = has_off = jints(j, e->off, 3, &e->noff);
            else {
                snprintf(j->err, sizeof j->err, "tensor '%s': unknown or repeated field '%s'", e->name, key);
                ok = false;
            }
            free(key);
            if (!ok)
                return false;
        } while (lit(j, ','));
    if (!lit(j, '}'))
        return fail(j, "expected '}'");
    if (!has_dtype || !has_shape || !has_off) {
        snprintf(j->err, sizeof j->err, "tensor '%s': needs dtype, shape and data_offsets", e->name);
        return false;
    }
    return true;
}

static bool parse_meta(jp *j, kl_st_file *f)
{
    if (!lit(j, '{'))
        return fail(j, "__metadata__: expected an object of strings");
    if (lit(j, '}'))
        return true;
    do {
        char *k = jstr(j), *v = NULL;
        if (!k || !lit(j, ':') || !(v = jstr(j))) {
            free(k);
            return fail(j, "__metadata__: expected \"key\": \"string\"");
        }
        f->meta = kl_xrealloc(f->meta, sizeof *f->meta * (size_t)(2 * f->nmeta + 2));
        f->meta[2 * f->nmeta] = k;
        f->meta[2 * f->nmeta + 1] = v;
        f->nmeta++;
    } while (lit(j, ','));
    return lit(j, '}') || fail(j, "__metadata__: expected '}'");
}

static int by_offset(const void *a, const void *b)
{
    const kl_st_tensor *x = *(const kl_st_tensor *const *)a, *y = *(const kl_st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

static int name_order(const void *a, const void *b)
{
    return strcmp((*(const kl_st_tensor *const *)a)->name, (*(const kl_st_tensor *const *)b)->name);
}

/* The entries checked and turned into tensors; false with j->err. */
static bool check_entries(jp *j, kl_st_file *f, st_entry *es, int n, const unsigned char *data, uint64_t size)
{
    f->v = kl_xcalloc((size_t)n + 1, sizeof *f->v);
    for (int i = 0; i < n; i++) {
        st_entry *e = &es[i];
        kl_st_tensor *t = &f->v[f->n++];
        t->name = e->name;
        e->name = NULL;
        ir_dtype dt = IR_NONE;
        for (size_t k = 0; k < KL_ARRAY_LEN(st_dtypes); k++)
            if (!strcmp(e->dtype, st_dtypes[k].name))
                dt = st_dtypes[k].dt;
        if (dt == IR_NONE) {
            snprintf(j->err, sizeof j->err, "tensor '%s': dtype %s is not one Kiln reads (F32 BF16 F16 F64 I32 I64 U8)",
                     t->name, e->dtype);
            return false;
        }
        if (e->rank > IR_MAX_RANK) {
            snprintf(j->err, sizeof j->err, "tensor '%s': rank %d (at most %d)", t->name, e->rank, IR_MAX_RANK);
            return false;
        }
        t->type = (ir_type){dt, e->rank, {0}};
        int64_t bytes = ir_dtype_size(dt);
        for (int d = 0; d < e->rank && bytes >= 0; d++)
            bytes = kl_size_mul(bytes, t->type.dim[d] = e->shape[d]);
        if (e->noff != 2 || e->off[0] > e->off[1] || (uint64_t)e->off[1] > size) {
            snprintf(j->err, sizeof j->err, "tensor '%s': data_offsets must be [begin, end] within the %llu bytes of data",
                     t->name, (unsigned long long)size);
            return false;
        }
        if (bytes < 0 || bytes != e->off[1] - e->off[0]) {
            char *ts = ir_type_str(&t->type);
            snprintf(j->err, sizeof j->err, "tensor '%s' (%s): data_offsets cover %lld bytes; the shape needs %lld",
                     t->name, ts, (long long)(e->off[1] - e->off[0]), (long long)bytes);
            free(ts);
            return false;
        }
        t->data = data + e->off[0];
    }
    /* No name twice: neighbours in name order (a pairwise check took
     * minutes for 300,000 tensors). The sorted index is kl_st_find's. */
    f->by_name = kl_xcalloc((size_t)n + 1, sizeof *f->by_name);
    for (int i = 0; i < n; i++)
        f->by_name[i] = &f->v[i];
    qsort(f->by_name, (size_t)n, sizeof *f->by_name, name_order);
    for (int i = 1; i < n; i++)
        if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name)) {
            snprintf(j->err, sizeof j->err, "tensor '%s' appears twice", f->by_name[i]->name);
            return false;
        }
    /* No two tensors share bytes. An empty tensor has none to share: one
     * at another's offset is no overlap. */
    const kl_st_tensor **order = kl_xcalloc((size_t)n + 1, sizeof *order);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (ir_type_bytes(&f->v[i].type) > 0)
            order[m++] = &f->v[i];
    qsort(order, (size_t)m, sizeof *order, by_offset);
    bool ok = true;
    for (int i = 1; i < m && ok; i++)
        if (order[i - 1]->data + ir_type_bytes(&order[i - 1]->type) > order[i]->data) {
            snprintf(j->err, sizeof j->err, "tensors '%s' and '%s' overlap", order[i - 1]->name, order[i]->name);
            ok = false;
        }
    free(order);
    return ok;
}

int kl_st_read(kl_st_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    if (kl_source_read(&f->file, path))
        return -1;
    const unsigned char *d = (const unsigned char *)f->file.text;
    size_t size = f->file.len;
    uint64_t hl = 0;
    if (size >= 8)
        memcpy(&hl, d, 8);
    if (size < 10 || hl < 2 || hl > ST_MAX_HEADER || hl > size - 8 || d[8] != '{') {
        kl_error("%s: not a safetensors file (its first 8 bytes must give the length of a JSON header within the file)",
                 path);
        kl_st_free(f);
        return -1;
    }
    jp j = {(const char *)d + 8, (const char *)d + 8, (const char *)d + 8 + hl, {0}};
    KL_VEC(st_entry) es = {0};
    bool ok = lit(&j, '{');
    if (ok && !lit(&j, '}')) {
        do {
            char *key = jstr(&j);
            if (!key || !lit(&j, ':')) {
                free(key);
                ok = fail(&j, "expected \"name\":");
                break;
            }
            if (!strcmp(key, "__metadata__")) {
                free(key);
                if (!(ok = parse_meta(&j, f)))
                    break;
                continue;
            }
            st_entry e = {.name = key};
            kl_vec_push(es, e);
            if (!(ok = parse_tensor(&j, &es.v[es.n - 1])))
                break;
        } while (lit(&j, ','));
        if (ok && !lit(&j, '}'))
            ok = fail(&j, "expected '}'");
    }
    ws(&j);
    if (ok && j.p != j.end)
        ok = fail(&j, "bytes after the header's object");
    if (ok)
        ok = check_entries(&j, f, es.v, es.n, d + 8 + hl, size - 8 - hl);
    for (int i = 0; i < es.n; i++) {
        free(es.v[i].name);
        free(es.v[i].dtype);
    }
    kl_vec_free(es);
    if (!ok) {
        kl_error("%s: %s", path, j.err[0] ? j.err : "malformed header");
        kl_st_free(f);
        return -1;
    }
    return 0;
}

void kl_st_free(kl_st_file *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->v[i].name);
    free(f->v);
    free(f->by_name);
    for (int i = 0; i < 2 * f->nmeta; i++)
        free(f->meta[i]);
    free(f->meta);
    kl_source_free(&f->file);
    memset(f, 0, sizeof *f);
}

const kl_st_tensor *kl_st_find(const kl_st_file *f, const char *name)
{
    int lo = 0, hi = f->by_name ? f->n : 0;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->by_name[mid]->name, name);
        if (!c)
            return f->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- --init ---- */

static void list(kl_buf *b, const char *what, const char **names, int n)
{
    if (!n)
        return;
    kl_buf_printf(b, "%s%s (%d): ", b->len ? "; " : "", what, n);
    for (int i = 0; i < n && i < 8; i++)
        kl_buf_printf(b, "%s'%s'", i ? ", " : "", names[i]);
    if (n > 8)
        kl_buf_printf(b, " and %d more", n - 8);
}

int kl_st_init_session(kl_session *s, const char *path, bool partial, bool quiet)
{
    kl_st_file f;
    if (kl_st_read(&f, path))
        return -1;
    int rc = -1, nmissing = 0, nextra = 0, nshape = 0;
    const char **missing = kl_xcalloc((size_t)s->persist.n + 1, sizeof *missing);
    const char **shape = kl_xcalloc((size_t)s->persist.n + 1, sizeof *shape);
    const char **extra = kl_xcalloc((size_t)f.n + 1, sizeof *extra);
    const kl_st_tensor **src = kl_xcalloc((size_t)s->persist.n + 1, sizeof *src);
    kl_buf types = {0};
    for (int i = 0; i < f.n; i++) {
        kl_persist *p = kl_session_find(s, f.v[i].name);
        if (!p || !kl_st_model_role(p->role))
            extra[nextra++] = f.v[i].name;
    }
    for (int i = 0; i < s->persist.n; i++) {
        kl_persist *p = &s->persist.v[i];
        if (!kl_st_model_role(p->role))
            continue;
        const kl_st_tensor *t = kl_st_find(&f, p->name);
        if (!t) {
            missing[nmissing++] = p->name;
            continue;
        }
        bool same = t->type.rank == p->type.rank &&
                    !memcmp(t->type.dim, p->type.dim, sizeof(int64_t) * (size_t)p->type.rank);
        bool convertible = ir_dtype_is_float(t->type.dtype) == ir_dtype_is_float(p->type.dtype);
        if (!same || !convertible) {
            char *a = ir_type_str(&t->type), *b = ir_type_str(&p->type);
            if (nshape < 4)
                kl_buf_printf(&types, "%s'%s' is %s in the file but %s in the model", nshape ? "; " : "", p->name, a, b);
            free(a);
            free(b);
            shape[nshape++] = p->name;
            continue;
        }
        src[i] = t;
    }
    if (!partial && (nmissing || nextra || nshape)) {
        kl_buf b = {0};
        list(&b, "missing from the file", missing, nmissing);
        list(&b, "in the file but not in the model", extra, nextra);
        if (nshape)
            kl_buf_printf(&b, "%s%s%s", b.len ? "; " : "", types.s, nshape > 4 ? " ..." : "");
        kl_error("%s: does not fit the model: %s\n---> --init-partial loads the tensors that fit and keeps the "
                 "initial values of the rest", path, b.s);
        kl_buf_free(&b);
        goto done;
    }
    if (partial && !quiet && (nmissing || nextra || nshape)) {
        kl_buf b = {0};
        list(&b, "kept at their initial values (not in the file)", missing, nmissing);
        list(&b, "kept at their initial values (another shape in the file)", shape, nshape);
        list(&b, "ignored (not in the model)", extra, nextra);
        kl_fprintf_escaped(stderr, "kiln: --init-partial %s: %s\n", path, b.s);
        kl_buf_free(&b);
    }
    /* Weights with inf or nan would make the first step "diverge":
     * refused before anything is loaded. */
    for (int i = 0; i < s->persist.n; i++) {
        int64_t bad = src[i] ? kl_first_nonfinite(src[i]->type.dtype, src[i]->data, ir_type_numel(&src[i]->type)) : -1;
        if (bad >= 0) {
            kl_error("%s: element %lld of '%s' is not finite (inf or nan): no run can start from it", path,
                     (long long)bad, src[i]->name);
            goto done;
        }
    }
    for (int i = 0; i < s->persist.n; i++) {
        kl_persist *p = &s->persist.v[i];
        const kl_st_tensor *t = src[i];
        if (!t)
            continue;
        size_t bytes = (size_t)ir_type_bytes(&p->type);
        void *host = kl_xmalloc(bytes ? bytes : 1), *in = aligned_copy(t);
        for (int64_t k = 0; k < ir_type_numel(&p->type); k++)
            kl_store_as(p->type.dtype, host, k, kl_load_as(t->type.dtype, in, k));
        s->be->ops->copy_in(s->be, p->ptr, host, bytes);
        free(host);
        free(in);
    }
    for (int i = 0; i < s->persist.n; i++)
        if (!strcmp(s->persist.v[i].role, "lowp"))
            kl_checkpoint_rebuild_copy(s, &s->persist.v[i]);
    rc = 0;
done:
    kl_buf_free(&types);
    free(missing);
    free(shape);
    free(extra);
    free(src);
    kl_st_free(&f);
    return rc;
}

/* ---- export ---- */

static int export_values(const char *path, kl_st_tensor *t, int n, ir_dtype out, const char *model,
                         const char *precision, uint64_t step)
{
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%llu", (unsigned long long)step);
    const char *meta[] = {"kiln.model", model,         "kiln.step",      stepbuf,
                          "kiln.version", KILN_VERSION, "kiln.precision", precision,
                          "kiln.format", KL_ST_EXPORT_FORMAT, NULL};
    return kl_st_write(path, t, n, out, meta);
}

int kl_ckpt_export(const kl_ckpt *c, const char *path, ir_dtype out)
{
    kl_st_tensor *t = kl_xcalloc((size_t)c->n + 1, sizeof *t);
    int n = 0;
    for (int i = 0; i < c->n; i++)
        if (kl_st_model_role(c->v[i].role))
            t[n++] = (kl_st_tensor){c->v[i].name, c->v[i].type, c->v[i].data};
    int rc = export_values(path, t, n, out, c->model, c->precision, c->rs.step);
    free(t);
    return rc;
}

int kl_session_export(kl_session *s, const char *path, ir_dtype out, const char *model, const char *precision,
                      uint64_t step)
{
    kl_st_tensor *t = kl_xcalloc((size_t)s->persist.n + 1, sizeof *t);
    int n = 0;
    for (int i = 0; i < s->persist.n; i++) {
        kl_persist *p = &s->persist.v[i];
        if (!kl_st_model_role(p->role))
            continue;
        size_t bytes = (size_t)ir_type_bytes(&p->type);
        unsigned char *host = kl_xmalloc(bytes ? bytes : 1);
        s->be->ops->copy_out(s->be, host, p->ptr, bytes);
        t[n++] = (kl_st_tensor){p->name, p->type, host};
    }
    int rc = export_values(path, t, n, out, model, precision, step);
    for (int i = 0; i < n; i++)
        free((void *)t[i].data);
    free(t);
    return rc;
}
