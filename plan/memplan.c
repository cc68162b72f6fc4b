/* memplan: liveness over the plan's steps and arena offsets by the heap
 * simulator (plan_memory). See memplan.h; in-place results are chosen in
 * inplace.c, the report and the plan checker are in memplan_report.c. */
#include <stdlib.h>
#include <string.h>

#include "codegen/cg.h"
#include "memplan.h"

static int64_t aligned(int64_t bytes)
{
    return (bytes + KL_ARENA_ALIGN - 1) / KL_ARENA_ALIGN * KL_ARENA_ALIGN;
}

/* ---- liveness ---- */

static void touch(kl_plan *p, int b, int step)
{
    kl_buffer *x = &p->buffers.v[plan_real_buffer(p, b)];
    if (x->region != KL_REGION_ARENA)
        return;
    if (x->first < 0 || step < x->first)
        x->first = step;
    if (step > x->last)
        x->last = step;
}

void plan_liveness(kl_plan *p) { plan_liveness_of(p, NULL, NULL, 0); }

void plan_liveness_of(kl_plan *p, const bool *steps, const kl_touch *extra, int nextra)
{
    for (int b = 0; b < p->buffers.n; b++)
        p->buffers.v[b].first = p->buffers.v[b].last = -1;
    for (int i = 0; i < p->steps.n; i++) {
        if (steps && !steps[i])
            continue;
        int bufs[IR_KERNEL_MAX_BUFS + 8];
        int n = plan_step_buffers(&p->steps.v[i], bufs);
        for (int k = 0; k < n; k++)
            touch(p, bufs[k], i);
    }
    for (int k = 0; k < nextra; k++)
        touch(p, extra[k].buf, extra[k].step);
    int end = p->steps.n > 0 ? p->steps.n - 1 : 0;
    for (int b = 0; b < p->buffers.n; b++) {
        if (!p->buffers.v[b].pinned)
            continue;
        kl_buffer *x = &p->buffers.v[plan_real_buffer(p, b)];
        if (x->region == KL_REGION_ARENA) {
            x->first = 0;
            x->last = end;
        }
    }
    for (int b = 0; b < p->buffers.n; b++) {
        kl_buffer *x = &p->buffers.v[b];
        if (x->region == KL_REGION_VIEW) {
            const kl_buffer *r = &p->buffers.v[plan_real_buffer(p, b)];
            x->first = r->region == KL_REGION_ARENA ? r->first : -1;
            x->last = r->region == KL_REGION_ARENA ? r->last : -1;
        }
    }
}

/* ---- offsets ---- */

typedef struct item {
    int buf;
    int64_t size;
    int first, last;
} item;

/* Places items in the given order, each into the smallest free gap among
 * the items already placed whose live ranges meet its own (the lowest such
 * gap on ties), or above them all. Returns the arena size.
 *
 * The placed items are kept sorted by offset (by_offset), so one walk
 * upwards over those live at the same time finds the gaps, without
 * sorting them again for every item; an exact fit ends the walk (no gap
 * is smaller, none lower). */
static int64_t place(const item *items, const int *order, int n, int64_t *offs, int *by_offset)
{
    int64_t top = 0;
    for (int oi = 0; oi < n; oi++) {
        const item *it = &items[order[oi]];
        int64_t cursor = 0, best = -1, best_gap = INT64_MAX;
        for (int j = 0; j < oi && best_gap != it->size; j++) {
            const item *o = &items[by_offset[j]];
            if (o->first > it->last || it->first > o->last)
                continue;
            int64_t start = offs[by_offset[j]];
            int64_t gap = start - cursor;
            if (gap >= it->size && gap < best_gap) {
                best_gap = gap;
                best = cursor;
            }
            if (start + o->size > cursor)
                cursor = start + o->size;
        }
        if (best < 0)
            best = cursor;
        offs[order[oi]] = best;
        /* Insert after the placed items at offsets up to best. */
        int lo = 0, hi = oi;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (offs[by_offset[mid]] <= best)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(&by_offset[lo + 1], &by_offset[lo], sizeof *by_offset * (size_t)(oi - lo));
        by_offset[lo] = order[oi];
        if (best + it->size > top)
            top = best + it->size;
    }
    return top;
}

typedef struct sort_key {
    int64_t k1, k2, k3;
    int idx;
} sort_key;

