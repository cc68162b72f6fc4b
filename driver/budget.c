/* Memory budgets of training runs. See budget.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "compile.h"

int64_t kl_persistent_bytes(const ir_graph *g)
{
    int64_t sum = 0;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (ir_is_persistent(v))
            sum += ir_type_bytes(&v->type);
    }
    return sum;
}

kl_compiled *kl_replan_compile(const kl_replan *r, const char *const *extra, kl_mode mode)
{
    const char *kv[160];
    int n = 0;
    for (int i = 0; r->kv && r->kv[i] && n + 2 < (int)KL_ARRAY_LEN(kv); i += 2) {
        kv[n++] = r->kv[i];
        kv[n++] = r->kv[i + 1];
    }
    for (int i = 0; extra && extra[i] && n + 2 < (int)KL_ARRAY_LEN(kv); i += 2) {
        kv[n++] = extra[i];
        kv[n++] = extra[i + 1];
    }
    kv[n] = NULL;
    kl_compile_opts co = {.kv = kv, .mode = mode};
    return kl_compile_source(r->src, &co);
}

int64_t kl_replan_arena(const kl_replan *r, const char *const *extra, kl_mode mode, int64_t *persistent)
{
    kl_compiled *c = kl_replan_compile(r, extra, mode);
    if (!c)
        return -1;
    /* With pipeline stages each rank places its own stages' arena. */
    int64_t arena = c->plan->arena_bytes;
    int S = pass_pipeline_count(c->g);
    if (mode == KL_MODE_TRAIN && r->pipeline > 1 && S > 1 && S % r->pipeline == 0) {
        int64_t largest;
        kl_pipeline_rank_needs(c->plan, r->pipeline, &largest, &arena);
    }
    if (persistent)
        *persistent = kl_persistent_bytes(c->g);
    kl_compiled_free(c);
    return arena;
}

static double mb(int64_t bytes)
{
    return (double)bytes / 1e6;
}

const char *kl_limit_text(char *buf, size_t n, int64_t bytes)
{
    if (bytes >= 10000)
        snprintf(buf, n, "%.2f MB", mb(bytes));
    else
        snprintf(buf, n, "%lld byte%s", (long long)bytes, bytes == 1 ? "" : "s");
    return buf;
}

int kl_check_budget(const kl_replan *r, const kl_train_config *cfg, const kl_plan *p, int64_t limit)
{
    if (limit <= 0)
        return 0;
    const ir_graph *train = p->g;
    int64_t persistent = kl_persistent_bytes(train), arena = p->arena_bytes, lb = p->arena_lower_bound;
    if (persistent + arena + r->held <= limit)
        return 0;
    /* What would fit: the same effective batch in smaller micro-batches,
     * then recomputation of cheap activations. */
    kl_buf hint = {0};
    int64_t smallest = -1, smallest_batch = 0;
    for (int64_t b = cfg->batch / 2; b >= 1; b /= 2) {
        if (cfg->batch % b)
            continue;
        char bs[32], as[32];
        snprintf(bs, sizeof bs, "%lld", (long long)b);
        snprintf(as, sizeof as, "%lld", (long long)(cfg->accumulate * (cfg->batch / b)));
        const char *extra[] = {"batch", bs, "accumulate", as, NULL};
        int64_t pb = 0, ab = kl_replan_arena(r, extra, KL_MODE_TRAIN, &pb);
        if (ab >= 0 && (smallest < 0 || pb + ab < smallest)) {
            smallest = pb + ab;
            smallest_batch = b;
        }
        if (ab >= 0 && pb + ab <= limit) {
            kl_buf_printf(&hint, "try --batch %s --accumulate %s (%.2f MB, the same effective batch)", bs, as, mb(pb + ab));
            break;
        }
    }
    if (!cfg->recompute || strcmp(cfg->recompute, "auto")) {
        const char *extra[] = {"recompute", "auto", NULL};
        int64_t pr = 0, ar = kl_replan_arena(r, extra, KL_MODE_TRAIN, &pr);
        if (ar >= 0 && pr + ar <= limit)
            kl_buf_printf(&hint, "%s--set recompute=auto (%.2f MB: activations recomputed in backward)",
                          hint.len ? " or " : "try ", mb(pr + ar));
    }
    if (!hint.len && smallest >= 0)
        kl_buf_printf(&hint, "nothing smaller fits (batch %lld with accumulation needs %.2f MB); raise --memory-limit",
                      (long long)smallest_batch, mb(smallest));
    else if (!hint.len)
        kl_buf_puts(&hint, "nothing smaller fits; raise --memory-limit");
    char lim[40], held[96] = "";
    if (r->held)
        snprintf(held, sizeof held, " + the saved activations of the micro-batches in flight %.2f MB", mb(r->held));
    kl_error("%s: the training step needs %.2f MB (params and state %.2f MB + arena %.2f MB%s; the arena's lower "
             "bound is %.2f MB), over the memory limit of %s\n---> %s", train->name, mb(persistent + arena + r->held),
             mb(persistent), mb(arena), held, mb(lb), kl_limit_text(lim, sizeof lim, limit), hint.s);
    kl_buf_free(&hint);
    return -1;
}

