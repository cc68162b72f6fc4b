/* Training on many ranks (data parallel), what the training plan does
 * not: the loss and metric of the global batch, batch norm's running
 * statistics, and the start-up line.
 *
 * Each rank runs the whole training plan on its slice of every global
 * batch (train.c: the loader assembles batch x ranks samples, rank r feeds
 * rows [r x batch, (r+1) x batch)). The plan itself sums the ranks'
 * gradients: the shard pass (passes/shard.c) puts an all_reduce before the
 * update, which the executor runs through the session's communicator, and
 * the gradient multiplier divides by the ranks (train.c, write_hyper), so
 * every rank applies the global batch's mean gradient to the same params
 * and they stay equal without being sent. */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "passes/passes.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/safetensors.h"
#include "runtime/exec/zero3.h"

/* State written outside the update and not read by it (batch norm's
 * running statistics) is each rank's own, from its own samples. It is
 * averaged across ranks before each evaluation and checkpoint
 * (train_ranks_settle): its updates are linear (running = (1 - m) running
 * + m batch statistic), so averaging then equals averaging after every
 * step, with no collective per step. */
int train_ranks_prepare(trainer *t)
{
    const ir_graph *g = t->train->g;
    if (t->world == 1)
        return 0;
    bool *read_in_update = kl_xcalloc((size_t)g->values.n + 1, 1), *taken = kl_xcalloc((size_t)g->values.n + 1, 1);
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        for (int k = 0; !n->dead && n->phase == IR_PHASE_UPDATE && k < n->in.n; k++)
            read_in_update[n->in.v[k]] = true;
    }
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || n->phase == IR_PHASE_UPDATE)
            continue;
        for (int k = 0; k < n->in.n; k++) {
            int v = n->in.v[k];
            if (!ir_op_mutates(n->op, k) || taken[v] || read_in_update[v] || ir_val(g, v)->kind != IR_VAL_STATE ||
                !ir_dtype_is_float(ir_val(g, v)->type.dtype))
                continue;
            taken[v] = true;
            kl_vec_push(t->averaged, v);
        }
    }
    free(read_in_update);
    free(taken);
    return 0;
}

void train_ranks_sums(trainer *t, double *sums, int n)
{
    if (t->world > 1)
        kl_comm_all_reduce(t->comm, sums, n, IR_F64, KL_REDUCE_SUM, "the loss and metric sums");
}

int64_t train_ranks_skips(trainer *t, int64_t own, const char *own_first, char *first, size_t n)
{
    snprintf(first, n, "%s", own && own_first ? own_first : "");
    if (t->world == 1)
        return own;
    /* The count summed; the lowest rank that skipped (the largest of
     * world - rank) sends its reason to the others. */
    double v[2] = {(double)own, 0}, lowest = own ? (double)(t->world - t->rank) : 0;
    kl_comm_all_reduce(t->comm, v, 1, IR_F64, KL_REDUCE_SUM, "the count of skipped samples");
    kl_comm_all_reduce(t->comm, &lowest, 1, IR_F64, KL_REDUCE_MAX, "the rank that skipped first");
    if (lowest > 0) {
        int64_t words[113] = {0}; /* 904 bytes: a reason as the loader keeps it (900) */
        memcpy(words, first, strlen(first) < sizeof words - 1 ? strlen(first) : sizeof words - 1);
        kl_comm_broadcast(t->comm, words, KL_ARRAY_LEN(words), IR_I64, t->world - (int)lowest,
                          "the first skipped sample's reason");
        ((char *)words)[sizeof words - 1] = 0;
        snprintf(first, n, "%s", (const char *)words);
    }
    return (int64_t)v[0];
}

/* shard = zero1 (passes/shard_zero.c): a state slice records the member
 * states it is a slice of ("members", "counts"); NULL for other values. */
static const ir_value *zero_state(const trainer *t, const char *name)
{
    const ir_graph *g = t->train->g;
    int v = ir_find_value(g, name);
    if (v < 0 || !ir_attrs_find(&ir_val(g, v)->attrs, "members"))
        return NULL;
    return ir_val(g, v);
}

static bool zero_master(const kl_persist *p) { return p->role && !strcmp(p->role, "zero_master"); }

/* zero3 (passes/shard_zero3.c): the master slices are the params' only
 * storage. */
static bool zero3_master(const kl_persist *p) { return p->role && !strcmp(p->role, "zero3_master"); }

