/* Checkpoints: the session's persistent values (params, optimizer state,
 * running statistics) and the run's state in one file with a checksum.
 * Little-endian; str is { u32 len, len bytes }.
 *
 *   "KILNCKPT" u32 version u32 count
 *   str model, str precision, str kiln version                 (version 3)
 *   str config (the run's --config settings, "" without)        (version 5)
 *   count x { str name, str role (version 3), u32 dtype, u32 rank,
 *             i64 dims[rank], u64 bytes, data }
 *   u64 step, i64 clean_steps, i64 skipped, i64 skipped_in_row,
 *   f64 loss_scale                                   (version 2 and later)
 *   u64 schedule_steps                               (version 4)
 *   f64 best, i64 best_epoch, f64 watch_best, i64 watch_epoch,
 *   i64 watch_step, i64 watch_bad, i64 evals, u64 watch_name  (version 6)
 *   u64 FNV-1a checksum of everything before it
 *
 * Version 1 ends with the step alone (no loss-scaler state); it still
 * loads, with the scale its last step used and the counters at 0.
 * Versions 1 and 2 record no roles and no model: they load and print, but
 * `kiln export` needs version 3 to know which values are params. Version
 * 4 records the span of the run's lr schedule (the step its schedule
 * ends at), so that a resumed run can tell whether it stretches it;
 * earlier versions load with 0 (not recorded). Version 5 records the
 * settings of the run's --config file, so that a run reproduces from its
 * checkpoint (`kiln ckpt` prints them). Version 6 records the
 * evaluations' best and early stopping's count, so that a resumed run
 * stops, and keeps its best, as the uninterrupted run does. Written
 * through outfile.h, so a crash or a full disk mid-write leaves the
 * previous checkpoint whole.
 *
 * A checkpoint of one precision resumes in another: the fp32 params and
 * optimizer state carry over, and a param's low-precision copy (NAME.lowp,
 * passes/precision.c) is rebuilt from NAME when the checkpoint has none of
 * the model's dtype. */
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "runtime/files/outfile.h"

#define CKPT_VERSION 6u
/* The longest name, role or header string a checkpoint may hold; the
 * run's --config settings may be longer. */
#define CKPT_MAX_STR 4096u
#define CKPT_MAX_CONFIG 65536u

typedef struct writer {
    kl_outfile o;
    uint64_t h;
} writer;

static void put(writer *w, const void *p, size_t n)
{
    kl_outfile_write(&w->o, p, n);
    w->h = kl_hash_bytes(w->h, p, n);
}

static void put_str(writer *w, const char *s)
{
    uint32_t len = (uint32_t)strlen(s);
    put(w, &len, 4);
    put(w, s, len);
}

/* A test hook: KILN_TEST_KILL_IN_SAVE=STEP kills the process (SIGKILL)
 * half way through writing the checkpoint of that step, as a crash or
 * kill -9 would, so the tests can check the previous one survives;
 * KILN_TEST_TERM_IN_SAVE=STEP sends SIGTERM there instead, as a user's
 * kill or Ctrl-C would (its temporary is removed on the way out). */
static void maybe_die_in_save(uint64_t step, int entry, int count)
{
    const char *k = getenv("KILN_TEST_KILL_IN_SAVE"), *t = getenv("KILN_TEST_TERM_IN_SAVE");
    if (k && *k && strtoull(k, NULL, 10) == step && entry == count / 2)
        raise(SIGKILL);
    if (t && *t && strtoull(t, NULL, 10) == step && entry == count / 2)
        raise(SIGTERM);
}

/* Values the next step writes before it reads them: the loss scale the
 * step uses and the gradient accumulators (which a step's first
 * micro-batch overwrites). After an fp16 step skipped for overflow they
 * hold inf or nan (--force-overflow's scale is inf), which is no
 * divergence: such a value is saved as the next step will see it, the
 * scaler's scale, zeros. A finite one is saved as it is. */
