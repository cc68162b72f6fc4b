/* memplan: the report, the timeline and the plan checker. See memplan.h. */
#include <stdlib.h>
#include <string.h>

#include "memplan.h"

static int64_t aligned(int64_t bytes)
{
    return (bytes + KL_ARENA_ALIGN - 1) / KL_ARENA_ALIGN * KL_ARENA_ALIGN;
}

static double mb(int64_t bytes)
{
    return (double)bytes / 1e6;
}

char *plan_buffer_name(const kl_plan *p, int b)
{
    const kl_buffer *x = &p->buffers.v[b];
    if (x->value >= 0)
        return kl_xasprintf("%%%s", ir_val(p->g, x->value)->name);
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *s = &p->steps.v[i];
        bool uses = s->kind == KL_STEP_GEMM ? (s->gemm.a == b || s->gemm.b == b || s->gemm.c == b) : false;
        for (int k = 0; s->kind != KL_STEP_GEMM && k < s->nargs && !uses; k++)
            uses = s->args[k] == b;
        if (uses) {
            /* The op the scratch serves (a convolution's im2col column). */
            const ir_node *n = ir_nd(p->g, s->node);
            kl_buf name = {0};
            kl_buf_printf(&name, "scratch %d (%s", b, ir_op_name(n->op));
            if (n->loc.line > 0)
                kl_buf_printf(&name, " @%d:%d", n->loc.line, n->loc.col);
            if (n->scope)
                kl_buf_printf(&name, " in %s", n->scope);
            kl_buf_putc(&name, ')');
            return kl_buf_take(&name);
        }
    }
    return kl_xasprintf("scratch %d", b);
}

char *plan_summary(const kl_plan *p)
{
    double ratio = p->arena_lower_bound > 0 ? (double)p->arena_bytes / (double)p->arena_lower_bound : 1.0;
    return kl_xasprintf("arena %.2f MB (lower bound %.2f MB, %.3fx; unplanned %.2f MB%s)", mb(p->arena_bytes),
                        mb(p->arena_lower_bound), ratio, mb(p->arena_unplanned), p->planned ? "" : "; planning off");
}

typedef struct ranked {
    int buf;
    int64_t bytes;
} ranked;

static int by_bytes(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->buf - y->buf;
}

/* The in-place results and views whose memory is b's, as " = %a = %b". */
static void sharers(kl_buf *out, const kl_plan *p, int b)
{
    for (int v = 0; v < p->buffers.n; v++) {
        const kl_buffer *x = &p->buffers.v[v];
        if (v == b || x->region != KL_REGION_VIEW || plan_real_buffer(p, v) != b)
            continue;
        char *name = plan_buffer_name(p, v);
        kl_buf_printf(out, " = %s%s", name, x->inplace ? " (in place)" : "");
        free(name);
    }
}

char *plan_report(const kl_plan *p, int top, const char *prefix)
{
    kl_buf b = {0};
    char *sum = plan_summary(p);
    kl_buf_printf(&b, "%smemplan: %s\n", prefix, sum);
    free(sum);
    int arena = 0, inplace = 0, views = 0;
    ranked *r = kl_xmalloc(sizeof *r * (size_t)(p->buffers.n + 1));
    for (int i = 0; i < p->buffers.n; i++) {
        const kl_buffer *x = &p->buffers.v[i];
        if (x->region == KL_REGION_ARENA) {
            r[arena++] = (ranked){i, x->bytes};
        } else if (x->region == KL_REGION_VIEW) {
            if (x->inplace)
                inplace++;
            else
                views++;
        }
    }
    kl_buf_printf(&b, "%s  %d buffer%s in the arena, %d result%s in place, %d view%s; %d steps; offsets aligned to %d bytes\n",
                  prefix, arena, arena == 1 ? "" : "s", inplace, inplace == 1 ? "" : "s", views, views == 1 ? "" : "s",
                  p->steps.n, KL_ARENA_ALIGN);
    qsort(r, (size_t)arena, sizeof *r, by_bytes);
    if (top > arena)
        top = arena;
    if (top > 0)
        kl_buf_printf(&b, "%s  %-12s %-12s %-11s %s\n", prefix, "bytes", "offset", "live steps", "largest buffers");
    for (int i = 0; i < top; i++) {
        const kl_buffer *x = &p->buffers.v[r[i].buf];
        char live[32];
        if (x->first < 0)
            snprintf(live, sizeof live, "unused");
        else
            snprintf(live, sizeof live, "%d..%d", x->first, x->last);
        char *name = plan_buffer_name(p, r[i].buf);
        kl_buf_printf(&b, "%s  %-12lld %-12lld %-11s %s%s", prefix, (long long)x->bytes, (long long)x->offset, live, name,
                      x->pinned ? " (pinned)" : "");
        free(name);
        sharers(&b, p, r[i].buf);
        kl_buf_putc(&b, '\n');
    }
    free(r);
    return kl_buf_take(&b);
}

