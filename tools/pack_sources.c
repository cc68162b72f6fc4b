/* kiln pack's inputs IDX and ImageFolder (NumPy arrays: pack_npy.c):
 * each turns a data set into splits of samples, a sample being the
 * members WebDataset stores under one key. See pack.h. */
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
#include "runtime/data/data.h"

kl_buf *pack_sample_add(pack_sample *s, const char *ext)
{
    kl_check(s->n < PACK_MAX_MEMBERS);
    snprintf(s->ext[s->n], sizeof s->ext[0], "%s", ext);
    kl_buf *b = &s->data[s->n++];
    b->len = 0;
    return b;
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

void pack_add_split(pack_input *in, const char *name, int64_t count, int64_t limit)
{
    kl_check(in->nsplits < PACK_MAX_SPLITS);
    in->split_name[in->nsplits] = kl_xstrdup(name);
    in->split_count[in->nsplits++] = limit > 0 && count > limit ? limit : count;
}

void pack_put_cls(kl_buf *b, int64_t label)
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

/* ---- IDX (runtime/data/data.c reads it): images become PNG, labels .cls ---- */

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
    pack_put_cls(pack_sample_add(s, "cls"), d->labels[i]);
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
        pack_add_split(in, files[k][1], d->count, limit);
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

int pack_read_file(const char *path, kl_buf *b)
{
    char why[160];
    int fd = kl_open_regular(path, why, sizeof why);
    if (fd < 0) {
        kl_error("%s: %s", path, why);
        return -1;
    }
    /* The files are held whole: refused before reading when they would
     * pass the machine's memory (a sparse 1 TB text file). */
    struct stat st;
    if (!fstat(fd, &st) &&
        kl_check_alloc(path, st.st_size > INT64_MAX - (int64_t)b->len ? -1 : (int64_t)b->len + st.st_size, 0,
                       "pack less text at once (kiln pack reads it whole)")) {
        close(fd);
        return -1;
    }
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
    if (pack_read_file(f->path, b))
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
    pack_put_cls(pack_sample_add(s, "cls"), f->label);
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
        pack_add_split(in, splits[k], x->files[in->nsplits].n, limit);
    }
    kl_buf_puts(&in->class_names, "[");
    for (int i = 0; i < x->classes.n; i++) {
        kl_buf_puts(&in->class_names, i ? ", " : "");
        kl_buf_put_json_str(&in->class_names, x->classes.v[i]);
    }
    kl_buf_puts(&in->class_names, "]");
    in->num_classes = x->classes.n;
    return 0;
}