static void dead_values(const kl_persist *p, void *host, uint64_t bytes, const kl_run_state *rs)
{
    if (!p->role || kl_first_nonfinite(p->type.dtype, host, ir_type_numel(&p->type)) < 0)
        return;
    if (!strcmp(p->role, "loss_scale") && p->type.dtype == IR_F32 && bytes == sizeof(float)) {
        float v = (float)rs->loss_scale;
        memcpy(host, &v, sizeof v);
    } else if (!strcmp(p->role, "grad_acc")) {
        memset(host, 0, bytes);
    }
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
    put_str(&w, rs->model ? rs->model : "");
    put_str(&w, rs->precision ? rs->precision : "");
    put_str(&w, KILN_VERSION);
    put_str(&w, rs->config ? rs->config : "");
    for (int i = 0; i < s->persist.n; i++) {
        kl_persist *p = &s->persist.v[i];
        maybe_die_in_save(rs->step, i, s->persist.n);
        uint32_t dt = p->type.dtype, rank = (uint32_t)p->type.rank;
        put_str(&w, p->name);
        put_str(&w, p->role ? p->role : "state");
        put(&w, &dt, 4);
        put(&w, &rank, 4);
        put(&w, p->type.dim, sizeof(int64_t) * rank);
        uint64_t bytes = (uint64_t)ir_type_bytes(&p->type);
        put(&w, &bytes, 8);
        void *host = kl_xmalloc(bytes ? bytes : 1);
        s->be->ops->copy_out(s->be, host, p->ptr, bytes);
        dead_values(p, host, bytes, rs);
        /* A diverged run's inf or nan would make every later resume
         * diverge too: such a checkpoint is never written. */
        int64_t bad = kl_first_nonfinite(p->type.dtype, host, ir_type_numel(&p->type));
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
    put(&w, &rs->schedule_steps, 8);
    put(&w, &rs->best, 8);
    put(&w, &rs->best_epoch, 8);
    put(&w, &rs->watch_best, 8);
    put(&w, &rs->watch_epoch, 8);
    put(&w, &rs->watch_step, 8);
    put(&w, &rs->watch_bad, 8);
    put(&w, &rs->evals, 8);
    put(&w, &rs->watch_name, 8);
    uint64_t sum = w.h;
    put(&w, &sum, 8);
    return kl_outfile_commit(&w.o, 0666);
}

/* ---- reading ---- */

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

/* A string of at most max bytes, without NULs; NULL when the bytes are
 * not there or not such a string. */
static char *get_str_max(reader *r, uint32_t max)
{
    uint32_t len;
    if (get(r, &len, 4) || len > max || (size_t)(r->end - r->p) < len || memchr(r->p, 0, len))
        return NULL;
    char *s = kl_xstrndup((const char *)r->p, len);
    r->p += len;
    return s;
}

static char *get_str(reader *r) { return get_str_max(r, CKPT_MAX_STR); }

/* Reads and checks the run state at the end of a checked file. */
static int read_run_state(const char *path, uint32_t version, const unsigned char *at, kl_run_state *rs)
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
    if (version >= 4)
        memcpy(&rs->schedule_steps, at + 40, 8);
    if (version >= 6) {
        memcpy(&rs->best, at + 48, 8);
        memcpy(&rs->best_epoch, at + 56, 8);
        memcpy(&rs->watch_best, at + 64, 8);
        memcpy(&rs->watch_epoch, at + 72, 8);
        memcpy(&rs->watch_step, at + 80, 8);
        memcpy(&rs->watch_bad, at + 88, 8);
        memcpy(&rs->evals, at + 96, 8);
        memcpy(&rs->watch_name, at + 104, 8);
        if (rs->best_epoch < 0 || rs->watch_epoch < 0 || rs->watch_step < 0 || rs->watch_bad < 0 || rs->evals < 0) {
            kl_error("%s: the evaluations' record is negative (a corrupt or foreign file)", path);
            return -1;
        }
    }
    /* The step multiplies the loss by the scale as an fp32 number: one
     * below fp32's smallest normal (or above its largest) flushes to 0
     * (or inf) and every step is skipped or wrong. (Written so that a
     * thread that treats subnormals as 0, as kernel threads do, refuses
     * the same scales.) */
    double ls = rs->loss_scale;
    if (!(ls >= FLT_MIN && ls <= FLT_MAX)) {
        kl_error("%s: the loss scale %g is not a normal fp32 number (%g to %g); Kiln never saves one (a corrupt or "
                 "foreign file)", path, ls, (double)FLT_MIN, (double)FLT_MAX);
        return -1;
    }
    if (rs->clean_steps < 0 || (uint64_t)rs->clean_steps > rs->step || rs->skipped < 0 ||
        (uint64_t)rs->skipped > rs->step || rs->skipped_in_row < 0 || rs->skipped_in_row > rs->skipped) {
        kl_error("%s: the loss-scaler state (%lld clean steps, %lld skipped, scale %g) does not fit step %llu", path,
                 (long long)rs->clean_steps, (long long)rs->skipped, rs->loss_scale, (unsigned long long)rs->step);
        return -1;
    }
    return 0;
}

