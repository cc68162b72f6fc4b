/* Checkpoints: the session's persistent values (params, optimizer state,
 * running statistics) in one file with a checksum.
 *
 *   "KILNCKPT" u32 version u32 count
 *   count x { u32 name_len, name, u32 dtype, u32 rank, i64 dims[rank],
 *             u64 bytes, data }
 *   u64 step, u64 FNV-1a checksum of everything before it
 *
 * Little-endian. Written to NAME.tmp and renamed, so a crash mid-write
 * leaves the previous checkpoint whole. */
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

#define CKPT_VERSION 1u

typedef struct writer {
    FILE *f;
    uint64_t h;
    bool ok;
} writer;

static void put(writer *w, const void *p, size_t n)
{
    if (w->ok && fwrite(p, 1, n, w->f) != n)
        w->ok = false;
    w->h = kl_hash_bytes(w->h, p, n);
}

int kl_checkpoint_save(kl_session *s, const char *path, uint64_t step)
{
    char *tmp = kl_xasprintf("%s.tmp", path);
    writer w = {fopen(tmp, "wb"), KL_HASH_INIT, true};
    if (!w.f) {
        kl_error("%s: cannot write the checkpoint", tmp);
        free(tmp);
        return -1;
    }
    put(&w, "KILNCKPT", 8);
    uint32_t v = CKPT_VERSION, count = (uint32_t)s->persist.n;
    put(&w, &v, 4);
    put(&w, &count, 4);
    for (int i = 0; i < s->persist.n; i++) {
        kl_persist *p = &s->persist.v[i];
        uint32_t len = (uint32_t)strlen(p->name), dt = p->type.dtype, rank = (uint32_t)p->type.rank;
        put(&w, &len, 4);
        put(&w, p->name, len);
        put(&w, &dt, 4);
        put(&w, &rank, 4);
        put(&w, p->type.dim, sizeof(int64_t) * rank);
        uint64_t bytes = (uint64_t)ir_type_bytes(&p->type);
        put(&w, &bytes, 8);
        void *host = kl_xmalloc(bytes ? bytes : 1);
        s->be->ops->copy_out(s->be, host, p->ptr, bytes);
        put(&w, host, bytes);
        free(host);
    }
    put(&w, &step, 8);
    uint64_t sum = w.h;
    put(&w, &sum, 8);
    bool ok = w.ok && fclose(w.f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        kl_error("%s: writing the checkpoint failed", path);
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

typedef struct reader {
    const unsigned char *p, *end;
} reader;

static int get(reader *r, void *dst, size_t n)
{
    if ((size_t)(r->end - r->p) < n)
        return -1;
    memcpy(dst, r->p, n);
    r->p += n;
    return 0;
}

int kl_checkpoint_load(kl_session *s, const char *path, uint64_t *step)
{
    kl_source file;
    if (kl_source_read(&file, path))
        return -1;
    const unsigned char *data = (const unsigned char *)file.text;
    size_t size = file.len;
    int rc = -1;
    reader r = {data, data + size};
    char magic[8];
    uint32_t version, count;
    if (size < 32 || get(&r, magic, 8) || memcmp(magic, "KILNCKPT", 8)) {
        kl_error("%s: not a kiln checkpoint", path);
        goto done;
    }
    uint64_t want;
    memcpy(&want, data + size - 8, 8);
    if (kl_hash_bytes(KL_HASH_INIT, data, size - 8) != want) {
        kl_error("%s: checksum mismatch: the checkpoint is truncated or corrupt", path);
        goto done;
    }
    r.end = data + size - 16;
    if (get(&r, &version, 4) || version != CKPT_VERSION || get(&r, &count, 4)) {
        kl_error("%s: unsupported checkpoint version", path);
        goto done;
    }
    /* Check everything before changing anything. */
    const unsigned char *start = r.p;
    for (int pass = 0; pass < 2; pass++) {
        r.p = start;
        int matched = 0;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t len, dt, rank;
            char name[512];
            int64_t dims[IR_MAX_RANK];
            uint64_t bytes;
            if (get(&r, &len, 4) || len >= sizeof name || get(&r, name, len)) {
                kl_error("%s: malformed entry %u", path, i);
                goto done;
            }
            name[len] = 0;
            if (get(&r, &dt, 4) || get(&r, &rank, 4) || rank > IR_MAX_RANK || dt >= IR_NDTYPES ||
                get(&r, dims, sizeof(int64_t) * rank) || get(&r, &bytes, 8) || (size_t)(r.end - r.p) < bytes) {
                kl_error("%s: malformed entry '%s'", path, name);
                goto done;
            }
            ir_type t = {(ir_dtype)dt, (int)rank, {0}};
            memcpy(t.dim, dims, sizeof(int64_t) * rank);
            kl_persist *p = kl_session_find(s, name);
            if (!p) {
                kl_error("%s: '%s' is not a value of this model", path, name);
                goto done;
            }
            if (!ir_type_eq(&p->type, &t) || bytes != (uint64_t)ir_type_bytes(&t)) {
                char *a = ir_type_str(&t), *b = ir_type_str(&p->type);
                kl_error("%s: '%s' is %s in the checkpoint but %s in the model", path, name, a, b);
                free(a);
                free(b);
                goto done;
            }
            if (pass == 1)
                s->be->ops->copy_in(s->be, p->ptr, r.p, bytes);
            r.p += bytes;
            matched++;
        }
        if (pass == 0 && matched != s->persist.n) {
            kl_error("%s: has %d of the model's %d values", path, matched, s->persist.n);
            goto done;
        }
    }
    memcpy(step, data + size - 16, 8);
    rc = 0;
done:
    kl_source_free(&file);
    return rc;
}