typedef struct row {
    int buf;
    int64_t offset;
    int first;
} row;

static int by_offset(const void *a, const void *b)
{
    const row *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return x->buf - y->buf;
}

char *plan_timeline(const kl_plan *p)
{
    kl_buf b = {0};
    int steps = p->steps.n > 0 ? p->steps.n : 1;
    int width = steps < 96 ? steps : 96;
    char *sum = plan_summary(p);
    kl_buf_printf(&b, "# %s: %s\n", p->g->name, sum);
    free(sum);
    kl_buf_printf(&b, "# one row per arena buffer by offset; a column is %s step%s (%d steps); rows whose byte\n"
                      "# ranges meet share memory at different times\n",
                  steps > width ? "about" : "one", steps > width ? "s" : "", steps);
    row *rows = kl_xmalloc(sizeof *rows * (size_t)(p->buffers.n + 1));
    int n = 0;
    for (int i = 0; i < p->buffers.n; i++) {
        const kl_buffer *x = &p->buffers.v[i];
        if (x->region == KL_REGION_ARENA && x->first >= 0)
            rows[n++] = (row){i, x->offset, x->first};
    }
    qsort(rows, (size_t)n, sizeof *rows, by_offset);
    kl_buf_printf(&b, "%12s %12s %9s  %-*s  %s\n", "offset", "end", "live", width, "steps", "buffer");
    char *bar = kl_xmalloc((size_t)width + 1);
    for (int i = 0; i < n; i++) {
        const kl_buffer *x = &p->buffers.v[rows[i].buf];
        for (int c = 0; c < width; c++) {
            /* Column c covers steps [c * steps / width, (c + 1) * steps / width). */
            int lo = (int)((int64_t)c * steps / width), hi = (int)((int64_t)(c + 1) * steps / width) - 1;
            bar[c] = x->first <= hi && lo <= x->last ? '#' : '.';
        }
        bar[width] = 0;
        char live[32];
        snprintf(live, sizeof live, "%d..%d", x->first, x->last);
        char *name = plan_buffer_name(p, rows[i].buf);
        kl_buf_printf(&b, "%12lld %12lld %9s  %s  %s", (long long)x->offset, (long long)(x->offset + aligned(x->bytes)),
                      live, bar, name);
        free(name);
        sharers(&b, p, rows[i].buf);
        kl_buf_putc(&b, '\n');
    }
    free(bar);
    free(rows);
    return kl_buf_take(&b);
}

/* ---- the plan checker ---- */

typedef struct checker {
    const kl_plan *p;
    kl_buf *why;
    int problems;
    int *owner;   /* per KL_ARENA_ALIGN bytes of the arena: the data there */
    bool *written; /* per buffer (data identity): written in this run */
} checker;