/* One entry, every field checked. */
static int read_entry(reader *r, const char *path, uint32_t version, uint32_t i, kl_ckpt_entry *e)
{
    uint32_t dt, rank;
    if (!(e->name = get_str(r)) || !e->name[0]) {
        kl_error("%s: malformed entry %u (its name)", path, i);
        return -1;
    }
    if (version >= 3 ? !(e->role = get_str(r)) : !(e->role = kl_xstrdup(""))) {
        kl_error("%s: malformed entry '%s' (its role)", path, e->name);
        return -1;
    }
    if (get(r, &dt, 4) || dt == IR_NONE || dt >= IR_NDTYPES) {
        kl_error("%s: malformed entry '%s' (dtype)", path, e->name);
        return -1;
    }
    if (get(r, &rank, 4) || rank > IR_MAX_RANK) {
        kl_error("%s: malformed entry '%s' (rank)", path, e->name);
        return -1;
    }
    e->type = (ir_type){(ir_dtype)dt, (int)rank, {0}};
    if (get(r, e->type.dim, sizeof(int64_t) * rank)) {
        kl_error("%s: malformed entry '%s' (dims)", path, e->name);
        return -1;
    }
    int64_t numel = 1;
    for (uint32_t d = 0; d < rank && numel >= 0; d++)
        numel = e->type.dim[d] < 0 ? -1 : kl_size_mul(numel, e->type.dim[d]);
    int64_t need = numel < 0 ? -1 : kl_size_mul(numel, ir_dtype_size(e->type.dtype));
    if (need < 0) {
        kl_error("%s: malformed entry '%s' (dims)", path, e->name);
        return -1;
    }
    if (get(r, &e->bytes, 8) || (size_t)(r->end - r->p) < e->bytes) {
        kl_error("%s: malformed entry '%s' (its byte count runs past the end)", path, e->name);
        return -1;
    }
    if (e->bytes != (uint64_t)need) {
        char *a = ir_type_str(&e->type);
        kl_error("%s: '%s' (%s) has %llu bytes in the checkpoint; its type needs %lld", path, e->name, a,
                 (unsigned long long)e->bytes, (long long)need);
        free(a);
        return -1;
    }
    e->data = r->p;
    r->p += e->bytes;
    return 0;
}

static int name_order(const void *a, const void *b)
{
    return strcmp((*(const kl_ckpt_entry *const *)a)->name, (*(const kl_ckpt_entry *const *)b)->name);
}