/* Whether name is in the comma-separated list. */
static bool in_list(const char *list, const char *name, size_t len)
{
    for (const char *c = list; *c;) {
        const char *end = strchr(c, ',');
        size_t n = end ? (size_t)(end - c) : strlen(c);
        if (n == len && !strncmp(c, name, len))
            return true;
        c += n + (end ? 1 : 0);
    }
    return false;
}

/* zero3: a value the checkpoint leaves out: a 16-bit slice (rebuilt from
 * its master slice), or an evaluation plan's copy of a param (or of its
 * 16-bit copy), which train_ranks_settle fills from the slices. */
static bool zero3_shadow(const trainer *t, const char *name)
{
    size_t len = strlen(name);
    if (len > 5 && !strcmp(name + len - 5, ".lowp"))
        len -= 5;
    for (int i = 0; i < t->s->persist.n; i++) {
        const kl_persist *p = &t->s->persist.v[i];
        if (!zero3_master(p))
            continue;
        if (strlen(p->name) == len && !strncmp(p->name, name, len) && name[len])
            return true;
        const ir_value *zv = zero_state(t, p->name);
        if (zv && in_list(ir_attr_str(&zv->attrs, "members", ""), name, len))
            return true;
    }
    return false;
}

/* The type of member k of slice zv, state name ("dense.1.w.adam_m"): its
 * param's shape ("dense.1.w"), f32; zero3 slices name their members'
 * shapes. */
static ir_type member_type(const trainer *t, const ir_value *zv, int k, const char *name, int64_t count)
{
    char key[32];
    snprintf(key, sizeof key, "shape_%d", k);
    if (ir_attrs_find(&zv->attrs, key))
        return kl_zero3_member_type(zv, k, count);
    const char *dot = strrchr(name, '.');
    char *param = kl_xstrndup(name, dot ? (size_t)(dot - name) : strlen(name));
    int v = ir_find_value(t->train->g, param);
    free(param);
    ir_type ty = {IR_F32, 1, {count}};
    if (v >= 0 && ir_type_numel(&ir_val(t->train->g, v)->type) == count) {
        ty = ir_val(t->train->g, v)->type;
        ty.dtype = IR_F32;
    }
    return ty;
}

static void free_full(trainer *t)
{
    for (int i = 0; i < t->zero_full.n; i++) {
        free(t->zero_full.v[i].name);
        free(t->zero_full.v[i].role);
        free(t->zero_full.v[i].ptr);
    }
    t->zero_full.n = 0;
}

/* Every rank's slices gathered into t->zero_full (every rank calls it). */
static void gather_zero_state(trainer *t)
{
    kl_session *s = t->s;
    free_full(t);
    for (int i = 0; i < s->persist.n; i++) {
        const kl_persist *p = &s->persist.v[i];
        const ir_value *zv = zero_state(t, p->name);
        if (!zv)
            continue;
        int64_t m = ir_type_numel(&p->type);
        float *mine = kl_xmalloc((size_t)m * sizeof *mine), *all = kl_xmalloc((size_t)(m * t->world) * sizeof *all);
        s->be->ops->copy_out(s->be, mine, p->ptr, (size_t)m * sizeof *mine);
        kl_comm_all_gather(t->comm, mine, m, all, IR_F32, p->name);
        const char *members = ir_attr_str(&zv->attrs, "members", "");
        int64_t counts[32];
        int ncounts = ir_attr_ints(&zv->attrs, "counts", counts, 32);
        int64_t at = 0;
        const char *c = members;
        for (int k = 0; *c; k++) {
            const char *end = strchr(c, ',');
            size_t len = end ? (size_t)(end - c) : strlen(c);
            int64_t n = k < ncounts ? counts[k] : 0;
            kl_persist f = {kl_xstrndup(c, len), {0}, kl_xmalloc((size_t)n * sizeof(float) + 1),
                            kl_xstrdup(zero3_master(p) ? "param" : p->role ? p->role : "optimizer_state")};
            f.type = member_type(t, zv, k, f.name, n);
            memcpy(f.ptr, all + at, (size_t)n * sizeof(float));
            at += n;
            kl_vec_push(t->zero_full, f);
            c += len + (end ? 1 : 0);
        }
        free(mine);
        free(all);
    }
}

static bool has_zero_state(const trainer *t)
{
    for (int i = 0; i < t->s->persist.n; i++)
        if (zero_master(&t->s->persist.v[i]) || zero3_master(&t->s->persist.v[i]))
            return true;
    return false;
}

