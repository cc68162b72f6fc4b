/* Sample decoders: PNG (libpng's simplified API), JPEG (libjpeg-turbo),
 * integer class labels, NumPy arrays and raw bytes. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jpeglib.h>

#include "decode.h"
#include "base/support.h"

/* An image's sides are at most this: a sample, not a poster. */
#define MAX_SIDE 65536
#define MAX_PIXELS ((int64_t)1 << 28)

/* Both are -1 when the product overflows (a crafted header's dims). */
int64_t kl_field_numel(const kl_field_type *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n = kl_size_mul(n, t->shape[i]);
    return n;
}

int64_t kl_field_bytes(const kl_field_type *t)
{
    return kl_size_mul(kl_field_numel(t), ir_dtype_size(t->dtype));
}

bool kl_field_type_eq(const kl_field_type *a, const kl_field_type *b)
{
    if (a->dtype != b->dtype || a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

void kl_field_type_str(const kl_field_type *t, char *buf, size_t n)
{
    int k = snprintf(buf, n, "%s", ir_dtype_name(t->dtype));
    for (int i = 0; i < t->rank && k > 0 && (size_t)k < n; i++)
        k += snprintf(buf + k, n - (size_t)k, "%s%lld%s", i ? ", " : "[", (long long)t->shape[i], i == t->rank - 1 ? "]" : "");
}

/* HWC bytes to CHW in a new buffer (one channel: the same bytes). */
static uint8_t *to_chw(uint8_t *hwc, int64_t h, int64_t w, int c)
{
    if (c == 1)
        return hwc;
    uint8_t *chw = kl_xmalloc((size_t)(h * w * c));
    for (int64_t p = 0; p < h * w; p++)
        for (int k = 0; k < c; k++)
            chw[k * h * w + p] = hwc[p * c + k];
    free(hwc);
    return chw;
}

static int decode_png(const uint8_t *data, size_t size, kl_field_type *t, uint8_t **out, char *why, size_t n)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, data, size)) {
        snprintf(why, n, "not a valid PNG (%s)", img.message);
        png_image_free(&img);
        return -1;
    }
    if (img.width > MAX_SIDE || img.height > MAX_SIDE || (int64_t)img.width * img.height > MAX_PIXELS) {
        snprintf(why, n, "a PNG of %ux%u pixels, over the %d-pixel side a sample may have", img.width, img.height, MAX_SIDE);
        png_image_free(&img);
        return -1;
    }
    bool color = img.format & PNG_FORMAT_FLAG_COLOR, alpha = img.format & PNG_FORMAT_FLAG_ALPHA;
    img.format = color ? (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB) : (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY);
    int c = (int)PNG_IMAGE_SAMPLE_CHANNELS(img.format);
    uint8_t *hwc = kl_xmalloc(PNG_IMAGE_SIZE(img));
    if (!png_image_finish_read(&img, NULL, hwc, 0, NULL)) {
        snprintf(why, n, "corrupt PNG data (%s)", img.message);
        free(hwc);
        png_image_free(&img);
        return -1;
    }
    t->dtype = IR_U8;
    t->rank = 3;
    t->shape[0] = c;
    t->shape[1] = img.height;
    t->shape[2] = img.width;
    *out = to_chw(hwc, img.height, img.width, c);
    png_image_free(&img);
    return 0;
}