int kl_ckpt_read(kl_ckpt *c, const char *path)
{
    memset(c, 0, sizeof *c);
    if (kl_source_read(&c->file, path))
        return -1;
    c->path = kl_xstrdup(path);
    const unsigned char *data = (const unsigned char *)c->file.text;
    size_t size = c->file.len;
    reader r = {data, data + size};
    char magic[8];
    if (size < 32 || get(&r, magic, 8) || memcmp(magic, "KILNCKPT", 8)) {
        kl_error("%s: not a kiln checkpoint", path);
        goto fail;
    }
    uint64_t want;
    memcpy(&want, data + size - 8, 8);
    if (kl_hash_bytes(KL_HASH_INIT, data, size - 8) != want) {
        kl_error("%s: checksum mismatch: the checkpoint is truncated or corrupt", path);
        goto fail;
    }
    c->checksum = want;
    uint32_t count;
    if (get(&r, &c->version, 4) || c->version < 1 || c->version > CKPT_VERSION) {
        kl_error("%s: unsupported checkpoint version %u (this kiln reads 1 to %u)", path, c->version, CKPT_VERSION);
        goto fail;
    }
    size_t trailer = c->version >= 6 ? 120 : c->version >= 4 ? 56 : c->version >= 2 ? 48 : 16;
    if (get(&r, &count, 4) || size < 16 + trailer) {
        kl_error("%s: not a kiln checkpoint", path);
        goto fail;
    }
    r.end = data + size - trailer;
    /* Each entry takes at least 24 bytes: a count beyond that is a lie. */
    if (count > (size_t)(r.end - r.p) / 24 + 1) {
        kl_error("%s: malformed: %u entries do not fit in %zu bytes", path, count, size);
        goto fail;
    }
    if (c->version >= 3) {
        if (!(c->model = get_str(&r)) || !(c->precision = get_str(&r)) || !(c->kiln_version = get_str(&r))) {
            kl_error("%s: malformed header (model, precision, version strings)", path);
            goto fail;
        }
    } else {
        c->model = kl_xstrdup("");
        c->precision = kl_xstrdup("");
        c->kiln_version = kl_xstrdup("");
    }
    if (c->version >= 5 ? !(c->config = get_str_max(&r, CKPT_MAX_CONFIG)) : !(c->config = kl_xstrdup(""))) {
        kl_error("%s: malformed header (the config string)", path);
        goto fail;
    }
    if (read_run_state(path, c->version, r.end, &c->rs))
        goto fail;
    c->v = kl_xcalloc(count ? count : 1, sizeof *c->v);
    for (uint32_t i = 0; i < count; i++) {
        c->n++;
        if (read_entry(&r, path, c->version, i, &c->v[i]))
            goto fail;
    }
    /* No name twice: neighbours in name order (a pairwise check took
     * minutes for 300,000 entries). The sorted index is kl_ckpt_find's. */
    c->by_name = kl_xcalloc((size_t)c->n + 1, sizeof *c->by_name);
    for (int i = 0; i < c->n; i++)
        c->by_name[i] = &c->v[i];
    qsort(c->by_name, (size_t)c->n, sizeof *c->by_name, name_order);
    for (int i = 1; i < c->n; i++)
        if (!strcmp(c->by_name[i - 1]->name, c->by_name[i]->name)) {
            kl_error("%s: '%s' is in the checkpoint twice", path, c->by_name[i]->name);
            goto fail;
        }
    if (r.p != r.end) {
        kl_error("%s: malformed: %zu bytes after the last entry", path, (size_t)(r.end - r.p));
        goto fail;
    }
    return 0;
fail:
    kl_ckpt_free(c);
    return -1;
}

void kl_ckpt_free(kl_ckpt *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->v[i].name);
        free(c->v[i].role);
    }
    free(c->v);
    free(c->by_name);
    free(c->model);
    free(c->precision);
    free(c->kiln_version);
    free(c->config);
    free(c->path);
    kl_source_free(&c->file);
    memset(c, 0, sizeof *c);
}