int64_t kl_eval_batch_within(const kl_replan *r, int64_t count, int64_t batch, int64_t first, int64_t arena)
{
    for (int64_t d = first; d >= 1 && d >= batch / 2; d--) {
        if (count % d)
            continue;
        char ds[32];
        snprintf(ds, sizeof ds, "%lld", (long long)d);
        const char *extra[] = {"batch", ds, NULL};
        int64_t a = kl_replan_arena(r, extra, KL_MODE_EVAL, NULL);
        if (a >= 0 && a <= arena)
            return d;
    }
    return batch < count ? batch : count;
}

/* The training plan's bytes (persistent + arena) at micro-batch b with the
 * accumulation that keeps the effective batch; -1 after an error. */
static int64_t planned_at(const kl_replan *r, int64_t b, int64_t acc)
{
    char bs[32], as[32];
    snprintf(bs, sizeof bs, "%lld", (long long)b);
    snprintf(as, sizeof as, "%lld", (long long)acc);
    const char *extra[] = {"batch", bs, "accumulate", as, NULL};
    int64_t persistent = 0, arena = kl_replan_arena(r, extra, KL_MODE_TRAIN, &persistent);
    return arena < 0 ? -1 : persistent + arena;
}

/* Micro-batches sum to the effective batch exactly when b divides it;
 * else the nearest count of them. */
static int64_t accumulate_for(int64_t effective, int64_t b)
{
    int64_t acc = effective % b ? (effective + b / 2) / b : effective / b;
    return acc < 1 ? 1 : acc;
}

int kl_auto_batch(const kl_replan *r, int64_t effective, int64_t limit, kl_auto_batch_result *out)
{
    memset(out, 0, sizeof *out);
    out->next_bytes = -1;
    int64_t top = effective / 8;
    if (top < 1) {
        kl_error("--batch auto: the effective batch (%lld) is below 8; give --batch N", (long long)effective);
        return -1;
    }
    /* Plans grow with the batch: the largest candidate first (memory is
     * often plentiful), then a binary search over multiples of 8 between
     * lo (fits; 0: none known) and hi (does not fit). */
    int64_t lo = 0, hi = top, need_lo = -1, need_hi = planned_at(r, 8 * top, accumulate_for(effective, 8 * top));
    out->plans = 1;
    if (need_hi < 0)
        return -1;
    if (need_hi <= limit) {
        lo = top;
        need_lo = need_hi;
    }
    while (lo < top && hi - lo > 1) {
        int64_t mid = (lo + hi) / 2, need = planned_at(r, 8 * mid, accumulate_for(effective, 8 * mid));
        out->plans++;
        if (need < 0)
            return -1;
        if (need <= limit)
            lo = mid, need_lo = need;
        else
            hi = mid, need_hi = need;
    }
    if (lo == 0) {
        char lim[40];
        kl_error("--batch auto: even micro-batch 8 needs %.2f MB, over the memory limit of %s\n"
                 "---> raise --memory-limit, or try --set recompute=auto",
                 mb(need_hi), kl_limit_text(lim, sizeof lim, limit));
        return -1;
    }
    out->batch = 8 * lo;
    out->accumulate = accumulate_for(effective, out->batch);
    out->bytes = need_lo;
    out->next_batch = lo < top ? 8 * (lo + 1) : 0;
    if (out->next_batch)
        out->next_bytes = need_hi; /* hi = lo + 1 here */
    return 0;
}
