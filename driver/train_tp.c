/* Tensor parallelism in the training executable (passes/shard_tp.c cuts
 * the params): the groups, the start-up line, and checkpoints of the
 * full params.
 *
 * The world of N ranks is cut into tensor-parallel groups of T
 * consecutive ranks; across them, the ranks of equal index form the
 * data-parallel groups (runtime/comm/comm.c, kl_comm_split_tp). The trainer
 * then sees its data-parallel group as its world (t->comm, t->rank,
 * t->world): the ranks of a tensor-parallel group read the same rows of
 * the global batch (batch x N / T samples), report the same loss, and
 * the gradients are all-reduced over the data-parallel group only (the
 * shard pass compiles for N / T). Output and files stay rank 0's of the
 * whole world (train.c silences the others before this runs).
 *
 * A checkpoint holds every param whole, as one rank writes it: the
 * slices of split params and of their state ("<param>.<what>", the
 * param's shape) are gathered from the tensor-parallel group at
 * train_ranks_settle (every rank calls it before a save) and swapped in
 * for the save; a load reads the whole values and keeps this rank's
 * slice. So a run saved at T = 2 resumes at T = 1, and the reverse.
 * Padded splits (a size T does not divide) are saved without their
 * padding, as one rank holds them; their masks (NAME.tp_mask, each rank's
 * own) are not saved. */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "passes/passes.h"
#include "runtime/exec/tp.h"

int train_tp_setup(trainer *t)
{
    int T = t->cfg.tensor_parallel > 1 ? t->cfg.tensor_parallel : 1;
    t->tp = T;
    if (T == 1)
        return 0;
    if (t->world % T) {
        kl_error("%s: tensor_parallel = %d does not divide the world of %d rank%s\n"
                 "---> launch a multiple of %d ranks (mpirun -np %d ...) or set --tensor-parallel to a divisor of %d",
                 t->model, T, t->world, t->world == 1 ? "" : "s", T, T, t->world);
        return -1;
    }
    t->comm = kl_comm_split_tp(t->comm, T);
    t->tp_rank = kl_comm_rank(kl_comm_tp(t->comm));
    t->rank = kl_comm_rank(t->comm);
    t->world = kl_comm_world(t->comm);
    /* Files are rank 0's of the world: tensorboard too. */
    if (t->rank || t->tp_rank) {
        free(t->cfg.tensorboard);
        t->cfg.tensorboard = NULL;
    }
    return 0;
}

/* The param a persistent value belongs to: the param name itself, or
 * the param of a state "<param>.<what>"; NULL when there is none. */
static const ir_value *owner_param(const trainer *t, const char *name)
{
    const ir_graph *g = t->train->g;
    int v = ir_find_value(g, name);
    if (v >= 0 && ir_val(g, v)->kind == IR_VAL_PARAM)
        return ir_val(g, v);
    const char *dot = strrchr(name, '.');
    if (!dot)
        return NULL;
    char *param = kl_xstrndup(name, (size_t)(dot - name));
    v = ir_find_value(g, param);
    free(param);
    return v >= 0 && ir_val(g, v)->kind == IR_VAL_PARAM ? ir_val(g, v) : NULL;
}

/* The axis persistent value `name` of type `type` is cut on (*T: the
 * group, *size: the real full size along it), or -1: a split param, or a
 * state of one ("<param>.<what>" of its shape: optimizer moments,
 * low-precision copies, accumulators). */
static int split_axis(const trainer *t, const char *name, const ir_type *type, int *T, int64_t *size)
{
    const ir_value *pv = owner_param(t, name);
    if (!pv || pv->type.rank != type->rank || memcmp(pv->type.dim, type->dim, sizeof(int64_t) * (size_t)type->rank))
        return -1;
    int axis = kl_tp_axis(pv, T);
    if (axis >= 0)
        *size = kl_tp_size(pv);
    return axis;
}

/* A padded split's mask (passes/shard_tp.c): this rank's own, not in a
 * checkpoint. */
static bool is_mask(const kl_persist *p) { return p->role && !strcmp(p->role, "tp_mask"); }

/* The split axis of a persistent value of the session (-1 when it is
 * replicated); a param's mask is never split, though it is the param's
 * shape. */
static int persist_split_axis(const trainer *t, const kl_persist *p, int *T, int64_t *size)
{
    *T = 1;
    *size = 0;
    return is_mask(p) ? -1 : split_axis(t, p->name, &p->type, T, size);
}

