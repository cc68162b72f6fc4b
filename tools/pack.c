/* kiln pack: a data set into WebDataset tar shards plus a manifest, or
 * text or token ids into token files. The inputs are pack_sources.c's; this file
 * writes. Everything lands in a staging folder beside the output folder,
 * which replaces the output folder in one rename when every file is
 * written: a reader sees the old pack or the new one, never a mixture. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "pack.h"
#include "pack_libs.h"
#include "base/scalar.h"
#include "ir/train_config.h"
#include "runtime/files/outfile.h"
#include "runtime/data/tokens.h"

static const char pack_usage[] =
    "usage: kiln pack INPUT -o DIR [--shard-size SIZE | --samples-per-shard N]\n"
    "                 [--limit N] [--shuffle SEED]\n"
    "\n"
    "Converts a data set into POSIX tar shards in the WebDataset layout\n"
    "(DIR/SPLIT-000000.tar ..., each sample the members KEY.EXT sharing a key)\n"
    "with DIR/manifest.json (samples per split and shard, fields, dtypes,\n"
    "shapes, class names); or text or token ids into token files\n"
    "(DIR/train.tok, DIR/val.tok). Identical inputs give byte-identical output. DIR is\n"
    "replaced whole when everything is written; an existing DIR must be\n"
    "empty or an earlier kiln pack output.\n"
    "\n"
    "INPUT, one of:\n"
    "  --idx DIR          an IDX data set (train-images-idx3-ubyte[.gz] ...;\n"
    "                     t10k-* becomes the test split): images as .png,\n"
    "                     labels as .cls\n"
    "  --images ROOT      an ImageFolder: ROOT/CLASS/IMAGE.{png,jpg,jpeg}, or\n"
    "                     ROOT/{train,val,test}/CLASS/IMAGE; files stored as\n"
    "                     they are, labels (.cls) by sorted class name\n"
    "  --npy [NAME=]FILE  a NumPy array whose first axis is the samples, each\n"
    "                     stored as KEY.NAME.npy (KEY.npy without NAME); NAME\n"
    "                     cls takes a 1-D integer array of labels (.cls).\n"
    "                     Repeat for more fields; --test-npy for the test split\n"
    "  --text PATH        text (a file, or a folder read recursively in sorted\n"
    "                     order) as byte-level tokens (u8, vocabulary 256);\n"
    "                     repeatable; --text-ext .py keeps only such files\n"
    "  --token-ids FILE   a 1-D integer .npy of token ids (a tokenizer's output,\n"
    "                     e.g. GPT-2 BPE) as u16 tokens (u8 for a vocabulary\n"
    "                     up to 256, u32 past 65,536); --vocab N gives the\n"
    "                     vocabulary (default: the largest id + 1)\n"
    "\n"
    "  -o DIR                 the output folder\n"
    "  --shard-size SIZE      start a new shard before one would pass SIZE\n"
    "                         (64MiB, 1GB, bytes; default 64MiB); a sample\n"
    "                         larger than SIZE gets a shard of its own\n"
    "  --samples-per-shard N  at most N samples per shard (with --shard-size:\n"
    "                         whichever comes first)\n"
    "  --limit N              the first N samples of each split only\n"
    "  --shuffle SEED         store each split's samples in an order shuffled by\n"
    "                         SEED (keys stay the input positions)\n"
    "  --val-fraction F       --text, --token-ids: the last F of the tokens are the\n"
    "                         validation split (default 0.1; 0: none)\n";

typedef struct pack_opts {
    const char *out, *idx, *images, *text_ext, *token_ids;
    int64_t vocab;
    KL_VEC(char *) npy;
    KL_VEC(char *) test_npy;
    KL_VEC(char *) text;
    int64_t shard_bytes, shard_samples, limit;
    bool shuffle;
    uint64_t seed;
    double val_fraction;
} pack_opts;

/* ---- the staging folder and the swap ---- */

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return !slash ? kl_xstrdup(".") : slash == path ? kl_xstrdup("/") : kl_xstrndup(path, (size_t)(slash - path));
}

static bool pack_file_name(const char *name)
{
    size_t n = strlen(name);
    return !strcmp(name, "manifest.json") || (n > 4 && (!strcmp(name + n - 4, ".tar") || !strcmp(name + n - 4, ".tok")));
}

/* 0 when out can be replaced: it does not exist, or it is a folder that
 * holds only what kiln pack writes (and a manifest.json when anything). */