static void problem(checker *c, const char *fmt, ...) KL_PRINTF(2, 3);
static void problem(checker *c, const char *fmt, ...)
{
    if (c->why && c->problems < 8) {
        va_list ap;
        va_start(ap, fmt);
        kl_buf_vprintf(c->why, fmt, ap);
        va_end(ap);
        kl_buf_putc(c->why, '\n');
    }
    c->problems++;
}

static bool in_arena(const kl_plan *p, int b)
{
    return p->buffers.v[plan_real_buffer(p, b)].region == KL_REGION_ARENA;
}

/* The cells of b's memory, within the arena (the checks before the
 * simulation report anything outside it). */
static void cells(const kl_plan *p, int b, int64_t *lo, int64_t *hi)
{
    const kl_buffer *r = &p->buffers.v[plan_real_buffer(p, b)];
    int64_t n = p->arena_bytes / KL_ARENA_ALIGN;
    *lo = r->offset / KL_ARENA_ALIGN;
    *hi = (r->offset + aligned(p->buffers.v[b].bytes)) / KL_ARENA_ALIGN;
    *lo = *lo < 0 ? 0 : *lo > n ? n : *lo;
    *hi = *hi < *lo ? *lo : *hi > n ? n : *hi;
}

static void step_name(const kl_plan *p, int i, char *out, size_t n)
{
    char *label = plan_step_label(p, &p->steps.v[i]);
    snprintf(out, n, "step %d (%s)", i, label);
    free(label);
}

static void check_read(checker *c, int step, int b)
{
    const kl_plan *p = c->p;
    if (!in_arena(p, b))
        return;
    int d = plan_data_of(p, b);
    int64_t lo, hi;
    cells(p, b, &lo, &hi);
    const char *what = NULL;
    int other = -1;
    if (!c->written[d]) {
        what = "before any write of it in this run";
    } else {
        for (int64_t k = lo; k < hi && !what; k++)
            if (c->owner[k] != d) {
                what = "after another buffer overwrote it";
                other = c->owner[k];
            }
    }
    if (!what)
        return;
    char sn[256];
    step_name(p, step, sn, sizeof sn);
    char *name = plan_buffer_name(p, b);
    char *oname = other >= 0 ? plan_buffer_name(p, other) : NULL;
    problem(c, "%s reads %s %s%s%s", sn, name, what, oname ? ": " : "", oname ? oname : "");
    free(name);
    free(oname);
}

static void write_cells(checker *c, int b)
{
    const kl_plan *p = c->p;
    if (!in_arena(p, b))
        return;
    int d = plan_data_of(p, b);
    int64_t lo, hi;
    cells(p, b, &lo, &hi);
    for (int64_t k = lo; k < hi; k++)
        c->owner[k] = d;
    c->written[d] = true;
}

/* A library call reads its operands while it writes its results (a GEMM
 * step, with its epilogue on the GPU): the memory of result w must not
 * be that of operand r. */
static void check_apart(checker *c, int step, int w, int r)
{
    if (w < 0 || r < 0 || !in_arena(c->p, w) || !in_arena(c->p, r))
        return;
    int64_t wl, wh, rl, rh;
    cells(c->p, w, &wl, &wh);
    cells(c->p, r, &rl, &rh);
    if (wl >= rh || rl >= wh)
        return;
    char sn[256];
    step_name(c->p, step, sn, sizeof sn);
    char *wn = plan_buffer_name(c->p, w), *rn = plan_buffer_name(c->p, r);
    problem(c, "%s writes %s over %s, which it reads at the same time", sn, wn, rn);
    free(wn);
    free(rn);
}

/* GEMM step i with its epilogue done by the library (lt: the CUDA
 * backend's cuBLASLt epilogues): it reads A, B and the bias or aux it
 * takes and writes D (not C) and the aux or bias gradient it makes, all
 * at once; the kernel step after it does not run. */
