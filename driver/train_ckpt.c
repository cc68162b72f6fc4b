/* Periodic checkpoints: --save-every N writes SAVE.step-N every N steps
 * (besides SAVE itself at each epoch's end and the run's), and --keep K
 * removes all but the newest K of this run's series (never an earlier
 * run's higher-numbered files: trainer.h). A new one is written whole and
 * renamed into place (runtime/files/outfile.h) before any older one is
 * removed, so a crash at any point leaves at least the previous one.
 * Also the one save every checkpoint goes through, the checks of the
 * flags that read and write values (--init,
 * --eval-only, --predict), and --predict's output. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainer.h"
#include "train_loop.h"
#include "runtime/ckpt/checkpoint.h"

int train_check_ckpt_flags(const train_options *o)
{
    if (o->save_every && !o->save) {
        kl_error("--save-every needs --save FILE (the periodic checkpoints are FILE.step-N)");
        return -1;
    }
    if (o->keep && !o->save_every) {
        kl_error("--keep needs --save-every (it counts the periodic checkpoints)");
        return -1;
    }
    if (o->resume_latest && !o->save) {
        kl_error("--resume latest needs --save FILE (it continues the newest checkpoint of FILE's series)");
        return -1;
    }
    if (o->resume_latest && (o->init || o->eval_only || o->generate)) {
        kl_error("--resume latest continues a training run: leave out --init, --eval-only and --generate "
                 "(they take --resume FILE)");
        return -1;
    }
    if (o->save_best && o->save && !strcmp(o->save_best, o->save)) {
        kl_error("--save-best and --save name the same file '%s': give --save-best its own", o->save);
        return -1;
    }
    if (o->init && o->resume) {
        kl_error("--init and --resume both set the values: give one");
        return -1;
    }
    if (o->init_partial && !o->init) {
        kl_error("--init-partial needs --init FILE.safetensors");
        return -1;
    }
    if (o->eval_only && !o->resume && !o->init) {
        kl_error("--eval-only needs the values to evaluate: --resume CKPT or --init FILE.safetensors");
        return -1;
    }
    if (o->predict && !o->eval_only) {
        kl_error("--predict needs --eval-only (it writes the outputs of the evaluation)");
        return -1;
    }
    if (o->eval_only && (o->save || o->save_init || o->export_path || o->trace_path || o->profile || o->save_best)) {
        kl_error("--eval-only trains nothing: --save, --save-best, --save-init, --export, --trace and --profile do not apply "
                 "(kiln export CKPT writes a checkpoint's params as safetensors)");
        return -1;
    }
    return 0;
}

int train_save_checkpoint(trainer *t, const char *path, int64_t step)
{
    /* The evaluations' record: the loop's as of its last epoch's end
     * (train_best.c); the run's own state over it. */
    kl_run_state rs = t->loop ? t->loop->record : (kl_run_state){0};
    rs.step = (uint64_t)step;
    rs.clean_steps = t->clean_steps;
    rs.skipped = t->skipped;
    rs.skipped_in_row = t->skipped_in_row;
    rs.loss_scale = t->loss_scale;
    rs.model = t->train->g->name;
    rs.precision = kl_precision_name(t->cfg.precision);
    rs.schedule_steps = (uint64_t)t->schedule_span;
    rs.config = t->opt.config_text;
    if (train_ranks_ckpt_begin(t, false))
        return -1;
    int rc = kl_checkpoint_save(t->s, path, &rs);
    train_ranks_ckpt_end(t, false);
    return rc;
}

char *train_periodic_path(const char *save, int64_t step)
{
    return kl_xasprintf("%s.step-%lld", save, (long long)step);
}

/* The step of a file named BASE.step-DIGITS, or -1. */
int train_check_value_sizes(const trainer *t)
{
    /* Past the machine's memory, reading the file refuses it
     * (base/support.c); this is the lower bound the run sets itself. */
    if (t->cfg.memory_limit <= 0)
        return 0;
    const char *files[][2] = {{t->opt.init, "--init"}, {t->opt.resume, "--resume"}};
    for (size_t i = 0; i < KL_ARRAY_LEN(files); i++) {
        struct stat st;
        if (!files[i][0] || stat(files[i][0], &st))
            continue;
        char *what = kl_xasprintf("%s (%s, read whole)", files[i][0], files[i][1]);
        int rc = kl_check_alloc(what, st.st_size, t->cfg.memory_limit, "raise --memory-limit, or give a smaller file");
        free(what);
        if (rc)
            return -1;
    }
    return 0;
}