int train_ranks_ckpt_begin(trainer *t, bool loading)
{
    kl_session *s = t->s;
    if (train_tp_ckpt_begin(t, loading))
        return -1;
    if (!has_zero_state(t))
        return 0;
    if (loading) {
        /* Zeros in the shape of the full state, for the load to fill. */
        free_full(t);
        for (int i = 0; i < s->persist.n; i++) {
            const kl_persist *p = &s->persist.v[i];
            const ir_value *zv = zero_state(t, p->name);
            if (!zv)
                continue;
            const char *c = ir_attr_str(&zv->attrs, "members", "");
            int64_t counts[32];
        int ncounts = ir_attr_ints(&zv->attrs, "counts", counts, 32);
            for (int k = 0; *c; k++) {
                const char *end = strchr(c, ',');
                size_t len = end ? (size_t)(end - c) : strlen(c);
                int64_t n = k < ncounts ? counts[k] : 0;
                kl_persist f = {kl_xstrndup(c, len), {0}, kl_xcalloc((size_t)n + 1, sizeof(float)),
                                kl_xstrdup(zero3_master(p) ? "param" : p->role ? p->role : "optimizer_state")};
                f.type = member_type(t, zv, k, f.name, n);
                kl_vec_push(t->zero_full, f);
                c += len + (end ? 1 : 0);
            }
        }
        train_tp_zero_widen(t);
    } else if (!t->zero_full.n) {
        kl_error("shard = %s: no gathered optimizer state to save (a checkpoint before the first step, "
                 "--save-init, is not built on many ranks)",
                 t->cfg.shard == KL_SHARD_ZERO3 ? "zero3" : t->cfg.shard == KL_SHARD_ZERO2 ? "zero2" : "zero1");
        return -1;
    }
    /* The full state in device memory, in place of the slices. */
    KL_VEC(kl_persist) list = {0};
    bool placed = false;
    for (int i = 0; i < s->persist.n; i++) {
        const kl_persist *p = &s->persist.v[i];
        if (zero_master(p) || zero3_shadow(t, p->name))
            continue;
        if (!zero_state(t, p->name)) {
            kl_vec_push(list, *p);
            continue;
        }
        if (placed)
            continue;
        placed = true;
        for (int k = 0; k < t->zero_full.n; k++) {
            const kl_persist *f = &t->zero_full.v[k];
            size_t bytes = (size_t)ir_type_bytes(&f->type);
            kl_persist d = {f->name, f->type, s->be->ops->alloc(s->be, bytes ? bytes : 4), f->role};
            s->be->ops->copy_in(s->be, d.ptr, f->ptr, bytes);
            kl_vec_push(list, d);
        }
    }
    t->zero_held.v = s->persist.v, t->zero_held.n = s->persist.n, t->zero_held.cap = s->persist.cap;
    s->persist.v = list.v, s->persist.n = list.n, s->persist.cap = list.cap;
    return 0;
}

/* In the reverse order of train_ranks_ckpt_begin: ZeRO's state, then
 * the tensor-parallel values. */
static void zero_ckpt_end(trainer *t, bool loading);

void train_ranks_ckpt_end(trainer *t, bool loading)
{
    zero_ckpt_end(t, loading);
    train_tp_ckpt_end(t, loading);
}

static void zero_ckpt_end(trainer *t, bool loading)
{
    kl_session *s = t->s;
    if (!t->zero_held.v)
        return;
    /* The full state back to the host (after a load: what was loaded). */
    for (int i = 0; i < s->persist.n; i++)
        for (int k = 0; k < t->zero_full.n; k++) {
            kl_persist *f = &t->zero_full.v[k];
            if (s->persist.v[i].name != f->name)
                continue;
            if (loading)
                s->be->ops->copy_out(s->be, f->ptr, s->persist.v[i].ptr, (size_t)ir_type_bytes(&f->type));
            s->be->ops->free(s->be, s->persist.v[i].ptr);
        }
    free(s->persist.v);
    s->persist.v = t->zero_held.v, s->persist.n = t->zero_held.n, s->persist.cap = t->zero_held.cap;
    t->zero_held.v = NULL, t->zero_held.n = t->zero_held.cap = 0;
    if (!loading)
        return;
    train_tp_zero_cut(t);
    /* Each rank's slice of the loaded state (padding: zeros). */
    for (int i = 0; i < s->persist.n; i++) {
        const kl_persist *p = &s->persist.v[i];
        const ir_value *zv = zero_state(t, p->name);
        if (!zv)
            continue;
        int64_t m = ir_type_numel(&p->type), lo = (int64_t)t->rank * m, at = 0;
        float *mine = kl_xcalloc((size_t)m + 1, sizeof *mine);
        const char *c = ir_attr_str(&zv->attrs, "members", "");
        while (*c) {
            const char *end = strchr(c, ',');
            size_t len = end ? (size_t)(end - c) : strlen(c);
            for (int k = 0; k < t->zero_full.n; k++) {
                const kl_persist *f = &t->zero_full.v[k];
                if (strlen(f->name) != len || strncmp(f->name, c, len))
                    continue;
                const float *x = f->ptr;
                for (int64_t j = 0, n = ir_type_numel(&f->type); j < n; j++, at++)
                    if (at >= lo && at < lo + m)
                        mine[at - lo] = x[j];
            }
            c += len + (end ? 1 : 0);
        }
        s->be->ops->copy_in(s->be, p->ptr, mine, (size_t)m * sizeof *mine);
        free(mine);
    }
    /* zero3: the 16-bit slices from the loaded master slices. */
    for (int i = 0; i < s->persist.n; i++) {
        kl_persist *p = &s->persist.v[i];
        if (p->role && !strcmp(p->role, "lowp") && zero3_shadow(t, p->name) && strlen(p->name) > 5) {
            char *master = kl_xstrndup(p->name, strlen(p->name) - 5);
            kl_persist *m = kl_session_find(s, master);
            free(master);
            if (m && zero3_master(m))
                kl_checkpoint_rebuild_copy(s, p);
        }
    }
    free_full(t);
}

