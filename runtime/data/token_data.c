/* Token files as a data set: windows of context + 1 tokens, given to the
 * model as two fields, "tokens" and "targets" (the same window shifted by
 * one). The windows are drawn by runtime/data/tokens.c from (seed, index), so
 * the loader's order, workers and prefetch never change what a step
 * sees, and a resumed run that knows its step draws the same windows. */
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "tokens.h"
#include "base/support.h"

static void token_field(kl_field *f, const char *name, int64_t context)
{
    f->name = kl_xstrdup(name);
    f->type.dtype = IR_I32;
    f->type.rank = 1;
    f->type.shape[0] = context;
    f->bytes = f->decoded_bytes = context * (int64_t)sizeof(int32_t);
    f->decoded = f->type;
}

int kl_tokens_dataset(const char *path, int64_t context, bool train, int64_t limit, kl_dataset *out)
{
    memset(out, 0, sizeof *out);
    kl_tokens *t = kl_xcalloc(1, sizeof *t);
    if (kl_tokens_open(path, t)) {
        free(t);
        return -1;
    }
    if (kl_tokens_check_context(t, context)) {
        kl_tokens_close(t);
        free(t);
        return -1;
    }
    int64_t windows = kl_tokens_eval_windows(t, context);
    out->name = kl_xstrdup(path);
    out->tokens = t;
    out->context = context;
    out->windows = windows;
    out->count = train || limit <= 0 || limit > windows ? windows : limit;
    out->nfields = 2;
    token_field(&out->field[0], "tokens", context);
    token_field(&out->field[1], "targets", context);
    return 0;
}

int kl_tokens_sample(const kl_dataset *d, bool train, uint64_t seed, int64_t epoch, int64_t id, int32_t *tokens,
                     int32_t *targets, char *why, size_t why_len)
{
    const kl_tokens *t = d->tokens;
    int64_t T = d->context;
    int64_t start = train ? kl_tokens_window_start(t, T, seed, epoch * d->count + id)
                          : (int64_t)((__int128)id * d->windows / d->count) * T;
    int32_t small[1024], *w = T + 1 <= 1024 ? small : kl_xmalloc((size_t)(T + 1) * sizeof *w);
    int rc = kl_tokens_read(t, start, T + 1, w, why, why_len);
    if (!rc) {
        if (tokens)
            memcpy(tokens, w, (size_t)T * sizeof *w);
        if (targets)
            memcpy(targets, w + 1, (size_t)T * sizeof *w);
    }
    if (w != small)
        free(w);
    return rc;
}