static void free_full(trainer *t)
{
    for (int i = 0; i < t->tp_full.n; i++) {
        free(t->tp_full.v[i].name);
        free(t->tp_full.v[i].ptr);
    }
    t->tp_full.n = 0;
}

/* Slice of type st (this rank's, padded) of the full value of real size
 * `size` on axis (type *full), every rank's slice in all: the real full
 * value in a new buffer. */
static void *join_slices(const ir_type *st, int axis, int T, int64_t size, const char *all, ir_type *full)
{
    ir_type padded = kl_tp_full_type(st, axis, T);
    size_t bytes = (size_t)ir_type_bytes(st);
    char *p = kl_xmalloc(bytes * (size_t)T + 1);
    for (int k = 0; k < T; k++)
        kl_tp_copy_slice(&padded, axis, T, k, p, (char *)all + (size_t)k * bytes, true);
    *full = padded;
    full->dim[axis] = size;
    void *real = kl_xmalloc((size_t)ir_type_bytes(full) + 1);
    kl_tp_pad(&padded, axis, size, p, real, false);
    free(p);
    return real;
}

/* This rank's slice (type st) of the real full value `real`. */
static void cut_slice(const ir_type *st, int axis, int T, int64_t size, int index, void *real, void *slice)
{
    ir_type padded = kl_tp_full_type(st, axis, T);
    char *p = kl_xmalloc((size_t)ir_type_bytes(&padded) + 1);
    kl_tp_pad(&padded, axis, size, p, real, true);
    kl_tp_copy_slice(&padded, axis, T, index, p, slice, false);
    free(p);
}

void train_tp_settle(trainer *t)
{
    if (t->tp <= 1)
        return;
    kl_session *s = t->s;
    kl_comm *tp = kl_comm_tp(t->comm);
    free_full(t);
    for (int i = 0; i < s->persist.n; i++) {
        const kl_persist *p = &s->persist.v[i];
        int T;
        int64_t size;
        int axis = persist_split_axis(t, p, &T, &size);
        if (axis < 0)
            continue;
        int64_t m = ir_type_numel(&p->type);
        size_t bytes = (size_t)ir_type_bytes(&p->type);
        char *mine = kl_xmalloc(bytes + 1), *all = kl_xmalloc(bytes * (size_t)T + 1);
        s->be->ops->copy_out(s->be, mine, p->ptr, bytes);
        kl_comm_all_gather(tp, mine, m, all, p->type.dtype, p->name);
        kl_persist f = {kl_xstrdup(p->name), {0}, NULL, p->role};
        f.ptr = join_slices(&p->type, axis, T, size, all, &f.type);
        kl_vec_push(t->tp_full, f);
        free(mine);
        free(all);
    }
}

int train_tp_ckpt_begin(trainer *t, bool loading)
{
    kl_session *s = t->s;
    if (t->tp <= 1)
        return 0;
    if (loading) {
        free_full(t);
        for (int i = 0; i < s->persist.n; i++) {
            const kl_persist *p = &s->persist.v[i];
            int T;
            int64_t size;
            int axis = persist_split_axis(t, p, &T, &size);
            if (axis < 0)
                continue;
            kl_persist f = {kl_xstrdup(p->name), p->type, NULL, p->role};
            f.type.dim[axis] = size;
            f.ptr = kl_xcalloc(1, (size_t)ir_type_bytes(&f.type) + 1);
            kl_vec_push(t->tp_full, f);
        }
    } else if (!t->tp_full.n) {
        kl_error("tensor_parallel: no gathered params to save (a checkpoint before the first step, --save-init, is "
                 "not built with tensor parallelism)");
        return -1;
    }
    /* The full values in device memory, in place of the slices; the
     * masks left out. */
    KL_VEC(kl_persist) list = {0};
    for (int i = 0; i < s->persist.n; i++) {
        kl_persist p = s->persist.v[i];
        if (is_mask(&p))
            continue;
        for (int k = 0; k < t->tp_full.n; k++) {
            const kl_persist *f = &t->tp_full.v[k];
            if (strcmp(f->name, p.name))
                continue;
            size_t bytes = (size_t)ir_type_bytes(&f->type);
            p.type = f->type;
            p.ptr = s->be->ops->alloc(s->be, bytes);
            s->be->ops->copy_in(s->be, p.ptr, f->ptr, bytes);
        }
        kl_vec_push(list, p);
    }
    t->tp_held.v = s->persist.v, t->tp_held.n = s->persist.n, t->tp_held.cap = s->persist.cap;
    s->persist.v = list.v, s->persist.n = list.n, s->persist.cap = list.cap;
    return 0;
}

