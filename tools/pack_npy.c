/* kiln pack's NumPy input: .npy arrays whose first axis is the samples,
 * and 1-D arrays of token ids (--token-ids). See pack.h. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack.h"

/* ---- NumPy .npy: the first axis is the sample; each sample is stored as
 * its own .npy (KEY.NAME.npy), or, for the field "cls" (a 1-D integer
 * array), as a decimal .cls label ---- */

typedef struct npy_array {
    char *name, *path;
    void *map;
    size_t map_len;
    const uint8_t *data;
    char descr[8];      /* "<f4", "|u1" ... */
    int item;           /* bytes per element */
    int rank;           /* of one sample */
    int64_t count, shape[8], sample_bytes;
} npy_array;

typedef struct npy_ctx {
    npy_array a[PACK_MAX_SPLITS][PACK_MAX_MEMBERS];
    int n[PACK_MAX_SPLITS];
} npy_ctx;

static const struct { const char *descr; int item; const char *dtype; bool integer; } npy_dtypes[] = {
    {"|u1", 1, "u8", true},   {"|i1", 1, "i8", true},   {"|b1", 1, "bool", true}, {"<u2", 2, "u16", true},
    {"<i2", 2, "i16", true},  {"<f2", 2, "f16", false}, {"<u4", 4, "u32", true},  {"<i4", 4, "i32", true},
    {"<f4", 4, "f32", false}, {"<u8", 8, "u64", true},  {"<i8", 8, "i64", true},  {"<f8", 8, "f64", false},
};

static int npy_dtype(const char *descr)
{
    for (int i = 0; i < (int)KL_ARRAY_LEN(npy_dtypes); i++)
        if (!strcmp(npy_dtypes[i].descr, descr))
            return i;
    return -1;
}

/* The value after 'key': in a header dict, or NULL. */
static const char *npy_key(const char *h, const char *key)
{
    char *k = kl_xasprintf("'%s':", key);
    const char *p = strstr(h, k);
    if (p)
        p += strlen(k);
    free(k);
    while (p && *p == ' ')
        p++;
    return p;
}

/* Parses the header of a mapped .npy: 0, or -1 with why. */
static int npy_parse(npy_array *a, const uint8_t *p, size_t n, char *why, size_t wn)
{
    if (n < 10 || memcmp(p, "\x93NUMPY", 6)) {
        snprintf(why, wn, "not a NumPy .npy file (no \\x93NUMPY magic)");
        return -1;
    }
    int major = p[6];
    size_t hlen, off;
    if (major == 1) {
        hlen = p[8] | (size_t)p[9] << 8;
        off = 10;
    } else if (major == 2 || major == 3) {
        if (n < 12) {
            snprintf(why, wn, "truncated .npy header");
            return -1;
        }
        hlen = p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
        off = 12;
    } else {
        snprintf(why, wn, ".npy format version %d.%d (this Kiln reads 1, 2 and 3)", p[6], p[7]);
        return -1;
    }
    if (hlen > n - off) {
        snprintf(why, wn, "truncated .npy header (%zu of %zu bytes)", n - off, hlen);
        return -1;
    }
    char *h = kl_xstrndup((const char *)p + off, hlen);
    int rc = -1;
    const char *d = npy_key(h, "descr"), *fo = npy_key(h, "fortran_order"), *sh = npy_key(h, "shape");
    if (!d || !fo || !sh || (*d != '\'' && *d != '"') || *sh != '(') {
        snprintf(why, wn, "corrupt .npy header: %.120s", h);
        goto done;
    }
    size_t dl = strcspn(d + 1, "'\"");
    if (dl >= sizeof a->descr) {
        snprintf(why, wn, "dtype %.40s is not supported (structured or object arrays cannot be packed)", d);
        goto done;
    }
    memcpy(a->descr, d + 1, dl);
    a->descr[dl] = 0;
    int t = npy_dtype(a->descr);
    if (t < 0) {
        snprintf(why, wn, "dtype '%s' is not supported (%s; supported: little-endian bool, ints, f16, f32, f64)",
                 a->descr,
                 a->descr[0] == '>' ? "big-endian: convert with arr.astype(arr.dtype.newbyteorder('<'))"
                 : a->descr[1] == 'O' ? "an object array, e.g. rows of different shapes"
                                      : "not a number type");
        goto done;
    }
    if (!strncmp(fo, "True", 4)) {
        snprintf(why, wn, "a Fortran-order array (save np.ascontiguousarray(arr) instead)");
        goto done;
    }
    a->item = npy_dtypes[t].item;
    int rank = 0;
    int64_t dims[9];
    const char *q = sh + 1;
    for (;;) {
        while (*q == ' ' || *q == ',')
            q++;
        if (*q == ')')
            break;
        char *end;
        long long v = strtoll(q, &end, 10);
        if (end == q || v < 0 || rank == 9) {
            snprintf(why, wn, "corrupt .npy shape %.60s", sh);
            goto done;
        }
        dims[rank++] = v;
        q = end;
        while (*q == 'L')
            q++;
    }
    if (!rank) {
        snprintf(why, wn, "a 0-dimensional array (the first axis must be the samples)");
        goto done;
    }
    a->count = dims[0];
    a->rank = rank - 1;
    a->sample_bytes = a->item;
    for (int i = 1; i < rank; i++) {
        a->shape[i - 1] = dims[i];
        a->sample_bytes = kl_size_mul(a->sample_bytes, dims[i]);
    }
    int64_t total = kl_size_mul(a->sample_bytes, a->count);
    if (a->sample_bytes < 0 || total < 0 || (uint64_t)total > n - off - hlen) {
        snprintf(why, wn, "truncated: the shape announces %lld bytes of data, the file holds %zu", (long long)total,
                 n - off - hlen);
        goto done;
    }
    if ((uint64_t)total != n - off - hlen) {
        snprintf(why, wn, "corrupt: %zu bytes after the data the shape announces", n - off - hlen - (size_t)total);
        goto done;
    }
    a->data = p + off + hlen;
    rc = 0;
done:
    free(h);
    return rc;
}

