/* Checkpoints: the session's persistent values (params, optimizer state,
 * running statistics) and the run's state in one file with a checksum.
 *
 *   "KILNCKPT" u32 version u32 count
 *   count x { u32 name_len, name, u32 dtype, u32 rank, i64 dims[rank],
 *             u64 bytes, data }
 *   u64 step, i64 clean_steps, i64 skipped, i64 skipped_in_row,
 *   f64 loss_scale                                            (version 2)
 *   u64 FNV-1a checksum of everything before it
 *
 * Version 1 ends with the step alone (no loss-scaler state); it still
 * loads, with the scale its last step used and the counters at 0. Little-endian. Written through outfile.h, so a crash or a full
 * disk mid-write leaves the previous checkpoint whole. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "outfile.h"

#define CKPT_VERSION 2u

typedef struct writer {
    kl_outfile o;
    uint64_t h;
} writer;

static void put(writer *w, const void *p, size_t n)
{
    kl_outfile_write(&w->o, p, n);
    w->h = kl_hash_bytes(w->h, p, n);
}

/* The index of the first non-finite element of n values, or -1. */
static int64_t first_nonfinite(ir_dtype dt, const void *p, int64_t n)
{
    if (!ir_dtype_is_float(dt))
        return -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(kl_load_as(dt, p, i)))
            return i;
    return -1;
}

int kl_checkpoint_save(kl_session *s, const char *path, const kl_run_state *rs)
{
    writer w = {.h = KL_HASH_INIT};
    if (kl_outfile_begin(&w.o, path))
        return -1;
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
        /* A diverged run's inf or nan would make every later resume
         * diverge too: such a checkpoint is never written. */
        int64_t bad = first_nonfinite(p->type.dtype, host, ir_type_numel(&p->type));
        if (bad >= 0) {
            kl_error("%s: not saved: element %lld of '%s' is %g; training diverged (try a lower --lr)", path,
                     (long long)bad, p->name, kl_load_as(p->type.dtype, host, bad));
            free(host);
            kl_outfile_abort(&w.o);
            return -1;
        }
        put(&w, host, bytes);
        free(host);
    }
    put(&w, &rs->step, 8);
    put(&w, &rs->clean_steps, 8);
    put(&w, &rs->skipped, 8);
    put(&w, &rs->skipped_in_row, 8);
    put(&w, &rs->loss_scale, 8);
    uint64_t sum = w.h;
    put(&w, &sum, 8);
    return kl_outfile_commit(&w.o, 0666);
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

/* Reads and checks the run state at the end of a checked file. */
static int read_run_state(const char *path, uint32_t version, const unsigned char *at, uint64_t max_step,
                          kl_run_state *rs)
{
    memset(rs, 0, sizeof *rs);
    rs->loss_scale = 1;
    memcpy(&rs->step, at, 8);
    if (version >= 2) {
        memcpy(&rs->clean_steps, at + 8, 8);
        memcpy(&rs->skipped, at + 16, 8);
        memcpy(&rs->skipped_in_row, at + 24, 8);
        memcpy(&rs->loss_scale, at + 32, 8);
    }
    if (rs->step > max_step) {
        kl_error("%s: the checkpoint is at step %llu, beyond this run's %llu steps (raise --steps or --epochs)", path,
                 (unsigned long long)rs->step, (unsigned long long)max_step);
        return -1;
    }
    if (rs->clean_steps < 0 || (uint64_t)rs->clean_steps > rs->step || rs->skipped < 0 ||
        (uint64_t)rs->skipped > rs->step || rs->skipped_in_row < 0 || rs->skipped_in_row > rs->skipped ||
        !isfinite(rs->loss_scale) || rs->loss_scale <= 0) {
        kl_error("%s: the loss-scaler state (%lld clean steps, %lld skipped, scale %g) does not fit step %llu", path,
                 (long long)rs->clean_steps, (long long)rs->skipped, rs->loss_scale, (unsigned long long)rs->step);
        return -1;
    }
    return 0;
}

int kl_checkpoint_load(kl_session *s, const char *path, uint64_t max_step, kl_run_state *rs)
{
    kl_source file;
    if (kl_source_read(&file, path))
        return -1;
    const unsigned char *data = (const unsigned char *)file.text;
    size_t size = file.len;
    int rc = -1;
    bool *seen = kl_xcalloc((size_t)s->persist.n + 1, sizeof *seen);
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
    if (get(&r, &version, 4) || version < 1 || version > CKPT_VERSION || get(&r, &count, 4)) {
        kl_error("%s: unsupported checkpoint version", path);
        goto done;
    }
    size_t trailer = version >= 2 ? 48 : 16;
    if (size < 16 + trailer) {
        kl_error("%s: not a kiln checkpoint", path);
        goto done;
    }
    r.end = data + size - trailer;
    if (read_run_state(path, version, r.end, max_step, rs))
        goto done;
    /* Check everything before changing anything. */
    const unsigned char *start = r.p;
    for (int pass = 0; pass < 2; pass++) {
        r.p = start;
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
            if (!ir_type_eq(&p->type, &t)) {
                char *a = ir_type_str(&t), *b = ir_type_str(&p->type);
                kl_error("%s: '%s' is %s in the checkpoint but %s in the model", path, name, a, b);
                free(a);
                free(b);
                goto done;
            }
            if (bytes != (uint64_t)ir_type_bytes(&t)) {
                char *a = ir_type_str(&t);
                kl_error("%s: '%s' (%s) has %llu bytes in the checkpoint; its type needs %lld", path, name, a,
                         (unsigned long long)bytes, (long long)ir_type_bytes(&t));
                free(a);
                goto done;
            }
            if (pass == 0) {
                size_t k = (size_t)(p - s->persist.v);
                if (seen[k]) {
                    kl_error("%s: '%s' is in the checkpoint twice", path, name);
                    goto done;
                }
                seen[k] = true;
            } else {
                s->be->ops->copy_in(s->be, p->ptr, r.p, bytes);
            }
            r.p += bytes;
        }
        if (pass == 0 && r.p != r.end) {
            kl_error("%s: malformed: %zu bytes after the last entry", path, (size_t)(r.end - r.p));
            goto done;
        }
        for (int i = 0; pass == 0 && i < s->persist.n; i++)
            if (!seen[i]) {
                kl_error("%s: '%s' of the model is missing from the checkpoint", path, s->persist.v[i].name);
                goto done;
            }
    }
    /* Version 1 kept the loss scale only as the value the last step used. */
    kl_persist *ls = version == 1 ? kl_session_find(s, "loss_scale") : NULL;
    if (ls && ls->type.dtype == IR_F32 && ir_type_numel(&ls->type) == 1) {
        float v;
        s->be->ops->copy_out(s->be, &v, ls->ptr, sizeof v);
        if (isfinite(v) && v > 0)
            rs->loss_scale = v;
    }
    rc = 0;
done:
    free(seen);
    kl_source_free(&file);
    return rc;
}