static void simulate_lt_gemm(checker *c, int i)
{
    const kl_gemm *g = &c->p->steps.v[i].gemm;
    const kl_gemm_epilogue *e = &g->epi;
    bool bias_in = e->kind == KL_LT_BIAS || e->kind == KL_LT_RELU_BIAS || e->kind == KL_LT_GELU_BIAS ||
                   e->kind == KL_LT_GELU_AUX_BIAS;
    bool aux_in = e->kind == KL_LT_DGELU || e->kind == KL_LT_DGELU_BGRAD;
    int reads[4] = {g->a, g->b, bias_in ? e->bias : -1, aux_in ? e->aux : -1};
    int writes[3] = {e->d, aux_in ? -1 : e->aux, bias_in ? -1 : e->bias};
    for (int r = 0; r < 4; r++)
        if (reads[r] >= 0)
            check_read(c, i, reads[r]);
    for (int w = 0; w < 3; w++)
        for (int r = 0; r < 4; r++)
            check_apart(c, i, writes[w], reads[r]);
    for (int w = 0; w < 3; w++)
        if (writes[w] >= 0)
            write_cells(c, writes[w]);
}

/* One run of the steps whose phase is in mask, after the start-up steps
 * (which the runtime runs before the first run; that their results stay
 * intact through every run is checked below: they are pinned). */
static void simulate(checker *c, unsigned mask, bool lt)
{
    const kl_plan *p = c->p;
    mask |= 1u << IR_PHASE_STARTUP;
    memset(c->written, 0, sizeof *c->written * (size_t)p->buffers.n);
    /* The runtime writes the inputs before the run. */
    for (int b = 0; b < p->buffers.n; b++)
        if (p->buffers.v[b].pinned && p->buffers.v[b].value >= 0 && ir_val(p->g, p->buffers.v[b].value)->kind == IR_VAL_INPUT)
            write_cells(c, b);
    for (int i = 0; i < p->steps.n; i++) {
        const kl_step *s = &p->steps.v[i];
        if (!(mask & (1u << s->phase)))
            continue;
        if (lt && s->kind == KL_STEP_GEMM && s->gemm.epi.kind != KL_LT_NONE && i + 1 < p->steps.n &&
            p->steps.v[i + 1].lt_covered) {
            simulate_lt_gemm(c, i);
            i++;
            continue;
        }
        if (s->kind == KL_STEP_GEMM) {
            check_read(c, i, s->gemm.a);
            check_read(c, i, s->gemm.b);
            if (s->gemm.beta != 0)
                check_read(c, i, s->gemm.c);
            write_cells(c, s->gemm.c);
            continue;
        }
        for (int k = 0; k < s->nargs; k++)
            if ((s->rw[k] & KL_ARG_READ) && !(s->rw[k] & KL_ARG_WRITE_FIRST))
                check_read(c, i, s->args[k]);
        for (int k = 0; k < s->nargs; k++)
            if (s->rw[k] & KL_ARG_WRITE)
                write_cells(c, s->args[k]);
    }
    /* What the runtime reads after the run (and the inputs it wrote) is
     * intact. */
    for (int b = 0; b < p->buffers.n; b++) {
        if (!p->buffers.v[b].pinned || !in_arena(p, b) || !c->written[plan_data_of(p, b)])
            continue;
        int d = plan_data_of(p, b);
        int64_t lo, hi;
        cells(p, b, &lo, &hi);
        for (int64_t k = lo; k < hi; k++) {
            if (c->owner[k] != d) {
                char *name = plan_buffer_name(p, b), *oname = plan_buffer_name(p, c->owner[k] >= 0 ? c->owner[k] : b);
                problem(c, "%s, which the runtime reads after a run, is overwritten by %s", name, oname);
                free(name);
                free(oname);
                break;
            }
        }
    }
}