/* zero3: an evaluation plan reads the params whole: its copies (and
 * their 16-bit copies) get the gathered slices. */
static void fill_eval_copies(trainer *t)
{
    kl_session *s = t->s;
    for (int k = 0; k < t->zero_full.n; k++) {
        const kl_persist *f = &t->zero_full.v[k];
        kl_persist *p = strcmp(f->role, "param") ? NULL : kl_session_find(s, f->name);
        if (!p || ir_type_numel(&p->type) != ir_type_numel(&f->type) || p->type.dtype != IR_F32)
            continue;
        s->be->ops->copy_in(s->be, p->ptr, f->ptr, (size_t)ir_type_bytes(&f->type));
        char *lowp = kl_xasprintf("%s.lowp", f->name);
        kl_persist *c = kl_session_find(s, lowp);
        free(lowp);
        if (c)
            kl_checkpoint_rebuild_copy(s, c);
    }
}

int train_ranks_init(trainer *t)
{
    /* zero3: the file's params go into the slices, as a checkpoint's. */
    if (train_ranks_ckpt_begin(t, true))
        return -1;
    int rc = kl_st_init_session(t->s, t->opt.init, t->opt.init_partial, false);
    train_ranks_ckpt_end(t, true);
    return rc;
}

void train_ranks_free(trainer *t)
{
    free_full(t);
    free(t->zero_full.v);
    train_tp_free(t);
}

void train_ranks_settle(trainer *t)
{
    train_pipeline_settle(t);
    train_tp_settle(t);
    /* One rank, or --eval-only (no training plan): nothing to average. */
    if (t->world == 1)
        return;
    const ir_graph *g = t->train->g;
    if (has_zero_state(t)) {
        gather_zero_state(t);
        train_tp_zero_gather(t);
        fill_eval_copies(t);
    }
    for (int i = 0; i < t->averaged.n; i++) {
        int v = t->averaged.v[i];
        const ir_type *ty = &ir_val(g, v)->type;
        size_t bytes = (size_t)ir_type_bytes(ty);
        void *h = kl_xmalloc(bytes);
        kl_exec_read(t->train, v, h, bytes);
        kl_comm_all_reduce(t->comm, h, ir_type_numel(ty), ty->dtype, KL_REDUCE_SUM, ir_val(g, v)->name);
        for (int64_t k = 0; k < ir_type_numel(ty); k++)
            kl_store_as(ty->dtype, h, k, kl_load_as(ty->dtype, h, k) / (double)t->world);
        kl_exec_write(t->train, v, h, bytes);
        free(h);
    }
}

/* "ranks: world 4 (mpirun (Open MPI)), shard dp" and the memory per rank
 * against ZeRO's formulas. */
void train_ranks_print_start(const trainer *t)
{
    printf("ranks: %s, shard %s\n", kl_comm_desc(t->comm),
           t->world * t->tp == 1             ? "none (one rank)"
           : t->cfg.shard == KL_SHARD_ZERO1 ? "zero1"
           : t->cfg.shard == KL_SHARD_ZERO2 ? "zero2"
           : t->cfg.shard == KL_SHARD_ZERO3 ? "zero3"
                                            : "dp");
    train_tp_print_start(t);
    if (t->world * t->tp > 1) {
        char *m = pass_rank_memory(t->train->g, t->world * t->tp);
        printf("memory %s\n", m);
        free(m);
    }
}
