/* The data side of a training run: loading the training and test splits
 * (idx, synthetic, shards, tokens), binding the model's inputs to the data
 * set's fields once at start (with the checks that they match; the loader
 * then writes each field in its input's dtype), preparing shards and
 * feeding a batch into an exec (one copy per input). */
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "runtime/data/tokens.h"

/* ---- the model's inputs ---- */

/* The first cross_entropy's class count, or 0. */
static int ce_classes(const ir_graph *g)
{
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->op == IR_OP_CROSS_ENTROPY && !n->dead)
            return (int)ir_val(g, n->in.v[0])->type.dim[1];
    }
    return 0;
}

/* Binding k (value[k] reads field[k]): the loader writes the field in
 * the input's dtype. Two inputs reading one field as different dtypes are
 * refused (the field is written once per batch). */
static int bind_field(const ir_graph *g, kl_dataset *d, const bindings *b, int k, const char *model)
{
    const ir_value *v = ir_val(g, b->value[k]);
    int f = b->field[k];
    const kl_field *fd = &d->field[f];
    if (kl_dataset_bind_field(d, f, v->type.dtype) == 0)
        return 0;
    const char *other = "another input";
    for (int j = 0; j < k; j++)
        if (b->field[j] == f)
            other = ir_val(g, b->value[j])->name;
    kl_error("%s: inputs '%s' and '%s' both read field '%s' of %s, as %s and as %s (the loader writes a field "
             "in one dtype)\n---> read it into one input and convert in the model (f32(x), i32(x))",
             model, other, v->name, fd->name, d->name, ir_dtype_name(fd->feed), ir_dtype_name(v->type.dtype));
    return -1;
}

/* idx and synthetic: the samples' input (any shape of as many values)
 * and the labels' input (i32[batch] or i64[batch]). */
static int bind_image_label(const ir_graph *g, kl_dataset *d, bindings *b, const char *model)
{
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_INPUT)
            continue;
        const ir_type *t = &v->type;
        int64_t per = t->rank ? ir_type_numel(t) / t->dim[0] : 1;
        if (t->rank == 1 && (t->dtype == IR_I32 || t->dtype == IR_I64) && b->labels < 0)
            b->labels = v->id;
        else if (per == d->sample_bytes && (t->dtype == IR_U8 || ir_dtype_is_float(t->dtype)) && b->features < 0)
            b->features = v->id;
        else {
            char *ts = ir_type_str(t);
            kl_error("%s: input '%s' (%s) matches nothing the dataset %s provides (%lld bytes per sample and a label)",
                     model, v->name, ts, d->name, (long long)d->sample_bytes);
            free(ts);
            return -1;
        }
    }
    /* A model without a label input (an autoencoder, a language model
     * whose targets are its own shifted inputs) gets the samples only. */
    if (b->features < 0) {
        kl_error("%s: the model needs an input for the samples (%lld values each); the one for the labels "
                 "(i32[batch]) is optional",
                 model, (long long)d->sample_bytes);
        return -1;
    }
    b->n = b->labels >= 0 ? 2 : 1;
    b->value[0] = b->features;
    b->field[0] = 0;
    b->value[1] = b->labels;
    b->field[1] = 1;
    for (int k = 0; k < b->n; k++)
        if (bind_field(g, d, b, k, model))
            return -1;
    return 0;
}

/* The field an input named name reads: the field of that name, or
 * name.EXT (WebDataset's "input.npy"), or by the usual names: image <-
 * png, jpg or jpeg; label <- cls. -1 when none. */
static int field_for(const kl_dataset *d, const char *name)
{
    int f = kl_dataset_field(d, name);
    if (f >= 0)
        return f;
    size_t n = strlen(name);
    for (int i = 0; i < d->nfields; i++)
        if (!strncmp(d->field[i].name, name, n) && d->field[i].name[n] == '.')
            return i;
    static const char *const aliases[][2] = {{"image", "png"}, {"image", "jpg"}, {"image", "jpeg"}, {"label", "cls"}};
    for (size_t a = 0; a < KL_ARRAY_LEN(aliases); a++)
        if (!strcmp(name, aliases[a][0]) && (f = kl_dataset_field(d, aliases[a][1])) >= 0)
            return f;
    return -1;
}