static int check_out(const char *out)
{
    struct stat st;
    if (lstat(out, &st)) {
        if (errno == ENOENT)
            return 0;
        kl_error("%s: %s", out, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        kl_error("%s: exists and is not a folder; kiln pack -o names the folder it writes", out);
        return -1;
    }
    DIR *d = opendir(out);
    if (!d) {
        kl_error("%s: %s", out, strerror(errno));
        return -1;
    }
    struct dirent *e;
    int rc = 0, n = 0;
    bool manifest = false;
    while ((e = readdir(d)) && !rc) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        n++;
        manifest |= !strcmp(e->d_name, "manifest.json");
        if (!pack_file_name(e->d_name)) {
            kl_error("%s: holds %s, which kiln pack did not write; refusing to replace the folder (choose another -o)",
                     out, e->d_name);
            rc = -1;
        }
    }
    closedir(d);
    if (!rc && n && !manifest) {
        kl_error("%s: is not empty and has no manifest.json (not a kiln pack output); refusing to replace it", out);
        rc = -1;
    }
    return rc;
}

/* Removes the files kiln pack writes from dir, then dir. */
static void remove_pack_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (pack_file_name(e->d_name) || (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))) {
            char *p = kl_xasprintf("%s/%s", dir, e->d_name);
            unlink(p);
            free(p);
        }
    closedir(d);
    if (rmdir(dir))
        kl_fprintf_escaped(stderr, "kiln pack: warning: could not remove %s: %s\n", dir, strerror(errno));
}

/* Puts the finished staging folder in out's place. */
static int swap_in(const char *staging, const char *out)
{
    if (rename(staging, out) == 0)
        return 0;
    if (errno != ENOTEMPTY && errno != EEXIST) {
        kl_error("%s: cannot rename %s to it: %s", out, staging, strerror(errno));
        return -1;
    }
    /* An earlier pack: exchanged in one step, then removed. */
    if (renameat2(AT_FDCWD, staging, AT_FDCWD, out, RENAME_EXCHANGE)) {
        kl_error("%s: cannot replace it with %s: %s", out, staging, strerror(errno));
        return -1;
    }
    remove_pack_dir(staging);
    int fd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    return 0;
}

/* ---- shards ---- */

typedef struct shard_writer {
    const char *dir, *split;
    int64_t max_bytes, max_samples;
    struct archive *a;
    kl_outfile o;
    char *path;
    int index;
    int64_t bytes, samples; /* of the open shard; bytes as the tar will hold them */
    int64_t total_bytes;
    kl_buf json;            /* the split's "files" list */
} shard_writer;

#define TAR_BLOCK 512
#define TAR_RECORD 10240 /* libarchive pads the archive to whole records */