void train_tp_ckpt_end(trainer *t, bool loading)
{
    kl_session *s = t->s;
    if (!t->tp_held.v)
        return;
    /* s->persist is t->tp_held less the masks, in order. */
    for (int i = 0, h = 0; i < s->persist.n; i++, h++) {
        while (is_mask(&t->tp_held.v[h]))
            h++;
        kl_persist *p = &s->persist.v[i], *slice = &t->tp_held.v[h];
        if (p->ptr == slice->ptr)
            continue;
        if (loading) {
            /* This rank's slice of what was loaded. */
            int T = 1;
            int64_t size = 0;
            int axis = split_axis(t, slice->name, &slice->type, &T, &size);
            size_t fb = (size_t)ir_type_bytes(&p->type), sb = (size_t)ir_type_bytes(&slice->type);
            char *full = kl_xmalloc(fb + 1), *mine = kl_xmalloc(sb + 1);
            s->be->ops->copy_out(s->be, full, p->ptr, fb);
            cut_slice(&slice->type, axis, T, size, t->tp_rank, full, mine);
            s->be->ops->copy_in(s->be, slice->ptr, mine, sb);
            free(full);
            free(mine);
        }
        s->be->ops->free(s->be, p->ptr);
    }
    free(s->persist.v);
    s->persist.v = t->tp_held.v, s->persist.n = t->tp_held.n, s->persist.cap = t->tp_held.cap;
    t->tp_held.v = NULL, t->tp_held.n = t->tp_held.cap = 0;
    if (loading)
        free_full(t);
}

/* ZeRO's optimizer state gathered over the data-parallel group
 * (driver/train_ranks.c, t->zero_full: "<param>.<what>" of the param's
 * shape) is this rank's tensor-parallel slice for split params; these
 * turn it into the whole value a checkpoint holds and back. */
void train_tp_zero_gather(trainer *t)
{
    if (t->tp <= 1)
        return;
    kl_comm *tp = kl_comm_tp(t->comm);
    for (int i = 0; i < t->zero_full.n; i++) {
        kl_persist *f = &t->zero_full.v[i];
        int T = 1;
        int64_t size = 0;
        int axis = split_axis(t, f->name, &f->type, &T, &size);
        if (axis < 0)
            continue;
        size_t bytes = (size_t)ir_type_bytes(&f->type);
        char *all = kl_xmalloc(bytes * (size_t)T + 1);
        kl_comm_all_gather(tp, f->ptr, ir_type_numel(&f->type), all, f->type.dtype, f->name);
        ir_type full;
        void *real = join_slices(&f->type, axis, T, size, all, &full);
        free(all);
        free(f->ptr);
        f->ptr = real;
        f->type = full;
    }
}

void train_tp_zero_widen(trainer *t)
{
    if (t->tp <= 1)
        return;
    for (int i = 0; i < t->zero_full.n; i++) {
        kl_persist *f = &t->zero_full.v[i];
        int T = 1;
        int64_t size = 0;
        int axis = split_axis(t, f->name, &f->type, &T, &size);
        if (axis < 0)
            continue;
        f->type.dim[axis] = size;
        free(f->ptr);
        f->ptr = kl_xcalloc(1, (size_t)ir_type_bytes(&f->type) + 1);
    }
}

void train_tp_zero_cut(trainer *t)
{
    if (t->tp <= 1)
        return;
    for (int i = 0; i < t->zero_full.n; i++) {
        kl_persist *f = &t->zero_full.v[i];
        /* f is whole here: its param's slice is the shape to cut. */
        const ir_value *pv = owner_param(t, f->name);
        int T = 1;
        int axis = pv ? kl_tp_axis(pv, &T) : -1;
        if (axis < 0)
            continue;
        ir_type st = pv->type;
        st.dtype = f->type.dtype;
        void *mine = kl_xmalloc((size_t)ir_type_bytes(&st) + 1);
        cut_slice(&st, axis, T, kl_tp_size(pv), t->tp_rank, f->ptr, mine);
        free(f->ptr);
        f->ptr = mine;
        f->type = st;
    }
}

void train_tp_free(trainer *t)
{
    free_full(t);
    free(t->tp_full.v);
}

void train_tp_print_start(const trainer *t)
{
    char *m = pass_tp_memory(t->train->g, t->world * t->tp);
    if (m)
        printf("%s\n", m);
    free(m);
}