/* Shards: each input reads the field of its name, of the same shape per
 * sample, of a dtype that converts (u8 to any float, integers to i32 or
 * i64, floats to floats). */
static int bind_fields(const ir_graph *g, kl_dataset *d, bindings *b, const char *model)
{
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_INPUT)
            continue;
        const ir_type *t = &v->type;
        char *ts = ir_type_str(t);
        int f = field_for(d, v->name);
        if (f < 0) {
            kl_buf fl = {0};
            for (int k = 0; k < d->nfields; k++) {
                char ft[96];
                kl_field_type_str(&d->field[k].type, ft, sizeof ft);
                kl_buf_printf(&fl, "%s%s %s", k ? ", " : "", d->field[k].name, ft);
            }
            kl_error("%s: input '%s' (%s) names no field of the samples in %s (fields: %s)\n"
                     "---> name the input after a field (%s)",
                     model, v->name, ts, d->name, fl.s ? fl.s : "none",
                     d->tokens ? "tokens reads window[0:context], targets window[1:context+1]"
                               : "image reads png, jpg or jpeg; label reads cls");
            kl_buf_free(&fl);
            free(ts);
            return -1;
        }
        kl_field *fd = &d->field[f];
        char ft[96];
        kl_field_type_str(&fd->type, ft, sizeof ft);
        bool shape_ok = t->rank == fd->type.rank + 1;
        for (int k = 0; shape_ok && k < fd->type.rank; k++)
            shape_ok = t->dim[k + 1] == fd->type.shape[k];
        ir_dtype fdt = fd->type.dtype;
        bool int_field = fdt == IR_U8 || fdt == IR_I32 || fdt == IR_I64;
        bool dtype_ok = t->dtype == fdt || (ir_dtype_is_float(t->dtype) && (fdt == IR_U8 || ir_dtype_is_float(fdt))) ||
                        ((t->dtype == IR_I32 || t->dtype == IR_I64) && int_field);
        if (!shape_ok && d->tokens && t->rank == 2) {
            kl_error("%s: input '%s' is %s, but the token data's context is %lld (tokens(..., context = %lld))\n"
                     "---> give tokens(...) the context of the model's inputs, or the inputs [batch, %lld]",
                     model, v->name, ts, (long long)d->context, (long long)d->context, (long long)d->context);
            free(ts);
            return -1;
        }
        if (!shape_ok || !dtype_ok) {
            kl_error("%s: input '%s' is %s, but field '%s' of %s is %s per sample (%s)", model, v->name, ts, fd->name,
                     d->name, ft, !shape_ok ? "the shapes differ" : "the dtype does not convert");
            free(ts);
            return -1;
        }
        /* Bytes into a float input are their values, 0 to 255: say so
         * once per data set (a normalize augmentation would scale them). */
        if (fdt == IR_U8 && ir_dtype_is_float(t->dtype) && !fd->used)
            kl_fprintf_escaped(
                stderr,
                "kiln: note: input '%s' (%s) reads field '%s' of %s (%s) as its byte values 0 to 255, unscaled\n"
                "---> scale in the model (f32(x) / 255), or normalize the field (shards(..., augment = "
                "[normalize(mean = ..., std = ...)]))\n",
                v->name, ts, fd->name, d->name, ft);
        free(ts);
        if (b->n == KL_MAX_FIELDS) {
            kl_error("%s: more than %d inputs", model, KL_MAX_FIELDS);
            return -1;
        }
        b->value[b->n] = v->id;
        b->field[b->n] = f;
        if (bind_field(g, d, b, b->n++, model))
            return -1;
    }
    if (b->n == 0) {
        kl_error("%s: the model has no input to read %s into", model, d->name);
        return -1;
    }
    /* A class label field is checked against the classes as it is read. */
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->op != IR_OP_CROSS_ENTROPY || n->dead)
            continue;
        for (int k = 0; k < b->n; k++)
            if (b->value[k] == n->in.v[1])
                d->field[b->field[k]].classes = ir_val(g, n->in.v[0])->type.dim[1];
    }
    return 0;
}

/* Token files: the inputs bound by bind_fields (tokens, targets) must fit
 * the model: an embedding table with a row for every token of the
 * vocabulary, a cross-entropy with as many classes. The context is the
 * input's second dim (bind_fields compares it with a message of its
 * own). */