static int64_t tar_member_bytes(size_t n)
{
    return TAR_BLOCK + ((int64_t)n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
}

/* The archive's size with `bytes` of members: two zero blocks end it, and
 * it is padded to a whole record. */
static int64_t tar_size(int64_t bytes)
{
    return (bytes + 2 * TAR_BLOCK + TAR_RECORD - 1) / TAR_RECORD * TAR_RECORD;
}

static la_ssize_t tar_write(struct archive *a, void *client, const void *buf, size_t n)
{
    (void)a;
    kl_outfile_write(client, buf, n);
    return (la_ssize_t)n;
}

static int shard_close(shard_writer *w)
{
    if (!w->a)
        return 0;
    int rc = 0;
    if (archive_write_close(w->a) != ARCHIVE_OK) {
        kl_error("%s: %s", w->path, archive_error_string(w->a));
        rc = -1;
    }
    archive_write_free(w->a);
    w->a = NULL;
    if (rc)
        kl_outfile_abort(&w->o);
    else
        rc = kl_outfile_commit(&w->o, 0666);
    const char *name = strrchr(w->path, '/') + 1;
    kl_buf_printf(&w->json, "%s\n        {\"name\": \"%s\", \"samples\": %lld, \"bytes\": %lld}", w->index ? "," : "",
                  name, (long long)w->samples, (long long)tar_size(w->bytes));
    w->total_bytes += tar_size(w->bytes);
    free(w->path);
    w->path = NULL;
    w->index++;
    return rc;
}

static int shard_open(shard_writer *w)
{
    w->path = kl_xasprintf("%s/%s-%06d.tar", w->dir, w->split, w->index);
    w->bytes = w->samples = 0;
    if (kl_outfile_begin(&w->o, w->path))
        return -1;
    w->a = archive_write_new();
    /* POSIX tar: ustar headers, pax extensions only where ustar cannot say
     * something (never for kiln pack's short names and small members). */
    if (archive_write_set_format_pax_restricted(w->a) != ARCHIVE_OK ||
        archive_write_set_bytes_per_block(w->a, TAR_RECORD) != ARCHIVE_OK ||
        archive_write_open2(w->a, &w->o, NULL, tar_write, NULL, NULL) != ARCHIVE_OK) {
        kl_error("%s: %s", w->path, archive_error_string(w->a));
        archive_write_free(w->a);
        w->a = NULL;
        kl_outfile_abort(&w->o);
        return -1;
    }
    return 0;
}

/* Adds a sample under key, starting a new shard first when this one is
 * full. Members carry no time, owner or user names: the same sample gives
 * the same bytes. */
static int shard_add(shard_writer *w, const char *key, const pack_sample *s)
{
    int64_t need = 0;
    for (int m = 0; m < s->n; m++)
        need += tar_member_bytes(s->data[m].len);
    bool full = w->a && ((w->max_samples && w->samples == w->max_samples) ||
                         (w->max_bytes && tar_size(w->bytes + need) > w->max_bytes));
    if (full && shard_close(w))
        return -1;
    if (!w->a && shard_open(w))
        return -1;
    struct archive_entry *e = archive_entry_new();
    for (int m = 0; m < s->n; m++) {
        char name[128];
        snprintf(name, sizeof name, "%s.%s", key, s->ext[m]);
        archive_entry_clear(e);
        archive_entry_set_pathname(e, name);
        archive_entry_set_size(e, (la_int64_t)s->data[m].len);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0444);
        archive_entry_set_mtime(e, 0, 0);
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        if (archive_write_header(w->a, e) != ARCHIVE_OK ||
            (s->data[m].len && archive_write_data(w->a, s->data[m].s, s->data[m].len) != (la_ssize_t)s->data[m].len)) {
            kl_error("%s: writing %s: %s", w->path, name, archive_error_string(w->a));
            archive_entry_free(e);
            return -1;
        }
    }
    archive_entry_free(e);
    w->bytes += need;
    w->samples++;
    return 0;
}

/* The order samples are stored in: 0..n-1, or a Fisher-Yates shuffle
 * drawn from the seed alone. */