static void npy_close(npy_array *a)
{
    if (a->map)
        munmap(a->map, a->map_len);
    free(a->name);
    free(a->path);
    memset(a, 0, sizeof *a);
}

/* "NAME=FILE" or "FILE" (NAME npy). */
static int npy_open(const char *spec, npy_array *a)
{
    memset(a, 0, sizeof *a);
    const char *eq = strchr(spec, '=');
    a->name = eq ? kl_xstrndup(spec, (size_t)(eq - spec)) : kl_xstrdup("npy");
    a->path = kl_xstrdup(eq ? eq + 1 : spec);
    bool ok = a->name[0] != 0;
    for (const char *c = a->name; *c; c++)
        ok &= isalnum((unsigned char)*c) || *c == '_';
    if (!ok) {
        kl_error("--npy %s: the field name '%s' must be letters, digits and _", spec, a->name);
        return -1;
    }
    char why[200];
    int fd = kl_open_regular(a->path, why, sizeof why);
    if (fd < 0) {
        kl_error("%s: %s", a->path, why);
        return -1;
    }
    struct stat st;
    fstat(fd, &st);
    a->map_len = (size_t)st.st_size;
    a->map = a->map_len ? mmap(NULL, a->map_len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (a->map == MAP_FAILED) {
        a->map = NULL;
        kl_error("%s: cannot map the file: %s", a->path, strerror(errno));
        return -1;
    }
    if (npy_parse(a, a->map ? a->map : (const uint8_t *)"", a->map_len, why, sizeof why)) {
        kl_error("%s: %s", a->path, why);
        return -1;
    }
    if (!strcmp(a->name, "cls") && (a->rank != 0 || !npy_dtypes[npy_dtype(a->descr)].integer)) {
        kl_error("%s: the field cls holds labels, a 1-D integer array; this one is %s with %d dimensions", a->path,
                 npy_dtypes[npy_dtype(a->descr)].dtype, a->rank + 1);
        return -1;
    }
    return 0;
}

/* The shape of one sample, "(28, 28)". */
static void npy_shape_str(const npy_array *a, char *out, size_t n)
{
    kl_buf b = {0};
    kl_buf_puts(&b, "(");
    for (int i = 0; i < a->rank; i++)
        kl_buf_printf(&b, "%lld%s", (long long)a->shape[i], a->rank == 1 ? "," : i + 1 < a->rank ? ", " : "");
    kl_buf_puts(&b, ")");
    snprintf(out, n, "%s", b.s);
    kl_buf_free(&b);
}

static int64_t npy_label(const npy_array *a, int64_t i)
{
    const uint8_t *p = a->data + i * a->item;
    uint64_t u = 0;
    for (int k = 0; k < a->item; k++)
        u |= (uint64_t)p[k] << (8 * k);
    if (a->descr[1] == 'i' && a->item < 8 && (u >> (8 * a->item - 1)) & 1)
        u |= ~(uint64_t)0 << (8 * a->item);
    return (int64_t)u;
}

static int npy_sample(pack_input *in, int split, int64_t i, pack_sample *s)
{
    npy_ctx *x = in->ctx;
    s->n = 0;
    for (int f = 0; f < x->n[split]; f++) {
        const npy_array *a = &x->a[split][f];
        if (!strcmp(a->name, "cls")) {
            pack_put_cls(pack_sample_add(s, "cls"), npy_label(a, i));
            continue;
        }
        char ext[64];
        snprintf(ext, sizeof ext, strcmp(a->name, "npy") ? "%s.npy" : "npy", a->name);
        kl_buf *b = pack_sample_add(s, ext);
        /* The header np.save writes (format 1.0): the dict, spaces, and a
         * newline, padded so that the data starts at a multiple of 64. */
        char shape[200];
        npy_shape_str(a, shape, sizeof shape);
        char *dict = kl_xasprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", a->descr, shape);
        size_t len = strlen(dict) + 1, pad = (64 - (10 + len) % 64) % 64;
        kl_buf_putn(b, "\x93NUMPY\x01\x00", 8);
        kl_buf_putc(b, (char)((len + pad) & 0xff));
        kl_buf_putc(b, (char)((len + pad) >> 8));
        kl_buf_puts(b, dict);
        for (size_t k = 0; k < pad; k++)
            kl_buf_putc(b, ' ');
        kl_buf_putc(b, '\n');
        kl_buf_putn(b, (const char *)a->data + i * a->sample_bytes, (size_t)a->sample_bytes);
        free(dict);
    }
    return 0;
}

static void npy_fields(pack_input *in, kl_buf *j)
{
    npy_ctx *x = in->ctx;
    kl_buf_puts(j, "{");
    for (int f = 0; f < x->n[0]; f++) {
        const npy_array *a = &x->a[0][f];
        const char *dtype = npy_dtypes[npy_dtype(a->descr)].dtype;
        if (!strcmp(a->name, "cls")) {
            kl_buf_printf(j, "%s\"cls\": {\"dtype\": \"int\", \"shape\": [], \"encoding\": \"decimal text\"}",
                          f ? ", " : "");
            continue;
        }
        kl_buf_printf(j, "%s\"%s%s\": {\"dtype\": \"%s\", \"shape\": [", f ? ", " : "",
                      strcmp(a->name, "npy") ? a->name : "", strcmp(a->name, "npy") ? ".npy" : "npy", dtype);
        for (int i = 0; i < a->rank; i++)
            kl_buf_printf(j, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
        kl_buf_puts(j, "], \"encoding\": \"npy\"}");
    }
    kl_buf_puts(j, "}");
}

static void npy_free(pack_input *in)
{
    npy_ctx *x = in->ctx;
    for (int k = 0; k < PACK_MAX_SPLITS; k++)
        for (int f = 0; f < PACK_MAX_MEMBERS; f++)
            npy_close(&x->a[k][f]);
    free(x);
}

int pack_open_npy(char **fields, int nfields, char **test_fields, int ntest, int64_t limit, pack_input *in)
{
    memset(in, 0, sizeof *in);
    npy_ctx *x = kl_xcalloc(1, sizeof *x);
    in->kind = "npy";
    in->ctx = x;
    in->free = npy_free;
    in->sample = npy_sample;
    in->fields = npy_fields;
    in->num_classes = -1;
    kl_buf src = {0};
    for (int k = 0; k < (ntest ? 2 : 1); k++) {
        char **specs = k ? test_fields : fields;
        int n = k ? ntest : nfields;
        if (n > PACK_MAX_MEMBERS) {
            kl_error("kiln pack: at most %d .npy fields per split", PACK_MAX_MEMBERS);
            goto fail;
        }
        for (int f = 0; f < n; f++) {
            npy_array *a = &x->a[k][f];
            x->n[k] = f + 1;
            kl_buf_printf(&src, "%s%s", src.len ? " " : "", specs[f]);
            if (npy_open(specs[f], a))
                goto fail;
            for (int g = 0; g < f; g++)
                if (!strcmp(x->a[k][g].name, a->name)) {
                    kl_error("%s: the field '%s' is given twice (name fields as --npy NAME=FILE)", a->path, a->name);
                    goto fail;
                }
            if (a->count != x->a[k][0].count) {
                kl_error("%s: %lld samples, but %s has %lld (the first axis is the samples)", a->path,
                         (long long)a->count, x->a[k][0].path, (long long)x->a[k][0].count);
                goto fail;
            }
            if (k == 0)
                continue;
            /* The test split has the train split's fields, dtypes and
             * per-sample shapes. */
            const npy_array *t = NULL;
            for (int g = 0; g < nfields; g++)
                if (!strcmp(x->a[0][g].name, a->name))
                    t = &x->a[0][g];
            char s1[200], s2[200];
            npy_shape_str(a, s1, sizeof s1);
            if (!t) {
                kl_error("%s: the test split's field '%s' is not a train field", a->path, a->name);
                goto fail;
            }
            npy_shape_str(t, s2, sizeof s2);
            if (strcmp(s1, s2) || strcmp(a->descr, t->descr)) {
                kl_error("%s: samples of shape %s and dtype %s, but the train split's (%s) are %s and %s", a->path, s1,
                         a->descr, t->path, s2, t->descr);
                goto fail;
            }
        }
        if (k == 1 && ntest != nfields) {
            kl_error("%s: the test split has %d fields, the train split %d", x->a[1][0].path, ntest, nfields);
            goto fail;
        }
        pack_add_split(in, k ? "test" : "train", x->a[k][0].count, limit);
        /* Labels are class indices: none negative; the classes count to the
         * largest over the splits. */
        for (int f = 0; f < x->n[k]; f++) {
            const npy_array *a = &x->a[k][f];
            for (int64_t i = 0; !strcmp(a->name, "cls") && i < a->count; i++) {
                int64_t label = npy_label(a, i);
                if (label < 0) {
                    kl_error("%s: label %lld at index %lld is negative (labels are class indices 0, 1, ...)",
                             a->path, (long long)label, (long long)i);
                    goto fail;
                }
                in->num_classes = label + 1 > in->num_classes ? label + 1 : in->num_classes;
            }
        }
    }
    in->source = kl_buf_take(&src);
    return 0;
fail:
    kl_buf_free(&src);
    pack_input_free(in);
    return -1;
}

/* ---- token ids: a 1-D integer .npy, for --token-ids ---- */

int pack_read_token_ids(const char *path, uint32_t **ids, int64_t *n, uint32_t *max_id)
{
    npy_array a;
    char *spec = kl_xasprintf("ids=%s", path);
    int rc = npy_open(spec, &a);
    free(spec);
    *ids = NULL;
    *n = 0;
    *max_id = 0;
    int t = rc ? -1 : npy_dtype(a.descr);
    if (!rc && (a.rank != 0 || !npy_dtypes[t].integer || !strcmp(npy_dtypes[t].dtype, "bool"))) {
        kl_error("%s: token ids are a 1-D integer array; this one is a %d-D %s array", path, a.rank + 1,
                 npy_dtypes[t].dtype);
        rc = -1;
    }
    if (!rc && a.count == 0) {
        kl_error("%s: no token ids (an empty array)", path);
        rc = -1;
    }
    if (!rc) {
        *ids = kl_xmalloc((size_t)a.count * sizeof **ids);
        for (int64_t i = 0; i < a.count && !rc; i++) {
            int64_t v = npy_label(&a, i);
            /* (u64 ids past 2^63 read as negative: too large) */
            bool big = v > (int64_t)UINT32_MAX || (v < 0 && a.descr[1] == 'u');
            if (v < 0 || big) {
                kl_error("%s: token id %s%lld at position %lld is %s", path, big && v < 0 ? "above " : "",
                         big && v < 0 ? (long long)INT64_MAX : (long long)v, (long long)i,
                         big ? "2^32 or more (token files hold u32 ids at most)" : "negative (ids are 0 and up)");
                rc = -1;
                break;
            }
            (*ids)[i] = (uint32_t)v;
            if ((uint32_t)v > *max_id)
                *max_id = (uint32_t)v;
        }
        *n = a.count;
    }
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    npy_close(&a);
    return rc;
}
