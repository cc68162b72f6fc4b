/* kiln pack's inputs: each turns a data set into splits of samples, a
 * sample being the members WebDataset stores under one key. See pack.h. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack.h"
#include "pack_libs.h"
#include "runtime/data.h"

kl_buf *pack_sample_add(pack_sample *s, const char *ext)
{
    kl_check(s->n < PACK_MAX_MEMBERS);
    snprintf(s->ext[s->n], sizeof s->ext[0], "%s", ext);
    kl_buf *b = &s->data[s->n++];
    b->len = 0;
    return b;
}

void pack_json_str(kl_buf *b, const char *s)
{
    kl_buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            kl_buf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            kl_buf_printf(b, "\\u%04x", *p);
        else
            kl_buf_putc(b, (char)*p);
    }
    kl_buf_putc(b, '"');
}

void pack_input_free(pack_input *in)
{
    if (in->free)
        in->free(in);
    free(in->source);
    for (int i = 0; i < in->nsplits; i++)
        free(in->split_name[i]);
    kl_buf_free(&in->class_names);
    memset(in, 0, sizeof *in);
}

static void add_split(pack_input *in, const char *name, int64_t count, int64_t limit)
{
    kl_check(in->nsplits < PACK_MAX_SPLITS);
    in->split_name[in->nsplits] = kl_xstrdup(name);
    in->split_count[in->nsplits++] = limit > 0 && count > limit ? limit : count;
}

static void put_cls(kl_buf *b, int64_t label)
{
    kl_buf_printf(b, "%lld", (long long)label);
}

/* ---- PNG encoding (libpng): 8-bit grey or RGB, into a buffer ---- */

static void png_to_buf(png_structp png, png_bytep data, size_t n)
{
    kl_buf_putn(png_get_io_ptr(png), (const char *)data, n);
}

static void png_no_flush(png_structp png)
{
    (void)png;
}

/* h x w pixels of c channels (1 or 3), rows packed. No time or text
 * chunks: the same pixels give the same bytes. */
static int png_encode(kl_buf *out, const uint8_t *pixels, int64_t h, int64_t w, int c)
{
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        kl_error("libpng: cannot start an encoder");
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        kl_error("libpng: encoding a %lldx%lld image failed", (long long)h, (long long)w);
        return -1;
    }
    png_set_write_fn(png, out, png_to_buf, png_no_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int64_t y = 0; y < h; y++)
        png_write_row(png, pixels + y * w * c);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return 0;
}

/* ---- IDX (runtime/data.c reads it): images become PNG, labels .cls ---- */

typedef struct idx_ctx {
    kl_dataset ds[PACK_MAX_SPLITS];
} idx_ctx;

static int idx_sample(pack_input *in, int split, int64_t i, pack_sample *s)
{
    idx_ctx *x = in->ctx;
    const kl_dataset *d = &x->ds[split];
    s->n = 0;
    if (png_encode(pack_sample_add(s, "png"), d->features + i * d->sample_bytes, d->shape[0], d->shape[1], 1))
        return -1;
    put_cls(pack_sample_add(s, "cls"), d->labels[i]);
    return 0;
}

static void idx_fields(pack_input *in, kl_buf *j)
{
    idx_ctx *x = in->ctx;
    kl_buf_printf(j, "{\"png\": {\"dtype\": \"u8\", \"shape\": [%lld, %lld, 1], \"encoding\": \"png\"}, ",
                  (long long)x->ds[0].shape[0], (long long)x->ds[0].shape[1]);
    kl_buf_printf(j, "\"cls\": {\"dtype\": \"int\", \"shape\": [], \"encoding\": \"decimal text\"}}");
}

static void idx_free(pack_input *in)
{
    idx_ctx *x = in->ctx;
    for (int i = 0; i < in->nsplits; i++)
        kl_dataset_free(&x->ds[i]);
    free(x);
}

static bool idx_has(const char *dir, const char *base)
{
    char *a = kl_xasprintf("%s/%s", dir, base), *b = kl_xasprintf("%s/%s.gz", dir, base);
    bool has = access(a, F_OK) == 0 || access(b, F_OK) == 0;
    free(a);
    free(b);
    return has;
}