int64_t train_periodic_step(const char *name, const char *base)
{
    size_t n = strlen(base);
    if (strncmp(name, base, n) || strncmp(name + n, ".step-", 6))
        return -1;
    const char *d = name + n + 6;
    if (!*d || strspn(d, "0123456789") != strlen(d) || strlen(d) > 18)
        return -1;
    return strtoll(d, NULL, 10);
}

typedef struct found {
    int64_t step;
    char *path;
} found;

static int newest_first(const void *a, const void *b)
{
    int64_t x = ((const found *)a)->step, y = ((const found *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

void train_prune_checkpoints(const train_options *o, int64_t first, int64_t now)
{
    if (!o->keep)
        return;
    const char *slash = strrchr(o->save, '/');
    char *dir = slash ? kl_xstrndup(o->save, (size_t)(slash - o->save + (slash == o->save))) : kl_xstrdup(".");
    const char *base = slash ? slash + 1 : o->save;
    DIR *d = opendir(dir);
    if (!d) {
        free(dir);
        return;
    }
    KL_VEC(found) all = {0};
    struct dirent *ent;
    while ((ent = readdir(d))) {
        int64_t step = train_periodic_step(ent->d_name, base);
        if (step <= 0 || step > now || step % o->save_every || (step <= first && !o->resume))
            continue; /* not this run's series */
        char *path = kl_xasprintf("%s/%s", dir, ent->d_name);
        struct stat st;
        /* Only regular files: a link or folder of that name is left. */
        if (lstat(path, &st) || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        found f = {step, path};
        kl_vec_push(all, f);
    }
    closedir(d);
    qsort(all.v, (size_t)all.n, sizeof *all.v, newest_first);
    for (int i = 0; i < all.n; i++) {
        if (i >= o->keep && unlink(all.v[i].path))
            kl_fprintf_escaped(stderr, "kiln: warning: cannot remove the old checkpoint %s\n", all.v[i].path);
        free(all.v[i].path);
    }
    kl_vec_free(all);
    free(dir);
}

/* ---- --predict ---- */

int train_logits_value(const ir_graph *g)
{
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->op == IR_OP_CROSS_ENTROPY && !n->dead)
            return n->in.v[0];
    }
    return -1;
}

int train_labels_value(const ir_graph *g)
{
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (n->op == IR_OP_CROSS_ENTROPY && !n->dead)
            return n->in.v[1];
    }
    return -1;
}

typedef struct predict_out {
    int64_t count, done;
    int classes;
    int32_t *pred, *label;
    float *logits;
    /* Without a cross-entropy: the output's per-sample shape, and its
     * values (count * per floats). */
    ir_type sample;
    int64_t per;
    float *out;
    predict_fields *fields; /* the declared outputs (predict_fields.c), or NULL */
} predict_out;

/* A model without a cross-entropy: the rows of its output. */
static void predict_output_batch(predict_out *p, kl_exec *e, const kl_batch *b)
{
    int v = train_output_value(e->g);
    const ir_type *ot = &ir_val(e->g, v)->type;
    size_t bytes = (size_t)ir_type_bytes(ot);
    void *host = kl_xmalloc(bytes);
    kl_exec_read(e, v, host, bytes);
    for (int64_t r = 0; r < b->size && p->done < p->count; r++, p->done++)
        for (int64_t j = 0; j < p->per; j++)
            p->out[p->done * p->per + j] = (float)kl_load_as(ot->dtype, host, r * p->per + j);
    free(host);
}

static void predict_batch(trainer *t, kl_exec *e, const kl_batch *b)
{
    predict_out *p = t->predict;
    if (p->fields) {
        train_fields_batch(p->fields, e, b);
        return;
    }
    if (p->out) {
        predict_output_batch(p, e, b);
        return;
    }
    int v = train_logits_value(e->g);
    const ir_type *lt = &ir_val(e->g, v)->type;
    size_t bytes = (size_t)ir_type_bytes(lt);
    void *host = kl_xmalloc(bytes);
    kl_exec_read(e, v, host, bytes);
    /* The labels: the cross-entropy's label operand as the plan computed
     * it (kept: see make_eval_only_exec), never a field of the batch
     * taken by position (a shard's second field need not be the label). */
    int yv = train_labels_value(e->g);
    const ir_type *yt = &ir_val(e->g, yv)->type;
    void *labels = kl_xmalloc((size_t)ir_type_bytes(yt));
    kl_exec_read(e, yv, labels, (size_t)ir_type_bytes(yt));
    /* Rows past b->size repeat earlier samples (a short batch). */
    for (int64_t r = 0; r < b->size && p->done < p->count; r++, p->done++) {
        int best = 0;
        for (int c = 0; c < p->classes; c++) {
            float x = (float)kl_load_as(lt->dtype, host, r * p->classes + c);
            p->logits[p->done * p->classes + c] = x;
            /* The first of equal maxima, as accuracy() counts it. */
            if (x > p->logits[p->done * p->classes + best])
                best = c;
        }
        p->pred[p->done] = best;
        p->label[p->done] = (int32_t)kl_load_as(yt->dtype, labels, r);
    }
    free(labels);
    free(host);
}

int train_predict_begin(trainer *t, int64_t count, const ir_graph *g)
{
    predict_out *p = kl_xcalloc(1, sizeof *p);
    p->count = count;
    t->predict = p;
    t->on_eval_batch = predict_batch;
    int logits = train_logits_value(g);
    if (logits < 0 && g->outputs.n) {
        /* The batch: the inputs' first dimension. */
        int64_t batch = -1;
        for (int v = 0; v < g->values.n && batch < 0; v++)
            if (ir_val(g, v)->kind == IR_VAL_INPUT && ir_val(g, v)->type.rank > 0)
                batch = ir_val(g, v)->type.dim[0];
        if (!(p->fields = train_fields_begin(g, count, batch))) {
            free(p);
            t->predict = NULL;
            t->on_eval_batch = NULL;
            return -1;
        }
        return 0;
    }
    if (logits < 0) {
        const ir_type *ot = &ir_val(g, train_output_value(g))->type;
        p->sample = *ot;
        p->per = ir_type_numel(ot) / ot->dim[0];
        p->out = kl_xcalloc((size_t)(count * p->per) + 1, sizeof *p->out);
        return 0;
    }
    int classes = (int)ir_val(g, logits)->type.dim[1];
    p->classes = classes;
    p->pred = kl_xcalloc((size_t)count + 1, sizeof *p->pred);
    p->label = kl_xcalloc((size_t)count + 1, sizeof *p->label);
    p->logits = kl_xcalloc((size_t)(count * classes) + 1, sizeof *p->logits);
    return 0;
}

/* One .npy (format 1.0) of count records {pred i32, label i32, logits
 * f32[classes]}, or without a cross-entropy the f32 output of shape
 * (count, ...), little-endian, C order. */
int train_predict_finish(trainer *t)
{
    predict_out *p = t->predict;
    int rc = -1;
    if (p->fields) {
        rc = train_fields_finish(p->fields, t->opt.predict);
        goto done;
    }
    if (p->done != p->count) {
        kl_error("%s: %lld of %lld test samples evaluated", t->opt.predict, (long long)p->done, (long long)p->count);
        goto done;
    }
    kl_buf h = {0};
    if (p->out) {
        /* The output as fp32, shape (samples, the output's per-sample dims). */
        kl_buf_printf(&h, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld,", (long long)p->count);
        for (int k = 1; k < p->sample.rank; k++)
            kl_buf_printf(&h, " %lld,", (long long)p->sample.dim[k]);
        kl_buf_puts(&h, "), }");
    } else {
        kl_buf_printf(&h, "{'descr': [('pred', '<i4'), ('label', '<i4'), ('logits', '<f4', (%d,))], 'fortran_order': "
                          "False, 'shape': (%lld,), }", p->classes, (long long)p->count);
    }
    kl_outfile o;
    if (train_npy_begin(&o, t->opt.predict, &h))
        goto done;
    if (p->out)
        kl_outfile_write(&o, p->out, sizeof(float) * (size_t)(p->count * p->per));
    for (int64_t i = 0; i < p->count && !p->out; i++) {
        kl_outfile_write(&o, &p->pred[i], 4);
        kl_outfile_write(&o, &p->label[i], 4);
        kl_outfile_write(&o, &p->logits[i * p->classes], sizeof(float) * (size_t)p->classes);
    }
    rc = kl_outfile_commit(&o, 0666);
done:
    free(p->pred);
    free(p->label);
    free(p->logits);
    free(p->out);
    free(p);
    t->predict = NULL;
    t->on_eval_batch = NULL;
    return rc;
}