/* libjpeg reports errors through error_exit, which must not return. */
typedef struct jpeg_fail {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_fail;

static void jpeg_error_exit(j_common_ptr c)
{
    jpeg_fail *f = (jpeg_fail *)c->err;
    c->err->format_message(c, f->msg);
    longjmp(f->jump, 1);
}

static void jpeg_quiet(j_common_ptr c, int level)
{
    /* Warnings (corrupt data the library recovers from) are errors here:
     * a sample that decodes to something else is a wrong batch. */
    if (level < 0) {
        jpeg_fail *f = (jpeg_fail *)c->err;
        c->err->format_message(c, f->msg);
        longjmp(f->jump, 1);
    }
}

static int decode_jpeg(const uint8_t *data, size_t size, kl_field_type *t, uint8_t **out, char *why, size_t n)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_fail fail;
    /* volatile: set after setjmp, read after a longjmp. */
    uint8_t *volatile hwc = NULL;
    cinfo.err = jpeg_std_error(&fail.mgr);
    fail.mgr.error_exit = jpeg_error_exit;
    fail.mgr.emit_message = jpeg_quiet;
    if (setjmp(fail.jump)) {
        snprintf(why, n, "not a valid JPEG (%s)", fail.msg);
        free(hwc);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.num_components != 1 && cinfo.num_components != 3) {
        snprintf(why, n, "a JPEG with %d color components (only gray and RGB are read)", cinfo.num_components);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    cinfo.out_color_space = cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    if (cinfo.image_width > MAX_SIDE || cinfo.image_height > MAX_SIDE ||
        (int64_t)cinfo.image_width * cinfo.image_height > MAX_PIXELS) {
        snprintf(why, n, "a JPEG of %ux%u pixels, over the %d-pixel side a sample may have", cinfo.image_width,
                 cinfo.image_height, MAX_SIDE);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_start_decompress(&cinfo);
    int c = cinfo.output_components;
    int64_t h = cinfo.output_height, w = cinfo.output_width;
    hwc = kl_xmalloc((size_t)(h * w * c));
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = hwc + (int64_t)cinfo.output_scanline * w * c;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    t->dtype = IR_U8;
    t->rank = 3;
    t->shape[0] = c;
    t->shape[1] = h;
    t->shape[2] = w;
    *out = to_chw(hwc, h, w, c);
    return 0;
}

static int decode_cls(const uint8_t *data, size_t size, kl_field_type *t, uint8_t **out, char *why, size_t n)
{
    char text[32];
    size_t a = 0, b = size;
    while (a < b && isspace(data[a]))
        a++;
    while (b > a && isspace(data[b - 1]))
        b--;
    if (b - a == 0 || b - a >= sizeof text) {
        snprintf(why, n, "a class label is a decimal integer as text; this has %zu bytes", size);
        return -1;
    }
    memcpy(text, data + a, b - a);
    text[b - a] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (*end || errno) {
        snprintf(why, n, "'%s' is not an integer class label%s", text, errno ? " (out of the i64 range)" : "");
        return -1;
    }
    t->dtype = IR_I64;
    t->rank = 0;
    int64_t *p = kl_xmalloc(sizeof *p);
    *p = v;
    *out = (uint8_t *)p;
    return 0;
}

/* The value of 'key': in a .npy header dict; NULL when absent. */
static const char *npy_value(const char *head, const char *key)
{
    char pat[32];
    for (int q = 0; q < 2; q++) {
        snprintf(pat, sizeof pat, q ? "\"%s\"" : "'%s'", key);
        const char *p = strstr(head, pat);
        if (p) {
            p += strlen(pat);
            while (*p == ' ' || *p == ':')
                p++;
            return p;
        }
    }
    return NULL;
}

static int decode_npy(const uint8_t *data, size_t size, kl_field_type *t, uint8_t **out, char *why, size_t n)
{
    if (size < 10 || memcmp(data, "\x93NUMPY", 6)) {
        snprintf(why, n, "not a .npy array (no \\x93NUMPY magic)");
        return -1;
    }
    int major = data[6];
    size_t hlen, start;
    if (major == 1) {
        hlen = data[8] | (size_t)data[9] << 8;
        start = 10;
    } else if ((major == 2 || major == 3) && size >= 12) {
        hlen = data[8] | (size_t)data[9] << 8 | (size_t)data[10] << 16 | (size_t)data[11] << 24;
        start = 12;
    } else {
        snprintf(why, n, ".npy format version %d is not read (1, 2 and 3 are)", major);
        return -1;
    }
    if (hlen > size - start || hlen > 65536) {
        snprintf(why, n, "truncated .npy header (%zu bytes announced, %zu present)", hlen, size - start);
        return -1;
    }
    char *head = kl_xstrndup((const char *)data + start, hlen);
    const char *descr = npy_value(head, "descr"), *fortran = npy_value(head, "fortran_order"),
               *shape = npy_value(head, "shape");
    int rc = -1;
    if (!descr || !fortran || !shape) {
        snprintf(why, n, "the .npy header lacks descr, fortran_order or shape");
        goto done;
    }
    static const struct { const char *descr; ir_dtype dt; } dts[] = {
        {"'|u1'", IR_U8}, {"'<u1'", IR_U8}, {"'|b1'", IR_U8}, {"'<i4'", IR_I32}, {"'<i8'", IR_I64},
        {"'<f2'", IR_F16}, {"'<f4'", IR_F32}, {"'<f8'", IR_F64},
    };
    t->dtype = IR_NONE;
    for (size_t i = 0; i < KL_ARRAY_LEN(dts); i++)
        if (!strncmp(descr, dts[i].descr, strlen(dts[i].descr)))
            t->dtype = dts[i].dt;
    if (t->dtype == IR_NONE) {
        snprintf(why, n, ".npy dtype %.12s is not read (u1, i4, i8, f2, f4, f8, little-endian)", descr);
        goto done;
    }
    if (strncmp(fortran, "False", 5)) {
        snprintf(why, n, "a Fortran-order .npy array (save it in C order)");
        goto done;
    }
    if (*shape != '(') {
        snprintf(why, n, "the .npy shape is not a tuple");
        goto done;
    }
    t->rank = 0;
    const char *p = shape + 1;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 || d > IR_MAX_DIM || t->rank == KL_FIELD_MAX_RANK) {
            snprintf(why, n, "the .npy shape is not a tuple of at most %d sizes", KL_FIELD_MAX_RANK);
            goto done;
        }
        t->shape[t->rank++] = d;
        p = end;
    }
    int64_t numel = kl_field_numel(t), bytes = numel < 0 || numel > (int64_t)1 << 40 ? -1 : kl_field_bytes(t);
    if (bytes < 0) {
        snprintf(why, n, "the .npy shape has more than 2^40 elements");
        goto done;
    }
    if ((size_t)bytes != size - start - hlen) {
        snprintf(why, n, "the .npy data has %zu bytes, its header announces %lld", size - start - hlen, (long long)bytes);
        goto done;
    }
    *out = kl_xmalloc(bytes ? (size_t)bytes : 1);
    memcpy(*out, data + start + hlen, (size_t)bytes);
    rc = 0;
done:
    free(head);
    return rc;
}

int kl_decode(const char *field, const uint8_t *data, size_t size, kl_field_type *t, uint8_t **out, char *why, size_t n)
{
    memset(t, 0, sizeof *t);
    *out = NULL;
    const char *ext = strrchr(field, '.');
    ext = ext ? ext + 1 : field;
    if (!strcasecmp(ext, "png"))
        return decode_png(data, size, t, out, why, n);
    if (!strcasecmp(ext, "jpg") || !strcasecmp(ext, "jpeg"))
        return decode_jpeg(data, size, t, out, why, n);
    if (!strcmp(ext, "cls"))
        return decode_cls(data, size, t, out, why, n);
    if (!strcmp(ext, "npy"))
        return decode_npy(data, size, t, out, why, n);
    t->dtype = IR_U8;
    t->rank = 1;
    t->shape[0] = (int64_t)size;
    *out = kl_xmalloc(size ? size : 1);
    memcpy(*out, data, size);
    return 0;
}