int pack_open_idx(const char *dir, int64_t limit, pack_input *in)
{
    memset(in, 0, sizeof *in);
    idx_ctx *x = kl_xcalloc(1, sizeof *x);
    in->kind = "idx";
    in->source = kl_xstrdup(dir);
    in->ctx = x;
    in->free = idx_free;
    in->sample = idx_sample;
    in->fields = idx_fields;
    static const char *files[][2] = {{"train", "train"}, {"t10k", "test"}};
    for (int k = 0; k < 2; k++) {
        /* The test split is optional: only the train split must be there. */
        if (k == 1 && !idx_has(dir, "t10k-images-idx3-ubyte") && !idx_has(dir, "t10k-labels-idx1-ubyte"))
            break;
        kl_dataset *d = &x->ds[in->nsplits];
        if (kl_idx_load(dir, files[k][0], d)) {
            pack_input_free(in);
            return -1;
        }
        add_split(in, files[k][1], d->count, limit);
        if (k == 1 && (d->shape[0] != x->ds[0].shape[0] || d->shape[1] != x->ds[0].shape[1])) {
            kl_error("%s: the test images are %lldx%lld, the train images %lldx%lld", dir, (long long)d->shape[0],
                     (long long)d->shape[1], (long long)x->ds[0].shape[0], (long long)x->ds[0].shape[1]);
            pack_input_free(in);
            return -1;
        }
        in->num_classes = d->max_label + 1 > in->num_classes ? d->max_label + 1 : in->num_classes;
    }
    return 0;
}

/* ---- ImageFolder: ROOT/CLASS/IMAGE, or ROOT/{train,val,test}/CLASS/IMAGE ---- */

typedef struct image_file {
    char *path;
    int label;
} image_file;

typedef struct folder_ctx {
    KL_VEC(char *) classes;                 /* sorted; a label is an index */
    KL_VEC(image_file) files[PACK_MAX_SPLITS];
    /* The shape seen so far per encoding (0: png, 1: jpg); mixed when
     * two images differ. */
    int64_t shape[2][3];
    bool seen[2], mixed[2];
    kl_buf bytes;
} folder_ctx;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir, sorted by bytes, hidden ones (".x") left out; or -1
 * after an error. */