static int check_token_vocab(const ir_graph *g, const kl_dataset *d, const bindings *b, const char *model)
{
    uint64_t vocab = d->tokens->vocab;
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->dead || (n->op != IR_OP_EMBEDDING && n->op != IR_OP_CROSS_ENTROPY))
            continue;
        bool emb = n->op == IR_OP_EMBEDDING;
        int ids = emb ? n->in.v[0] : n->in.v[1];
        /* Through reshapes (cross_entropy flattens [batch, T] labels). */
        while (ir_val(g, ids)->def >= 0 && ir_nd(g, ir_val(g, ids)->def)->op == IR_OP_RESHAPE)
            ids = ir_nd(g, ir_val(g, ids)->def)->in.v[0];
        const ir_type *rows = &ir_val(g, n->in.v[emb ? 1 : 0])->type;
        int64_t have = emb ? rows->dim[0] : rows->dim[rows->rank - 1];
        for (int k = 0; k < b->n; k++)
            if (b->value[k] == ids && (uint64_t)have < vocab) {
                kl_error("%s: %s has a vocabulary of %llu tokens, but input '%s' feeds %s of %lld %s\n"
                         "---> make the model's vocabulary at least %llu",
                         model, d->name, (unsigned long long)vocab, ir_val(g, ids)->name,
                         emb ? "an embedding" : "a cross_entropy", (long long)have, emb ? "rows" : "classes",
                         (unsigned long long)vocab);
                return -1;
            }
    }
    return 0;
}

int train_bind_inputs(const ir_graph *g, kl_dataset *d, bindings *b, const char *model)
{
    b->features = b->labels = -1;
    b->loss = g->loss;
    b->ce_classes = ce_classes(g);
    b->n = 0;
    int rc;
    if (d->tokens)
        rc = bind_fields(g, d, b, model) || check_token_vocab(g, d, b, model) ? -1 : 0;
    else
        rc = d->shards ? bind_fields(g, d, b, model) : bind_image_label(g, d, b, model);
    for (int k = 0; !rc && k < b->n; k++) {
        const ir_type *t = &ir_val(g, b->value[k])->type;
        b->rows[k] = t->dim[0];
        b->bytes[k] = (size_t)ir_type_bytes(t);
    }
    return rc;
}

void train_feed(kl_exec *e, const bindings *b, const kl_batch *batch)
{
    for (int k = 0; k < b->n; k++) {
        /* The loader's rows, in the input's dtype (bound above), a short
         * batch padded: the batch is the input as it is. */
        if (b->rows[k] > batch->rows)
            kl_panic("input %s reads %lld samples, but the loader's batches hold %lld", ir_val(e->g, b->value[k])->name,
                     (long long)b->rows[k], (long long)batch->rows);
        kl_exec_write(e, b->value[k], batch->field[b->field[k]], b->bytes[k]);
    }
}

static char *data_path(const trainer *t, const char *path)
{
    return kl_train_data_path(t->model, path, t->opt.kv, t->opt.nkv);
}

static int load_shards(trainer *t, const char *pattern, kl_dataset *d)
{
    const kl_train_config *c = &t->cfg;
    char *path = data_path(t, pattern);
    kl_shards_opts o = {.pattern = path, .workers = c->data_workers, .prefetch = c->data_prefetch,
                        .shuffle_buffer = c->data_shuffle_buffer, .cache = c->data_cache, .skip = c->data_skip};
    o.augment.crop_pad = c->augment.crop_pad;
    o.augment.hflip = c->augment.hflip;
    o.augment.nmean = c->augment.nmean;
    o.augment.nstd = c->augment.nstd;
    memcpy(o.augment.mean, c->augment.mean, sizeof o.augment.mean);
    memcpy(o.augment.std, c->augment.std, sizeof o.augment.std);
    int rc = kl_shards_load(&o, d);
    free(path);
    return rc;
}

/* The training and test splits; --eval-only opens the test split alone
 * (binding it to the model checks its samples' size and fields). */