static int by_keys(const void *a, const void *b)
{
    const sort_key *x = a, *y = b;
    if (x->k1 != y->k1)
        return x->k1 > y->k1 ? -1 : 1;
    if (x->k2 != y->k2)
        return x->k2 > y->k2 ? -1 : 1;
    if (x->k3 != y->k3)
        return x->k3 > y->k3 ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

enum { ORDER_SIZE, ORDER_LENGTH, ORDER_START, ORDER_AREA, ORDER_END, ORDER_FIXED };
#define MEMPLAN_PERTURBED 24 /* orderings by size with random noise, after the fixed ones */

/* Ordering number o of the items (descending keys). */
static void ordering(const item *items, int n, int o, sort_key *keys, int *order)
{
    for (int i = 0; i < n; i++) {
        const item *it = &items[i];
        int64_t len = it->last - it->first + 1;
        sort_key k = {0, 0, 0, i};
        switch (o) {
        case ORDER_SIZE: k = (sort_key){it->size, -it->first, len, i}; break;
        case ORDER_LENGTH: k = (sort_key){len, it->size, -it->first, i}; break;
        case ORDER_START: k = (sort_key){-it->first, it->size, len, i}; break;
        case ORDER_AREA: k = (sort_key){it->size / KL_ARENA_ALIGN * len, it->size, -it->first, i}; break;
        case ORDER_END: k = (sort_key){it->last, it->size, len, i}; break;
        default: {
            /* Size within a random factor in [1/2, 1]: neighbours in size
             * trade places, large buffers stay first. */
            uint64_t r = mix((uint64_t)o * 0x10001ull + (uint64_t)i);
            k = (sort_key){(int64_t)((double)it->size * (0.5 + 0.5 * (double)(r >> 11) / 9007199254740992.0)), it->size, -it->first, i};
        }
        }
        keys[i] = k;
    }
    qsort(keys, (size_t)n, sizeof *keys, by_keys);
    for (int i = 0; i < n; i++)
        order[i] = keys[i].idx;
}

/* The most aligned bytes live at one step, over the real arena buffers. */
static int64_t lower_bound(const kl_plan *p)
{
    int ns = p->steps.n > 0 ? p->steps.n : 1;
    int64_t *delta = kl_xcalloc((size_t)ns + 1, sizeof *delta);
    for (int b = 0; b < p->buffers.n; b++) {
        const kl_buffer *x = &p->buffers.v[b];
        if (x->region != KL_REGION_ARENA || x->first < 0)
            continue;
        delta[x->first] += aligned(x->bytes);
        delta[x->last + 1] -= aligned(x->bytes);
    }
    int64_t live = 0, most = 0;
    for (int i = 0; i < ns; i++) {
        live += delta[i];
        if (live > most)
            most = live;
    }
    free(delta);
    return most;
}

static int64_t unplanned_bytes(const kl_plan *p)
{
    int64_t sum = 0;
    for (int b = 0; b < p->buffers.n; b++) {
        const kl_buffer *x = &p->buffers.v[b];
        if (x->region == KL_REGION_ARENA || (x->region == KL_REGION_VIEW && x->inplace))
            sum += aligned(x->bytes);
    }
    return sum;
}

void plan_assign_offsets(kl_plan *p)
{
    int n = 0;
    item *items = kl_xmalloc(sizeof *items * (size_t)(p->buffers.n + 1));
    for (int b = 0; b < p->buffers.n; b++) {
        kl_buffer *x = &p->buffers.v[b];
        if (x->region != KL_REGION_ARENA)
            continue;
        x->offset = 0; /* buffers no step touches: never dereferenced */
        if (x->first >= 0)
            items[n++] = (item){b, aligned(x->bytes), x->first, x->last};
    }
    int64_t *offs = kl_xmalloc(sizeof *offs * (size_t)(n + 1)), *best_offs = kl_xmalloc(sizeof *offs * (size_t)(n + 1));
    int *order = kl_xmalloc(sizeof *order * (size_t)(n + 1)), *by_offset = kl_xmalloc(sizeof *by_offset * (size_t)(n + 1));
    sort_key *keys = kl_xmalloc(sizeof *keys * (size_t)(n + 1));
    int64_t lb = lower_bound(p), best = -1;
    /* Each ordering costs about n^2 steps: fewer perturbed ones for plans
     * with many buffers. */
    int perturbed = MEMPLAN_PERTURBED;
    while (perturbed > 0 && (int64_t)n * n * (ORDER_FIXED + perturbed) > (int64_t)50000000)
        perturbed /= 2;
    for (int o = 0; o < ORDER_FIXED + perturbed && best != lb; o++) {
        ordering(items, n, o, keys, order);
        int64_t size = place(items, order, n, offs, by_offset);
        if (best < 0 || size < best) {
            best = size;
            memcpy(best_offs, offs, sizeof *offs * (size_t)n);
        }
    }
    for (int i = 0; i < n; i++)
        p->buffers.v[items[i].buf].offset = best_offs[i];
    p->arena_bytes = best > 0 ? best : 0;
    p->arena_lower_bound = lb;
    p->arena_unplanned = unplanned_bytes(p);
    free(items);
    free(offs);
    free(best_offs);
    free(order);
    free(by_offset);
    free(keys);
}

void plan_assign_unplanned(kl_plan *p)
{
    int64_t off = 0;
    for (int b = 0; b < p->buffers.n; b++) {
        kl_buffer *x = &p->buffers.v[b];
        if (x->region != KL_REGION_ARENA)
            continue;
        x->offset = off;
        off += aligned(x->bytes);
    }
    p->arena_bytes = off;
    p->arena_lower_bound = lower_bound(p);
    p->arena_unplanned = unplanned_bytes(p);
}

int plan_data_of(const kl_plan *p, int b)
{
    while (p->buffers.v[b].region == KL_REGION_VIEW && !p->buffers.v[b].inplace)
        b = p->buffers.v[b].view_of;
    return b;
}

void plan_memory(kl_plan *p) { plan_memory_of(p, NULL, NULL, 0); }

void plan_memory_of(kl_plan *p, const bool *steps, const kl_touch *extra, int nextra)
{
    plan_liveness_of(p, steps, extra, nextra);
    if (p->planned)
        plan_assign_offsets(p);
    else
        plan_assign_unplanned(p);
    plan_mark_gemm_reuse(p);
}