const kl_ckpt_entry *kl_ckpt_find(const kl_ckpt *c, const char *name)
{
    int lo = 0, hi = c->by_name ? c->n : 0;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, k = strcmp(c->by_name[mid]->name, name);
        if (!k)
            return c->by_name[mid];
        if (k < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- validating the values ---- */

/* Values the next step writes before it reads them (dead_values): they
 * may hold anything. A version 1 or 2 entry has no role: its name says. */
static bool is_dead(const kl_ckpt_entry *e, const char *role)
{
    if (!role || !role[0])
        role = e->role;
    if (role[0])
        return !strcmp(role, "loss_scale") || !strcmp(role, "grad_acc");
    size_t n = strlen(e->name);
    return !strcmp(e->name, "loss_scale") || (n > 9 && !strcmp(e->name + n - 9, ".grad_acc"));
}

/* An Adam second moment (NAME.adam_v, passes/optimizer.c): a running
 * mean of squares, never negative. */
static bool is_second_moment(const kl_ckpt_entry *e)
{
    size_t n = strlen(e->name);
    return n > 7 && !strcmp(e->name + n - 7, ".adam_v") && (!e->role[0] || !strcmp(e->role, "optimizer_state"));
}

int kl_ckpt_validate(const kl_ckpt *c, const char *const *roles)
{
    /* No checkpoint is written with inf or nan in it (kl_checkpoint_save):
     * one that holds some is corrupt or not Kiln's, and would make the
     * run "diverge" at its first step. */
    for (int i = 0; i < c->n; i++) {
        const kl_ckpt_entry *e = &c->v[i];
        int64_t n = ir_type_numel(&e->type);
        if (is_dead(e, roles ? roles[i] : NULL))
            continue;
        int64_t bad = kl_first_nonfinite(e->type.dtype, e->data, n);
        if (bad >= 0) {
            kl_error("%s: element %lld of '%s' is not finite; Kiln never saves inf or nan (a corrupt or foreign file)",
                     c->path, (long long)bad, e->name);
            return -1;
        }
        if (!is_second_moment(e) || !ir_dtype_is_float(e->type.dtype))
            continue;
        int64_t k = 0;
        if (e->type.dtype == IR_F32) /* the usual case, without a call per element */
            for (float x; k < n; k++) {
                memcpy(&x, e->data + 4 * k, 4);
                if (x < 0)
                    break;
            }
        for (; k < n; k++) {
            /* The file's bytes are not aligned to the element: copied
             * into an aligned one first. */
            _Alignas(8) unsigned char one[8];
            size_t size = (size_t)ir_dtype_size(e->type.dtype);
            memcpy(one, e->data + size * (size_t)k, size);
            double x = kl_load_as(e->type.dtype, one, 0);
            if (x < 0) {
                kl_error("%s: element %lld of '%s' is %g; an Adam second moment is never negative (a corrupt or "
                         "foreign file)", c->path, (long long)k, e->name, x);
                return -1;
            }
        }
    }
    return 0;
}

/* ---- loading into a session ---- */

/* A param's low-precision copy: rebuilt from its master, so a checkpoint
 * of another precision (or none) does not need to hold it. */
static bool is_lowp_name(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && !strcmp(name + n - 5, ".lowp");
}

static bool is_lowp(const char *name, const char *role)
{
    return !strcmp(role, "lowp") || (!role[0] && is_lowp_name(name));
}

/* Up to 6 names, comma separated, "and N more" after. */
static void list_names(kl_buf *b, const char **names, int n)
{
    for (int i = 0; i < n && i < 6; i++)
        kl_buf_printf(b, "%s'%s'", i ? ", " : "", names[i]);
    if (n > 6)
        kl_buf_printf(b, " and %d more", n - 6);
}

/* Fills p (a NAME.lowp copy) from NAME's values, rounded to its dtype. */
void kl_checkpoint_rebuild_copy(kl_session *s, kl_persist *p)
{
    char *master = kl_xstrndup(p->name, strlen(p->name) - 5);
    kl_persist *m = kl_session_find(s, master);
    if (!m || ir_type_numel(&m->type) != ir_type_numel(&p->type))
        kl_panic("%s copies %s, which the session does not hold", p->name, master);
    free(master);
    size_t mb = (size_t)ir_type_bytes(&m->type), pb = (size_t)ir_type_bytes(&p->type);
    void *mh = kl_xmalloc(mb ? mb : 1), *ph = kl_xmalloc(pb ? pb : 1);
    s->be->ops->copy_out(s->be, mh, m->ptr, mb);
    for (int64_t i = 0; i < ir_type_numel(&p->type); i++)
        kl_store_as(p->type.dtype, ph, i, kl_load_as(m->type.dtype, mh, i));
    s->be->ops->copy_in(s->be, p->ptr, ph, pb);
    free(mh);
    free(ph);
}

/* Which model value each entry fills (-1: none, a low-precision copy of
 * another dtype), every difference named; -1 after the error. */
static int match_entries(kl_session *s, const kl_ckpt *c, bool only_held, int *fill)
{
    const char *path = c->path;
    bool *seen = kl_xcalloc((size_t)s->persist.n + 1, sizeof *seen);
    const char **extra = kl_xcalloc((size_t)c->n + 1, sizeof *extra), **missing = kl_xcalloc((size_t)s->persist.n + 1,
                                                                                              sizeof *missing);
    int nextra = 0, nmissing = 0, ntypes = 0, rc = -1;
    kl_buf types = {0};
    for (int i = 0; i < c->n; i++) {
        const kl_ckpt_entry *e = &c->v[i];
        kl_persist *p = kl_session_find(s, e->name);
        fill[i] = -1;
        if (is_lowp(e->name, e->role) && (!p || p->type.dtype != e->type.dtype))
            continue; /* another precision's copy: the model's is rebuilt */
        if (!p) {
            if (!only_held)
                extra[nextra++] = e->name;
            continue;
        }
        if (!ir_type_eq(&p->type, &e->type)) {
            char *a = ir_type_str(&e->type), *b = ir_type_str(&p->type);
            if (ntypes++ < 4)
                kl_buf_printf(&types, "%s'%s' is %s in the checkpoint but %s in the model", ntypes > 1 ? "; " : "",
                              e->name, a, b);
            free(a);
            free(b);
            seen[p - s->persist.v] = true; /* differs, but not missing */
            continue;
        }
        fill[i] = (int)(p - s->persist.v);
        seen[fill[i]] = true;
    }
    for (int i = 0; i < s->persist.n; i++)
        if (!seen[i] && !is_lowp_name(s->persist.v[i].name))
            missing[nmissing++] = s->persist.v[i].name;
    if (nextra || nmissing || ntypes) {
        kl_buf b = {0};
        if (nextra) {
            list_names(&b, extra, nextra);
            kl_buf_puts(&b, nextra == 1 ? " is not a value of this model" : " are not values of this model");
        }
        if (nmissing) {
            kl_buf_puts(&b, nextra ? "; " : "");
            list_names(&b, missing, nmissing);
            kl_buf_printf(&b, " of the model %s missing from the checkpoint", nmissing == 1 ? "is" : "are");
        }
        if (ntypes) {
            kl_buf_puts(&b, nextra || nmissing ? "; " : "");
            kl_buf_puts(&b, types.s);
            if (ntypes > 4)
                kl_buf_printf(&b, " and %d more types differ", ntypes - 4);
        }
        kl_error("%s: %s", path, b.s);
        kl_buf_free(&b);
        goto done;
    }
    rc = 0;
done:
    kl_buf_free(&types);
    free(seen);
    free(extra);
    free(missing);
    return rc;
}

static int load(kl_session *s, const char *path, uint64_t max_step, bool only_held, kl_run_state *rs)
{
    kl_ckpt c;
    if (kl_ckpt_read(&c, path))
        return -1;
    int rc = -1;
    int *fill = kl_xcalloc((size_t)c.n + 1, sizeof *fill);
    if (c.rs.step > max_step) {
        kl_error("%s: the checkpoint is at step %llu, beyond this run's %llu steps (raise --steps or --epochs)", path,
                 (unsigned long long)c.rs.step, (unsigned long long)max_step);
        goto done;
    }
    /* Check everything before changing anything. */
    if (match_entries(s, &c, only_held, fill))
        goto done;
    /* The values and the run state, as kiln ckpt checks them; a version 1
     * or 2 file records no roles: the model's say which values are dead. */
    const char **roles = kl_xcalloc((size_t)c.n + 1, sizeof *roles);
    for (int i = 0; i < c.n; i++)
        roles[i] = fill[i] >= 0 ? s->persist.v[fill[i]].role : NULL;
    int bad = kl_ckpt_validate(&c, roles);
    free(roles);
    if (bad)
        goto done;
    bool *filled = kl_xcalloc((size_t)s->persist.n + 1, sizeof *filled);
    for (int i = 0; i < c.n; i++)
        if (fill[i] >= 0) {
            s->be->ops->copy_in(s->be, s->persist.v[fill[i]].ptr, c.v[i].data, c.v[i].bytes);
            filled[fill[i]] = true;
        }
    for (int i = 0; i < s->persist.n; i++)
        if (!filled[i])
            kl_checkpoint_rebuild_copy(s, &s->persist.v[i]);
    free(filled);
    *rs = c.rs;
    rs->scaler_from_fp16 = c.version < 3 || !strcmp(c.precision, "fp16");
    rs->checksum = c.checksum;
    /* Version 1 kept the loss scale only as the value the last step used. */
    kl_persist *ls = c.version == 1 ? kl_session_find(s, "loss_scale") : NULL;
    if (ls && ls->type.dtype == IR_F32 && ir_type_numel(&ls->type) == 1) {
        float v;
        s->be->ops->copy_out(s->be, &v, ls->ptr, sizeof v);
        if (isfinite(v) && v > 0)
            rs->loss_scale = v;
    }
    rc = 0;
done:
    free(fill);
    kl_ckpt_free(&c);
    return rc;
}

int kl_checkpoint_load(kl_session *s, const char *path, uint64_t max_step, kl_run_state *rs)
{
    return load(s, path, max_step, false, rs);
}

int kl_checkpoint_load_held(kl_session *s, const char *path, kl_run_state *rs)
{
    return load(s, path, UINT64_MAX, true, rs);
}