static int64_t *sample_order(int64_t n, bool shuffle, uint64_t seed)
{
    int64_t *o = kl_xmalloc(sizeof *o * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        o[i] = i;
    for (int64_t i = n - 1; shuffle && i > 0; i--) {
        uint64_t r = kl_mix(kl_mix(seed) ^ (uint64_t)i);
        int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
        int64_t t = o[i];
        o[i] = o[j];
        o[j] = t;
    }
    return o;
}

/* Before anything is written: every split's sample order must fit in
 * memory, and the shards in the output's file system, where each sample
 * takes at least one 512-byte tar header. A size from a file (an .npy
 * header's first axis, say) is refused here with its numbers, never met
 * as an allocation that fails or a write that runs for days. */
static int check_room(const pack_input *in, const char *out, const char *parent)
{
    struct statvfs fs;
    int64_t room = statvfs(parent, &fs) == 0 ? kl_size_mul((int64_t)fs.f_bavail, (int64_t)fs.f_frsize) : -1;
    int64_t need = 0;
    for (int k = 0; k < in->nsplits; k++) {
        int64_t n = in->split_count[k];
        char what[320];
        snprintf(what, sizeof what, "kiln pack: %.200s: the order of split %s (%lld samples)", in->source,
                 in->split_name[k], (long long)n);
        if (kl_check_alloc(what, kl_size_mul(n, (int64_t)sizeof(int64_t)), 0,
                           "pack fewer samples (--limit N), or check the input's first axis"))
            return -1;
        int64_t bytes = kl_size_mul(n, 512);
        need = bytes < 0 || need > INT64_MAX - bytes ? -1 : need + bytes;
        if (need < 0)
            break;
    }
    if (room >= 0 && (need < 0 || need > room)) {
        char a[32], b[32];
        kl_format_bytes(a, sizeof a, need < 0 ? INT64_MAX : need);
        kl_format_bytes(b, sizeof b, room);
        kl_error("kiln pack: %s: the shards of %s need at least %s (a 512-byte tar header per sample), more than "
                 "the %s free there\n---> pack fewer samples (--limit N), or write to a larger file system",
                 out, in->source, a, b);
        return -1;
    }
    return 0;
}

static int pack_split(const pack_opts *opt, pack_input *in, int k, const char *staging, kl_buf *manifest)
{
    shard_writer w = {.dir = staging, .split = in->split_name[k], .max_bytes = opt->shard_bytes,
                      .max_samples = opt->shard_samples};
    int64_t n = in->split_count[k];
    int width = 6;
    for (int64_t c = 1000000; c <= n - 1 && width < 18; c *= 10)
        width++;
    int64_t *order = sample_order(n, opt->shuffle, opt->seed);
    pack_sample s = {0};
    int rc = 0;
    for (int64_t i = 0; i < n && !rc; i++) {
        char key[32];
        snprintf(key, sizeof key, "%0*lld", width, (long long)order[i]);
        rc = in->sample(in, k, order[i], &s) || shard_add(&w, key, &s);
    }
    if (!rc && !w.a && shard_open(&w)) /* an empty split still gets its (empty) shard */
        rc = -1;
    if (rc) {
        if (w.a) {
            archive_write_free(w.a);
            kl_outfile_abort(&w.o);
        }
        free(w.path);
    } else {
        rc = shard_close(&w);
    }
    for (int m = 0; m < PACK_MAX_MEMBERS; m++)
        kl_buf_free(&s.data[m]);
    free(order);
    if (!rc) {
        char size[32];
        kl_format_bytes(size, sizeof size, w.total_bytes);
        char pattern[96];
        if (w.index == 1)
            snprintf(pattern, sizeof pattern, "%s-000000.tar", w.split);
        else
            snprintf(pattern, sizeof pattern, "%s-{000000..%06d}.tar", w.split, w.index - 1);
        kl_fprintf_escaped(stdout, "kiln pack: %s: %lld samples in %d shard%s (%s, %s)\n", w.split, (long long)n,
                           w.index, w.index == 1 ? "" : "s", pattern, size);
        kl_buf_printf(manifest, "%s\n    \"%s\": {\n      \"samples\": %lld,\n      \"shards\": \"%s\",\n      \"files\": [%s\n      ]\n    }",
                      k ? "," : "", w.split, (long long)n, pattern, w.json.s ? w.json.s : "");
    }
    kl_buf_free(&w.json);
    return rc;
}

static int pack_shards(const pack_opts *opt, pack_input *in, const char *staging)
{
    kl_buf m = {0};
    kl_buf_puts(&m, "{\n  \"format\": \"kiln-pack 1\",\n  \"layout\": \"webdataset\",\n  \"input\": ");
    kl_buf_put_json_str(&m, in->kind);
    kl_buf_puts(&m, ",\n  \"source\": ");
    kl_buf_put_json_str(&m, in->source);
    kl_buf_puts(&m, ",\n  \"splits\": {");
    int rc = 0;
    for (int k = 0; k < in->nsplits && !rc; k++)
        rc = pack_split(opt, in, k, staging, &m);
    if (!rc) {
        kl_buf_puts(&m, "\n  },\n  \"fields\": ");
        in->fields(in, &m);
        if (in->num_classes >= 0)
            kl_buf_printf(&m, ",\n  \"num_classes\": %lld", (long long)in->num_classes);
        if (in->class_names.len)
            kl_buf_printf(&m, ",\n  \"class_names\": %s", in->class_names.s);
        if (opt->shuffle)
            kl_buf_printf(&m, ",\n  \"shuffle_seed\": %llu", (unsigned long long)opt->seed);
        kl_buf_puts(&m, "\n}\n");
        char *path = kl_xasprintf("%s/manifest.json", staging);
        rc = kl_outfile_write_whole(path, m.s, m.len);
        free(path);
    }
    kl_buf_free(&m);
    return rc;
}

/* ---- text to byte-level token files ---- */

static bool has_ext(const char *name, const char *ext)
{
    size_t n = strlen(name), e = strlen(ext);
    return !*ext || (n > e && !strcmp(name + n - e, ext));
}

/* Appends the file at path, or every file under it (sorted by name,
 * hidden ones left out) that ends with ext. */
static int read_text(const char *path, const char *ext, bool top, kl_buf *text, int64_t *files)
{
    struct stat st;
    if (stat(path, &st)) {
        kl_error("%s: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        struct dirent **names;
        int n = scandir(path, &names, NULL, alphasort);
        if (n < 0) {
            kl_error("%s: cannot read the folder: %s", path, strerror(errno));
            return -1;
        }
        int rc = 0;
        for (int i = 0; i < n; i++) {
            if (!rc && names[i]->d_name[0] != '.') {
                char *p = kl_xasprintf("%s/%s", path, names[i]->d_name);
                rc = read_text(p, ext, false, text, files);
                free(p);
            }
            free(names[i]);
        }
        free(names);
        return rc;
    }
    if (!top && (!S_ISREG(st.st_mode) || !has_ext(path, ext)))
        return 0;
    if (pack_read_file(path, text))
        return -1;
    (*files)++;
    return 0;
}

/* Writes the token files (train, and val unless --val-fraction is 0) and
 * the manifest: n tokens of dtype_bytes each at data; input, source,
 * files and tokenizer describe them in the manifest. */
static int write_token_files(const pack_opts *opt, const char *staging, const char *input, const char *source,
                             int64_t files, const char *tokenizer, int dtype_bytes, uint64_t vocab, const void *data,
                             int64_t n)
{
    kl_buf m = {0};
    int rc = 0;
    int64_t nval = (int64_t)((double)n * opt->val_fraction), ntrain = n - nval;
    if (opt->val_fraction > 0 && (nval < 2 || ntrain < 2)) {
        kl_error("%s: %lld tokens cannot be split with --val-fraction %g (each split needs at least 2)", source,
                 (long long)n, opt->val_fraction);
        return -1;
    }
    kl_buf_printf(&m, "{\n  \"format\": \"kiln-pack 1\",\n  \"layout\": \"tokens\",\n  \"input\": \"%s\",\n  \"source\": ",
                  input);
    kl_buf_put_json_str(&m, source);
    if (files >= 0)
        kl_buf_printf(&m, ",\n  \"files\": %lld", (long long)files);
    kl_buf_printf(&m, ",\n  \"tokenizer\": \"%s\",\n  \"dtype\": \"u%d\",\n  \"vocab\": %llu,\n  \"splits\": {",
                  tokenizer, 8 * dtype_bytes, (unsigned long long)vocab);
    static const char *names[2] = {"train", "val"};
    for (int k = 0; k < (nval ? 2 : 1) && !rc; k++) {
        char *path = kl_xasprintf("%s/%s.tok", staging, names[k]);
        int64_t count = k ? nval : ntrain;
        rc = kl_tokens_write(path, dtype_bytes, vocab, (const char *)data + (k ? ntrain * dtype_bytes : 0), count);
        free(path);
        kl_buf_printf(&m, "%s\n    \"%s\": {\"file\": \"%s.tok\", \"tokens\": %lld}", k ? "," : "", names[k], names[k],
                      (long long)count);
        kl_fprintf_escaped(stdout, "kiln pack: %s: %lld tokens (%s.tok)\n", names[k], (long long)count, names[k]);
    }
    kl_buf_puts(&m, "\n  }\n}\n");
    if (!rc) {
        char *path = kl_xasprintf("%s/manifest.json", staging);
        rc = kl_outfile_write_whole(path, m.s, m.len);
        free(path);
    }
    kl_buf_free(&m);
    return rc;
}

static int pack_text(const pack_opts *opt, const char *staging)
{
    kl_buf text = {0};
    int64_t files = 0;
    int rc = 0;
    for (int i = 0; i < opt->text.n && !rc; i++)
        rc = read_text(opt->text.v[i], opt->text_ext ? opt->text_ext : "", true, &text, &files);
    if (!rc && !text.len) {
        kl_error("%s: no text to pack%s", opt->text.v[0], opt->text_ext ? " (no file with the --text-ext ending)" : "");
        rc = -1;
    }
    if (!rc) {
        kl_buf src = {0};
        for (int i = 0; i < opt->text.n; i++)
            kl_buf_printf(&src, "%s%s", i ? " " : "", opt->text.v[i]);
        rc = write_token_files(opt, staging, "text", src.s, files, "bytes", 1, 256, text.s, (int64_t)text.len);
        kl_buf_free(&src);
    }
    kl_buf_free(&text);
    return rc;
}

/* ---- token ids (a tokenizer's output) to token files ---- */

static int pack_token_ids(const pack_opts *opt, const char *staging)
{
    uint32_t *ids, max_id;
    int64_t n;
    if (pack_read_token_ids(opt->token_ids, &ids, &n, &max_id))
        return -1;
    uint64_t vocab = opt->vocab ? (uint64_t)opt->vocab : (uint64_t)max_id + 1;
    int rc = 0;
    if (max_id >= vocab) {
        kl_error("%s: token id %u is not below --vocab %llu", opt->token_ids, max_id, (unsigned long long)vocab);
        rc = -1;
    }
    /* the narrowest of u8, u16, u32 that holds every id below vocab */
    int bytes = vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4;
    void *data = kl_xmalloc((size_t)n * (size_t)bytes);
    for (int64_t i = 0; i < n && !rc; i++) {
        if (bytes == 1)
            ((uint8_t *)data)[i] = (uint8_t)ids[i];
        else if (bytes == 2)
            ((uint16_t *)data)[i] = (uint16_t)ids[i];
        else
            ((uint32_t *)data)[i] = ids[i];
    }
    if (!rc)
        rc = write_token_files(opt, staging, "token-ids", opt->token_ids, -1, "given", bytes, vocab, data, n);
    free(data);
    free(ids);
    return rc;
}

/* ---- the command ---- */

static int parse_count(const char *flag, const char *s, int64_t min, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    /* Digits only (strtoll would take leading spaces and a sign). */
    if (end == s || *end || errno || v < min || !(*s >= '0' && *s <= '9')) {
        kl_error("kiln pack: %s needs a whole number of at least %lld, got '%s'", flag, (long long)min, s);
        return -1;
    }
    *out = v;
    return 0;
}

int kl_pack_main(int argc, char **argv)
{
    pack_opts opt = {.shard_bytes = 64 << 20, .val_fraction = 0.1};
    bool shard_size_given = false;
    char *out_path = NULL;
    int rc = 1;
    int64_t v;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(pack_usage, stdout);
            rc = 0;
            goto done;
        } else if (!strcmp(a, "-o") && has) {
            opt.out = argv[++i];
        } else if (!strcmp(a, "--idx") && has) {
            opt.idx = argv[++i];
        } else if (!strcmp(a, "--images") && has) {
            opt.images = argv[++i];
        } else if (!strcmp(a, "--npy") && has) {
            kl_vec_push(opt.npy, argv[++i]);
        } else if (!strcmp(a, "--test-npy") && has) {
            kl_vec_push(opt.test_npy, argv[++i]);
        } else if (!strcmp(a, "--text") && has) {
            kl_vec_push(opt.text, argv[++i]);
        } else if (!strcmp(a, "--text-ext") && has) {
            opt.text_ext = argv[++i];
        } else if (!strcmp(a, "--token-ids") && has) {
            opt.token_ids = argv[++i];
        } else if (!strcmp(a, "--vocab") && has) {
            if (parse_count(a, argv[++i], 1, &opt.vocab))
                goto done;
            if (opt.vocab > (int64_t)UINT32_MAX + 1) {
                kl_error("kiln pack: --vocab %s: token files hold u32 ids at most (a vocabulary up to 4294967296)",
                         argv[i]);
                goto done;
            }
        } else if (!strcmp(a, "--shard-size") && has) {
            opt.shard_bytes = kl_parse_bytes(argv[++i]);
            shard_size_given = true;
            if (opt.shard_bytes < TAR_RECORD) {
                kl_error("kiln pack: --shard-size needs a size of at least %d bytes (e.g. 64MiB, 1GB), got '%s'",
                         TAR_RECORD, argv[i]);
                goto done;
            }
        } else if (!strcmp(a, "--samples-per-shard") && has) {
            if (parse_count(a, argv[++i], 1, &opt.shard_samples))
                goto done;
        } else if (!strcmp(a, "--limit") && has) {
            if (parse_count(a, argv[++i], 1, &opt.limit))
                goto done;
        } else if (!strcmp(a, "--shuffle") && has) {
            if (parse_count(a, argv[++i], 0, &v))
                goto done;
            opt.shuffle = true;
            opt.seed = (uint64_t)v;
        } else if (!strcmp(a, "--val-fraction") && has) {
            char *end;
            opt.val_fraction = strtod(argv[++i], &end);
            if (end == argv[i] || *end || !(opt.val_fraction >= 0 && opt.val_fraction < 1)) {
                kl_error("kiln pack: --val-fraction needs a number from 0 up to (not including) 1, got '%s'", argv[i]);
                goto done;
            }
        } else {
            kl_error("kiln pack: unknown option or missing value: %s (see kiln pack --help)", a);
            goto done;
        }
    }
    int inputs = !!opt.idx + !!opt.images + !!opt.npy.n + !!opt.text.n + !!opt.token_ids;
    if (inputs != 1 || !opt.out) {
        kl_error("kiln pack: needs one input (--idx, --images, --npy, --text or --token-ids) and -o DIR (see kiln pack "
                 "--help)");
        goto done;
    }
    /* text and token ids become token files, everything else shards */
    bool tokens = opt.text.n || opt.token_ids;
    if (opt.test_npy.n && !opt.npy.n) {
        kl_error("kiln pack: --test-npy needs --npy for the train split");
        goto done;
    }
    if (tokens && (opt.limit || opt.shuffle || shard_size_given || opt.shard_samples)) {
        kl_error("kiln pack: %s writes token files: --limit, --shuffle, --shard-size and --samples-per-shard do not apply",
                 opt.text.n ? "--text" : "--token-ids");
        goto done;
    }
    if (!opt.text.n && opt.text_ext) {
        kl_error("kiln pack: --text-ext applies to --text only");
        goto done;
    }
    if (!tokens && opt.val_fraction != 0.1) {
        kl_error("kiln pack: --val-fraction applies to --text and --token-ids only");
        goto done;
    }
    if (!opt.token_ids && opt.vocab) {
        kl_error("kiln pack: --vocab applies to --token-ids only");
        goto done;
    }
    if (!shard_size_given && opt.shard_samples)
        opt.shard_bytes = 0;
    /* "data/fm/" is "data/fm": the staging folder goes beside it, not in it. */
    out_path = kl_xstrdup(opt.out);
    for (size_t n = strlen(out_path); n > 1 && out_path[n - 1] == '/'; n--)
        out_path[n - 1] = 0;
    opt.out = out_path;
    const char *last = strrchr(opt.out, '/') ? strrchr(opt.out, '/') + 1 : opt.out;
    if (!strcmp(last, ".") || !strcmp(last, "..") || !*last) {
        kl_error("kiln pack: -o %s: name the output folder itself (not ., .. or /)", opt.out);
        goto done;
    }
    if (check_out(opt.out) || (!tokens && pack_libs_load()))
        goto done;

    pack_input in = {0};
    if (!tokens) {
        int orc = opt.idx      ? pack_open_idx(opt.idx, opt.limit, &in)
                  : opt.images ? pack_open_imagefolder(opt.images, opt.limit, &in)
                               : pack_open_npy(opt.npy.v, opt.npy.n, opt.test_npy.v, opt.test_npy.n, opt.limit, &in);
        if (orc)
            goto done;
    }
    /* The staging folder beside the output, so the final rename stays on
     * one file system. */
    char *parent = dir_of(opt.out);
    if (!tokens && check_room(&in, opt.out, parent)) {
        free(parent);
        pack_input_free(&in);
        goto done;
    }
    const char *base = strrchr(opt.out, '/') ? strrchr(opt.out, '/') + 1 : opt.out;
    char *staging = kl_xasprintf("%s/.%.200s.kiln-pack-XXXXXX", parent, base);
    free(parent);
    if (!mkdtemp(staging)) {
        kl_error("%s: cannot make a folder beside it: %s", opt.out, strerror(errno));
        free(staging);
        if (!tokens)
            pack_input_free(&in);
        goto done;
    }
    /* mkdtemp makes it 0700; the output folder gets a folder's usual mode. */
    mode_t mask = umask(0);
    umask(mask);
    chmod(staging, 0777 & ~mask);
    int prc = opt.text.n     ? pack_text(&opt, staging)
              : opt.token_ids ? pack_token_ids(&opt, staging)
                              : pack_shards(&opt, &in, staging);
    if (!tokens)
        pack_input_free(&in);
    if (prc || swap_in(staging, opt.out)) {
        remove_pack_dir(staging);
    } else {
        kl_fprintf_escaped(stdout, "kiln pack: wrote %s\n", opt.out);
        rc = 0;
    }
    free(staging);
done:
    free(out_path);
    kl_vec_free(opt.npy);
    kl_vec_free(opt.test_npy);
    kl_vec_free(opt.text);
    return rc;
}