int plan_check(const kl_plan *p, int micro_batches, kl_buf *why)
{
    checker c = {.p = p, .why = why};
    int nb = p->buffers.n;
    for (int b = 0; b < nb; b++) {
        const kl_buffer *x = &p->buffers.v[b];
        if (x->region != KL_REGION_ARENA || x->first < 0)
            continue;
        char *name = NULL;
        if (x->offset % KL_ARENA_ALIGN)
            problem(&c, "%s: offset %lld is not a multiple of %d", name = plan_buffer_name(p, b), (long long)x->offset,
                    KL_ARENA_ALIGN);
        else if (x->offset < 0 || x->offset + x->bytes > p->arena_bytes)
            problem(&c, "%s: bytes [%lld, %lld) outside the arena of %lld", name = plan_buffer_name(p, b),
                    (long long)x->offset, (long long)(x->offset + x->bytes), (long long)p->arena_bytes);
        free(name);
    }
    /* A view or in-place result fits in the memory it uses. */
    for (int b = 0; b < nb; b++) {
        const kl_buffer *x = &p->buffers.v[b];
        const kl_buffer *r = &p->buffers.v[plan_real_buffer(p, b)];
        if (x->region == KL_REGION_VIEW && r->region == KL_REGION_ARENA && x->bytes > r->bytes) {
            char *name = plan_buffer_name(p, b);
            problem(&c, "%s (%lld bytes) is larger than the memory it shares (%lld bytes)", name, (long long)x->bytes,
                    (long long)r->bytes);
            free(name);
        }
    }
    /* Buffers live at the same time never overlap in memory. */
    for (int a = 0; a < nb; a++) {
        const kl_buffer *x = &p->buffers.v[a];
        if (x->region != KL_REGION_ARENA || x->first < 0)
            continue;
        for (int b = a + 1; b < nb; b++) {
            const kl_buffer *y = &p->buffers.v[b];
            if (y->region != KL_REGION_ARENA || y->first < 0 || x->last < y->first || y->last < x->first)
                continue;
            if (x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes) {
                char *na = plan_buffer_name(p, a), *nb2 = plan_buffer_name(p, b);
                problem(&c, "%s (steps %d..%d) and %s (steps %d..%d) overlap in memory", na, x->first, x->last, nb2,
                        y->first, y->last);
                free(na);
                free(nb2);
            }
        }
    }
    if (c.problems)
        return c.problems;
    /* Every read follows a write of the same data in the same run, over
     * micro-batch runs as the executable does them. */
    c.owner = kl_xmalloc(sizeof *c.owner * (size_t)(p->arena_bytes / KL_ARENA_ALIGN + 1));
    for (int64_t k = 0; k <= p->arena_bytes / KL_ARENA_ALIGN; k++)
        c.owner[k] = -1;
    c.written = kl_xcalloc((size_t)nb + 1, sizeof *c.written);
    unsigned fb = (1u << IR_PHASE_FORWARD) | (1u << IR_PHASE_BACKWARD);
    /* A run writes the same cells every time, so the state after two
     * forward-backward runs is the state after one: runs 2..n-2 repeat
     * run 1, and three runs (fb, fb, fb+update) check any count. */
    int runs = micro_batches > 3 ? 3 : micro_batches > 1 ? micro_batches : 1;
    for (int m = 0; m < runs; m++)
        simulate(&c, m == runs - 1 ? fb | (1u << IR_PHASE_UPDATE) : fb, false);
    /* The same plan as the CUDA backend runs it with cuBLASLt epilogues:
     * their results written in the GEMM step, the kernel steps they
     * cover skipped. */
    bool epilogues = false;
    for (int i = 0; i < p->steps.n && !epilogues; i++)
        epilogues = p->steps.v[i].kind == KL_STEP_GEMM && p->steps.v[i].gemm.epi.kind != KL_LT_NONE;
    for (int m = 0; epilogues && m < runs; m++)
        simulate(&c, m == runs - 1 ? fb | (1u << IR_PHASE_UPDATE) : fb, true);
    free(c.owner);
    free(c.written);
    return c.problems;
}