static int list_dir(const char *dir, char ***names, int *n)
{
    DIR *d = opendir(dir);
    if (!d) {
        kl_error("%s: cannot read the folder: %s", dir, strerror(errno));
        return -1;
    }
    KL_VEC(char *) v = {0};
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            kl_vec_push(v, kl_xstrdup(e->d_name));
    closedir(d);
    if (v.n)
        qsort(v.v, (size_t)v.n, sizeof *v.v, cmp_str);
    *names = v.v;
    *n = v.n;
    return 0;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* "png" or "jpg" for an image file name, else NULL. */
static const char *image_ext(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return NULL;
    if (!strcasecmp(dot, ".png"))
        return "png";
    if (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"))
        return "jpg";
    return NULL;
}

/* Reads one split's CLASS/IMAGE tree. The train split (first) defines the
 * classes; another split's class must be one of them. */
static int folder_split(folder_ctx *x, int k, const char *dir, bool define_classes)
{
    char **cls;
    int ncls;
    if (list_dir(dir, &cls, &ncls))
        return -1;
    int rc = -1, nclass_dirs = 0;
    for (int c = 0; c < ncls; c++) {
        char *cdir = kl_xasprintf("%s/%s", dir, cls[c]);
        if (!is_dir(cdir)) {
            kl_error("%s: not in a class folder (an ImageFolder holds ROOT/CLASS/IMAGE.png or .jpg)", cdir);
            free(cdir);
            goto done;
        }
        nclass_dirs++;
        int label = -1;
        if (define_classes) {
            label = x->classes.n;
            kl_vec_push(x->classes, kl_xstrdup(cls[c]));
        } else {
            for (int i = 0; i < x->classes.n; i++)
                if (!strcmp(x->classes.v[i], cls[c]))
                    label = i;
            if (label < 0) {
                kl_error("%s: class '%s' is not one of the train split's classes", cdir, cls[c]);
                free(cdir);
                goto done;
            }
        }
        char **files;
        int nfiles;
        if (list_dir(cdir, &files, &nfiles)) {
            free(cdir);
            goto done;
        }
        bool bad = !nfiles;
        if (bad)
            kl_error("%s: an empty class folder (no images)", cdir);
        for (int f = 0; f < nfiles && !bad; f++) {
            char *path = kl_xasprintf("%s/%s", cdir, files[f]);
            if (!image_ext(files[f]) || is_dir(path)) {
                kl_error("%s: not an image file (an ImageFolder's class folders hold .png, .jpg and .jpeg files)",
                         path);
                free(path);
                bad = true;
            } else {
                kl_vec_push(x->files[k], ((image_file){path, label}));
            }
        }
        free_names(files, nfiles);
        free(cdir);
        if (bad)
            goto done;
    }
    if (!nclass_dirs) {
        kl_error("%s: no class folders (an ImageFolder holds ROOT/CLASS/IMAGE.png or .jpg)", dir);
        goto done;
    }
    rc = 0;
done:
    free_names(cls, ncls);
    return rc;
}

/* Reads a whole file into b; -1 after an error naming it. */
static int read_file(const char *path, kl_buf *b)
{
    char why[160];
    int fd = kl_open_regular(path, why, sizeof why);
    if (fd < 0) {
        kl_error("%s: %s", path, why);
        return -1;
    }
    b->len = 0;
    char chunk[65536];
    ssize_t got;
    while ((got = read(fd, chunk, sizeof chunk)) > 0)
        kl_buf_putn(b, chunk, (size_t)got);
    int e = errno;
    close(fd);
    if (got < 0) {
        kl_error("%s: %s", path, strerror(e));
        return -1;
    }
    return 0;
}

static uint32_t be16(const uint8_t *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t be32(const uint8_t *p)
{
    return be16(p) << 16 | be16(p + 2);
}

/* The height, width and channels an image's header announces: 0, or -1
 * with why. The pixels are not decoded (the files are stored as they are). */
static int image_shape(const uint8_t *p, size_t n, bool png, int64_t shape[3], const char **why)
{
    if (png) {
        static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
        if (n < 8 || memcmp(p, sig, 8)) {
            *why = "not a PNG file (no PNG signature)";
            return -1;
        }
        if (n < 33 || memcmp(p + 12, "IHDR", 4)) {
            *why = "truncated or corrupt PNG (no IHDR chunk)";
            return -1;
        }
        static const int channels[7] = {1, 0, 3, 3, 2, 0, 4};
        uint8_t type = p[25];
        if (type > 6 || !channels[type] || !be32(p + 16) || !be32(p + 20)) {
            *why = "corrupt PNG header";
            return -1;
        }
        shape[0] = be32(p + 20);
        shape[1] = be32(p + 16);
        shape[2] = channels[type];
        return 0;
    }
    if (n < 3 || p[0] != 0xff || p[1] != 0xd8 || p[2] != 0xff) {
        *why = "not a JPEG file (no start-of-image marker)";
        return -1;
    }
    /* Segments after the start of image: the frame header (SOF0-15 but
     * DHT, JPG and DAC) holds the size and the component count. */
    size_t i = 2;
    while (i + 4 <= n) {
        if (p[i] != 0xff) {
            break;
        }
        uint8_t m = p[i + 1];
        if (m == 0xff) {
            i++;
            continue;
        }
        size_t len = be16(p + i + 2);
        if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
            if (i + 10 > n || len < 8)
                break;
            shape[0] = be16(p + i + 5);
            shape[1] = be16(p + i + 7);
            shape[2] = p[i + 9];
            if (!shape[0] || !shape[1] || !shape[2])
                break;
            return 0;
        }
        if (m == 0xd9 || m == 0xda || len < 2)
            break;
        i += 2 + len;
    }
    *why = "truncated or corrupt JPEG (no frame header before the image data)";
    return -1;
}

static int folder_sample(pack_input *in, int split, int64_t i, pack_sample *s)
{
    folder_ctx *x = in->ctx;
    const image_file *f = &x->files[split].v[i];
    const char *ext = image_ext(f->path);
    s->n = 0;
    kl_buf *b = pack_sample_add(s, ext);
    if (read_file(f->path, b))
        return -1;
    int e = !strcmp(ext, "jpg");
    int64_t shape[3];
    const char *why;
    if (image_shape((const uint8_t *)b->s, b->len, !e, shape, &why)) {
        kl_error("%s: %s", f->path, why);
        return -1;
    }
    if (!x->seen[e])
        memcpy(x->shape[e], shape, sizeof shape);
    else if (memcmp(x->shape[e], shape, sizeof shape))
        x->mixed[e] = true;
    x->seen[e] = true;
    put_cls(pack_sample_add(s, "cls"), f->label);
    return 0;
}

static void folder_fields(pack_input *in, kl_buf *j)
{
    folder_ctx *x = in->ctx;
    kl_buf_puts(j, "{");
    static const char *names[2] = {"png", "jpg"};
    for (int e = 0; e < 2; e++) {
        if (!x->seen[e])
            continue;
        kl_buf_printf(j, "\"%s\": {\"dtype\": \"u8\", \"shape\": ", names[e]);
        if (x->mixed[e])
            kl_buf_puts(j, "null");
        else
            kl_buf_printf(j, "[%lld, %lld, %lld]", (long long)x->shape[e][0], (long long)x->shape[e][1],
                          (long long)x->shape[e][2]);
        kl_buf_printf(j, ", \"encoding\": \"%s\"}, ", names[e]);
    }
    kl_buf_puts(j, "\"cls\": {\"dtype\": \"int\", \"shape\": [], \"encoding\": \"decimal text\"}}");
}

static void folder_free(pack_input *in)
{
    folder_ctx *x = in->ctx;
    for (int i = 0; i < x->classes.n; i++)
        free(x->classes.v[i]);
    kl_vec_free(x->classes);
    for (int k = 0; k < PACK_MAX_SPLITS; k++) {
        for (int i = 0; i < x->files[k].n; i++)
            free(x->files[k].v[i].path);
        kl_vec_free(x->files[k]);
    }
    kl_buf_free(&x->bytes);
    free(x);
}

int pack_open_imagefolder(const char *root, int64_t limit, pack_input *in)
{
    memset(in, 0, sizeof *in);
    folder_ctx *x = kl_xcalloc(1, sizeof *x);
    in->kind = "imagefolder";
    in->source = kl_xstrdup(root);
    in->ctx = x;
    in->free = folder_free;
    in->sample = folder_sample;
    in->fields = folder_fields;
    struct stat st;
    int serr = stat(root, &st) ? errno : 0;
    if (serr || !S_ISDIR(st.st_mode)) {
        if (serr)
            kl_error("%s: cannot read the folder: %s", root, strerror(serr));
        else
            kl_error("%s: not a folder (--images takes an ImageFolder: ROOT/CLASS/IMAGE.png or .jpg)", root);
        pack_input_free(in);
        return -1;
    }
    /* ROOT/train (and ROOT/val, ROOT/test) when there is a train folder;
     * else ROOT itself is the one split, train. */
    static const char *splits[] = {"train", "val", "test"};
    char *train = kl_xasprintf("%s/train", root);
    bool split_tree = is_dir(train);
    free(train);
    if (split_tree) {
        /* Then ROOT holds splits only: a class folder beside them would be
         * ambiguous (a flat ImageFolder with a class named train?). */
        char **names;
        int n;
        if (list_dir(root, &names, &n)) {
            pack_input_free(in);
            return -1;
        }
        int bad = -1;
        for (int i = 0; i < n && bad < 0; i++)
            if (strcmp(names[i], "train") && strcmp(names[i], "val") && strcmp(names[i], "test"))
                bad = i;
        if (bad >= 0)
            kl_error("%s/%s: beside the split folder train (ROOT/train, ROOT/val and ROOT/test hold the "
                     "splits; nothing else may be there)", root, names[bad]);
        free_names(names, n);
        if (bad >= 0) {
            pack_input_free(in);
            return -1;
        }
    }
    for (int k = 0; k < (split_tree ? 3 : 1); k++) {
        char *dir = split_tree ? kl_xasprintf("%s/%s", root, splits[k]) : kl_xstrdup(root);
        if (k && !is_dir(dir)) {
            free(dir);
            continue;
        }
        int rc = folder_split(x, in->nsplits, dir, k == 0);
        free(dir);
        if (rc) {
            pack_input_free(in);
            return -1;
        }
        add_split(in, splits[k], x->files[in->nsplits].n, limit);
    }
    kl_buf_puts(&in->class_names, "[");
    for (int i = 0; i < x->classes.n; i++) {
        kl_buf_puts(&in->class_names, i ? ", " : "");
        pack_json_str(&in->class_names, x->classes.v[i]);
    }
    kl_buf_puts(&in->class_names, "]");
    in->num_classes = x->classes.n;
    return 0;
}

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
            put_cls(pack_sample_add(s, "cls"), npy_label(a, i));
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
        add_split(in, k ? "test" : "train", x->a[k][0].count, limit);
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