int train_load_data(trainer *t)
{
    bool train = !t->opt.eval_only;
    if (!strcmp(t->cfg.data_format, "synthetic")) {
        if ((train && kl_synthetic(t->cfg.synthetic_samples, (uint64_t)t->cfg.seed, &t->train_set)) ||
            kl_synthetic(t->cfg.synthetic_samples / 6 + 1, (uint64_t)t->cfg.seed + 7, &t->test_set))
            return -1;
        return 0;
    }
    if (!strcmp(t->cfg.data_format, "shards")) {
        if ((train && load_shards(t, t->cfg.data_path, &t->train_set)) ||
            (t->cfg.data_test && load_shards(t, t->cfg.data_test, &t->test_set)))
            return -1;
        if (train && !t->cfg.data_test && t->cfg.eval_every > 0) {
            kl_error("%s: eval_every = %lld, but the data has no test split (shards(..., test = \"...\"))", t->model,
                     (long long)t->cfg.eval_every);
            return -1;
        }
        return 0;
    }
    if (!strcmp(t->cfg.data_format, "tokens")) {
        const kl_train_config *c = &t->cfg;
        char *tpath = train ? data_path(t, c->data_path) : NULL, *val = c->data_test ? data_path(t, c->data_test) : NULL;
        int rc = (tpath && kl_tokens_dataset(tpath, c->data_context, true, 0, &t->train_set)) ||
                         (val && kl_tokens_dataset(val, c->data_context, false, c->data_val_windows, &t->test_set))
                     ? -1
                     : 0;
        free(tpath);
        free(val);
        if (!rc && train && !val && c->eval_every > 0) {
            kl_error("%s: eval_every = %lld, but the data has no validation file (tokens(..., val = \"...\"))", t->model,
                     (long long)c->eval_every);
            rc = -1;
        }
        return rc;
    }
    char *dir = data_path(t, t->cfg.data_path);
    int rc = -1;
    if ((train && kl_idx_load(dir, "train", &t->train_set)) || kl_idx_load(dir, "t10k", &t->test_set))
        goto done;
    if (train && t->train_set.sample_bytes != t->test_set.sample_bytes) {
        kl_error("%s: training and test samples differ in size", dir);
        goto done;
    }
    rc = 0;
done:
    free(dir);
    return rc;
}

/* After binding: shards check every sample has its fields and fill their
 * cache; the start-up line says what they did. */
int train_prepare_data(trainer *t)
{
    kl_dataset *sets[2] = {&t->train_set, &t->test_set};
    for (int i = 0; i < 2; i++) {
        kl_dataset *d = sets[i];
        if (d->tokens && !t->opt.quiet)
            kl_fprintf_escaped(
                stdout, "data: %s: %llu tokens (vocabulary %llu), %lld %s windows of context %lld + 1 per epoch\n",
                d->name, (unsigned long long)d->tokens->count, (unsigned long long)d->tokens->vocab,
                (long long)d->count, i == 0 ? "random" : "evenly spaced", (long long)d->context);
        if (!d->shards)
            continue;
        char note[300];
        if (kl_shards_prepare(d, note, sizeof note))
            return -1;
        if (!t->opt.quiet) {
            kl_fprintf_escaped(stdout, "data: %s: %lld samples in %d shard%s; ", d->name, (long long)d->count,
                               kl_shards_count(d), kl_shards_count(d) == 1 ? "" : "s");
            for (int f = 0, k = 0; f < d->nfields; f++) {
                if (!d->field[f].used)
                    continue;
                char ft[96];
                kl_field_type_str(&d->field[f].type, ft, sizeof ft);
                kl_fprintf_escaped(stdout, "%s%s %s", k++ ? ", " : "", d->field[f].name, ft);
            }
            kl_fprintf_escaped(stdout, "; %s", note);
            if (i == 0)
                kl_fprintf_escaped(stdout, "; %d workers, prefetch %d, shuffle buffer %lld", t->cfg.data_workers,
                                   t->cfg.data_prefetch, (long long)t->cfg.data_shuffle_buffer);
            kl_fprintf_escaped(stdout, "\n");
        }
        const char *first;
        int64_t skipped = kl_shards_skipped(d, &first);
        if (skipped)
            kl_fprintf_escaped(stderr, "kiln: %s: %lld sample%s left out (on_error = skip); the first: %s\n", d->name,
                               (long long)skipped, skipped == 1 ? "" : "s", first);
    }
    return 0;
}
