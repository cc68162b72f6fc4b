/* The train block's table of settings, its checks and its typed form. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_config.h"

/* A setting whose value is a call picks one of these forms; a bare name is
 * the call with no arguments. */
typedef struct call_form {
    const char *name;
    const char *spec; /* as in ops.def */
} call_form;

static const call_form data_forms[] = {
    {"idx", "path:str shuffle:int=?"},
    {"synthetic", "samples:int=4096"},
    {"shards", "path:str test:str=? workers:int=2 prefetch:int=4 shuffle_buffer:int=1000 cache:str=none on_error:str=fail"},
    {"tokens", "path:str val:str=? context:int val_windows:int=0"},
    {NULL, NULL},
};
static const call_form optimizer_forms[] = {
    {"sgd", "lr:float=0.01 momentum:float=0 nesterov:int=0 weight_decay:float=0"},
    {"adam", "lr:float=0.001 beta1:float=0.9 beta2:float=0.999 eps:float=1e-8 weight_decay:float=0"},
    {"adamw", "lr:float=0.001 beta1:float=0.9 beta2:float=0.999 eps:float=1e-8 weight_decay:float=0.01"},
    {NULL, NULL},
};
static const call_form schedule_forms[] = {
    {"constant", ""},
    {"step", "every:int gamma:float=0.1"},
    {"cosine", "min_lr:float=0"},
    {"warmup_cosine", "warmup:int min_lr:float=0"},
    {"linear", "warmup:int=0 end_lr:float=0"},
    {NULL, NULL},
};
static const call_form loss_scale_forms[] = {
    {"dynamic", "scale:float=65536 growth:float=2 backoff:float=0.5 interval:int=2000"},
    {"static", "scale:float"},
    {NULL, NULL},
};

typedef enum { K_INT, K_FLOAT, K_WORD, K_CALL, K_BYTES, K_RECOMPUTE, K_PATH, K_BOOL, K_GROUP } key_kind;

/* early_stop = (metric = NAME, patience = K, min_delta = D): a group, a
 * call without a name. The metric is checked against the model's reports
 * by the training executable (driver/train_best.c). */
#define EARLY_STOP_SPEC "metric:str patience:int=3 min_delta:float=0"
#define EARLY_STOP_FORM "(metric = NAME, patience = K, min_delta = D)"

typedef struct key_info {
    const char *key;
    key_kind kind;
    const char *words;       /* K_WORD: the allowed names */
    const call_form *forms;  /* K_CALL */
    int64_t min;             /* K_INT: smallest allowed */
    const char *help;
} key_info;

static const key_info keys[] = {
    {"data", K_CALL, NULL, data_forms, 0, "idx(\"/usr/share/datasets/fashion-mnist\"), shards(\"train-{000000..000009}.tar\", ...), tokens(\"train.tok\", val = \"val.tok\", context = 128) or synthetic(samples = N)"},
    {"batch", K_INT, NULL, NULL, 1, "samples per micro-batch"},
    {"accumulate", K_INT, NULL, NULL, 1, "micro-batches per optimizer step"},
    {"epochs", K_INT, NULL, NULL, 1, "passes over the training set"},
    {"steps", K_INT, NULL, NULL, 0, "stop after this many optimizer steps (0: no limit)"},
    {"seed", K_INT, NULL, NULL, 0, "seed of initialisation, shuffling and dropout"},
    {"eval_every", K_INT, NULL, NULL, 0, "evaluate every N steps and at each epoch's end (0: never; unset: each epoch)"},
    {"log_every", K_INT, NULL, NULL, 1, "progress line every N steps"},
    {"threads", K_INT, NULL, NULL, 0, "CPU threads (0: all cores)"},
    {"optimizer", K_CALL, NULL, optimizer_forms, 0, "sgd(...), adam(...) or adamw(...)"},
    {"schedule", K_CALL, NULL, schedule_forms, 0, "constant, step(every), cosine, warmup_cosine(warmup) or linear"},
    {"schedule_steps", K_INT, NULL, NULL, 1, "the steps the lr schedule spans (default: the run's steps)"},
    {"lr_scaling", K_WORD, "none linear sqrt", NULL, 0, "rescale lr to the effective batch"},
    {"base_batch", K_INT, NULL, NULL, 1, "the effective batch the lr was chosen for (default: the train block's batch x accumulate)"},
    {"clip", K_FLOAT, NULL, NULL, 0, "clip the global gradient norm (0: off)"},
    {"precision", K_WORD, "fp32 bf16 fp16", NULL, 0, "storage and GEMM precision"},
    {"loss_scale", K_CALL, NULL, loss_scale_forms, 0, "dynamic(...) or static(scale) (fp16)"},
    {"max_skipped_steps", K_INT, NULL, NULL, 0, "stop when more steps than this in a row are skipped (fp16; 0: never)"},
    {"shard", K_WORD, "none dp zero1 zero2 zero3", NULL, 0, "how state is split across ranks (none = dp)"},
    {"recompute", K_RECOMPUTE, NULL, NULL, 0, "copies, none, auto or [def names]"},
    {"keep_fp32", K_RECOMPUTE, NULL, NULL, 0, "[def names] whose ops stay fp32 under bf16/fp16"},
    {"memory_limit", K_BYTES, NULL, NULL, 0, "bytes, or a string such as \"2GiB\""},
    {"tensorboard", K_PATH, NULL, NULL, 0, "a folder for TensorBoard event files"},
    {"bucket", K_BYTES, NULL, NULL, 0, "bytes per all-reduce across ranks (default \"25MiB\"; 0: one per gradient)"},
    {"overlap", K_WORD, "on off", NULL, 0, "collectives on a communication thread, overlapped with backward (default on)"},
    {"tensor_parallel", K_INT, NULL, NULL, 1, "ranks per tensor-parallel group (split = column|row calls; default 1)"},
    {"pipeline_parallel", K_INT, NULL, NULL, 1, "pipeline stages the forward graph is cut into (stage = k on a call; default 1)"},
    {"pipeline_schedule", K_WORD, "gpipe 1f1b interleaved zero_bubble", NULL, 0,
     "the order of the stages' micro-batches (default 1f1b)"},
    {"pipeline_virtual_stages", K_INT, NULL, NULL, 2,
     "interleaved: stages per pipeline rank, stage k on rank k mod pipeline_parallel (default 2, at most 8)"},
    {"sync_batchnorm", K_BOOL, NULL, NULL, 0, "batch norm's batch statistics over every data-parallel rank's rows"},
    {"tp_reduce", K_WORD, "fp32 bf16 fp16 exact", NULL, 0,
     "the dtype of tensor parallelism's all-reduced partial sums under bf16/fp16 (default fp32; exact: f64, slow)"},
    {"comm_timeout", K_FLOAT, NULL, NULL, 0,
     "seconds a collective across ranks may wait for the others before the job is aborted (default 300; 0: forever)"},
    {"early_stop", K_GROUP, NULL, NULL, 0, "stop when an evaluation metric stops improving: " EARLY_STOP_FORM},
};

static const key_info *find_key(const char *key)
{
    for (size_t i = 0; i < KL_ARRAY_LEN(keys); i++)
        if (!strcmp(keys[i].key, key))
            return &keys[i];
    return NULL;
}

static bool word_in(const char *word, const char *words)
{
    size_t n = strlen(word);
    for (const char *p = words; *p;) {
        size_t len = strcspn(p, " ");
        if (len == n && !strncmp(p, word, n))
            return true;
        p += len;
        while (*p == ' ')
            p++;
    }
    return false;
}

static void words_list(kl_buf *b, const char *words)
{
    int count = 0, total = 1;
    for (const char *p = words; *p; p++)
        total += *p == ' ';
    for (const char *p = words; *p;) {
        size_t len = strcspn(p, " ");
        kl_buf_printf(b, "%s%.*s", count == 0 ? "" : count == total - 1 ? " or " : ", ", (int)len, p);
        count++;
        p += len;
        while (*p == ' ')
            p++;
    }
}

static int fail(const kl_source *src, kl_loc loc, const char *fmt, ...) KL_PRINTF(3, 4);
static int fail(const kl_source *src, kl_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_verror_at(src, loc, fmt, ap);
    va_end(ap);
    return -1;
}

/* "2GiB", "512MB", "1e9" -> bytes; -1 when malformed. */
static int64_t parse_bytes(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0))
        return -1;
    while (*end == ' ')
        end++;
    static const struct { const char *suffix; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1e3}, {"KB", 1e3}, {"KiB", 1024}, {"M", 1e6}, {"MB", 1e6},
        {"MiB", 1048576.0}, {"G", 1e9}, {"GB", 1e9}, {"GiB", 1073741824.0}, {"T", 1e12},
        {"TB", 1e12}, {"TiB", 1099511627776.0},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(units); i++)
        if (!strcmp(end, units[i].suffix)) {
            double b = v * units[i].mult;
            return b < 9e18 ? (int64_t)b : -1;
        }
    return -1;
}

/* shards(augment = [random_crop(pad = 4), hflip(), normalize(mean =
 * [...], std = [...])]): each step at most once, in that order of
 * application whatever the list's order (crop and flip on u8 pixels,
 * then normalisation to f32). */
static int check_augment(ir_attr_val *list, kl_loc loc, const kl_source *src)
{
    if (list->kind != IR_ATTR_LIST)
        return fail(src, loc, "shards: augment is a list such as [random_crop(pad = 4), hflip()]");
    bool seen[3] = {false, false, false};
    for (int i = 0; i < list->nitems; i++) {
        ir_attr_val *v = &list->items[i];
        kl_loc il = v->loc.line ? v->loc : loc;
        if (v->kind == IR_ATTR_STR) {
            v->kind = IR_ATTR_CALL;
            v->args = kl_xcalloc(1, sizeof *v->args);
        }
        static const char *const names[] = {"random_crop", "hflip", "normalize"};
        static const char *const specs[] = {"pad:int=4", "", "mean:float=? std:float=?"};
        int k = 0;
        while (k < 3 && (v->kind != IR_ATTR_CALL || strcmp(v->s, names[k])))
            k++;
        if (k == 3)
            return fail(src, il, "shards: unknown augmentation (expected random_crop(pad), hflip() or normalize(mean, std))");
        if (seen[k])
            return fail(src, il, "shards: %s is given twice in augment", names[k]);
        seen[k] = true;
        if (k < 2) {
            char err[256];
            if (ir_spec_normalize(specs[k], names[k], v->args, err, sizeof err))
                return fail(src, il, "%s", err);
            if (k == 0 && (ir_attr_int(v->args, "pad", 4) < 1 || ir_attr_int(v->args, "pad", 4) > 64))
                return fail(src, il, "random_crop: pad must be 1 to 64");
            continue;
        }
        /* normalize: mean and std, each a number or a list of one per channel. */
        for (int j = 0; j < v->args->n; j++) {
            ir_attr *arg = &v->args->v[j];
            if (!arg->key[0]) {
                free(arg->key);
                arg->key = kl_xstrdup(j == 0 ? "mean" : "std");
            }
            if (strcmp(arg->key, "mean") && strcmp(arg->key, "std"))
                return fail(src, il, "normalize has no argument '%s' (its arguments: mean, std)", arg->key);
            ir_attr_val *x = &arg->val;
            int n = x->kind == IR_ATTR_LIST ? x->nitems : 1;
            if (n < 1 || n > 8)
                return fail(src, il, "normalize: %s is a number or a list of 1 to 8 numbers", arg->key);
            for (int e = 0; e < n; e++) {
                ir_attr_val *y = x->kind == IR_ATTR_LIST ? &x->items[e] : x;
                if (y->kind == IR_ATTR_INT)
                    *y = ir_attr_val_float((double)y->i);
                if (y->kind != IR_ATTR_FLOAT || !isfinite(y->f) || (!strcmp(arg->key, "std") && y->f <= 0))
                    return fail(src, il, "normalize: %s must be %s", arg->key,
                                strcmp(arg->key, "std") ? "finite numbers" : "positive numbers");
            }
        }
        if (!ir_attrs_find(v->args, "mean") || !ir_attrs_find(v->args, "std"))
            return fail(src, il, "normalize needs mean and std");
    }
    return 0;
}

static int check_call(ir_attr *a, const key_info *k, const kl_source *src)
{
    ir_attr_val *v = &a->val;
    kl_loc loc = v->loc.line ? v->loc : a->loc;
    /* Shorthands: a path for data, a bare name for a call, a number for a
     * static loss scale. */
    if (!strcmp(k->key, "data") && v->kind == IR_ATTR_STR && !ir_attr_val_is_word(v)) {
        size_t len = strlen(v->s);
        bool tar = len > 4 && !strcmp(v->s + len - 4, ".tar");
        ir_attr_val call = {.kind = IR_ATTR_CALL, .s = kl_xstrdup(tar ? "shards" : "idx"), .loc = v->loc};
        call.args = kl_xcalloc(1, sizeof *call.args);
        ir_attrs_set(call.args, "path", *v);
        *v = call;
    } else if (!strcmp(k->key, "loss_scale") && (v->kind == IR_ATTR_INT || v->kind == IR_ATTR_FLOAT)) {
        ir_attr_val call = {.kind = IR_ATTR_CALL, .s = kl_xstrdup("static"), .loc = v->loc};
        call.args = kl_xcalloc(1, sizeof *call.args);
        ir_attrs_set(call.args, "scale", *v);
        *v = call;
    } else if (v->kind == IR_ATTR_STR) {
        v->kind = IR_ATTR_CALL;
        v->args = kl_xcalloc(1, sizeof *v->args);
    }
    kl_buf names = {0};
    for (const call_form *f = k->forms; f->name; f++)
        kl_buf_printf(&names, "%s%s", f == k->forms ? "" : f[1].name ? ", " : " or ", f->name);
    if (v->kind != IR_ATTR_CALL) {
        fail(src, loc, "%s must be %s", k->key, names.s);
        kl_buf_free(&names);
        return -1;
    }
    const call_form *f;
    for (f = k->forms; f->name && strcmp(f->name, v->s); f++)
        ;
    if (!f->name) {
        fail(src, loc, "unknown %s '%s' (expected %s)", k->key, v->s, names.s);
        kl_buf_free(&names);
        return -1;
    }
    kl_buf_free(&names);
    /* shards' augment list is checked apart: the spec language has no
     * list of calls. */
    ir_attr_val augment = {0};
    ir_attr *aug = !strcmp(f->name, "shards") ? ir_attrs_find(v->args, "augment") : NULL;
    kl_loc aug_loc = aug ? (aug->val.loc.line ? aug->val.loc : aug->loc) : loc;
    if (aug) {
        ir_attr_val_copy(&augment, &aug->val);
        ir_attrs_remove(v->args, "augment");
    }
    char err[256];
    if (ir_spec_normalize(f->spec, f->name, v->args, err, sizeof err)) {
        ir_attr_val_free(&augment);
        return fail(src, loc, "%s", err);
    }
    if (aug) {
        if (check_augment(&augment, aug_loc, src)) {
            ir_attr_val_free(&augment);
            return -1;
        }
        ir_attrs_set(v->args, "augment", augment);
    }
    /* Ranges of the numeric arguments. */
    for (int i = 0; i < v->args->n; i++) {
        ir_attr *arg = &v->args->v[i];
        kl_loc al = arg->val.loc.line ? arg->val.loc : loc;
        double x = arg->val.kind == IR_ATTR_INT ? (double)arg->val.i : arg->val.f;
        if (arg->val.kind != IR_ATTR_INT && arg->val.kind != IR_ATTR_FLOAT)
            continue;
        if (!isfinite(x) || x < 0)
            return fail(src, al, "%s: %s must be a finite number, not negative", f->name, arg->key);
        bool below_one = !strcmp(arg->key, "beta1") || !strcmp(arg->key, "beta2") ||
                         !strcmp(arg->key, "momentum");
        if (below_one && x >= 1)
            return fail(src, al, "%s: %s must be below 1", f->name, arg->key);
        if (!strcmp(arg->key, "backoff") && (x <= 0 || x >= 1))
            return fail(src, al, "%s: backoff must be between 0 and 1", f->name);
        if ((!strcmp(arg->key, "lr") || !strcmp(arg->key, "every") || !strcmp(arg->key, "samples") ||
             !strcmp(arg->key, "scale") || !strcmp(arg->key, "interval") || !strcmp(arg->key, "context")) && x <= 0)
            return fail(src, al, "%s: %s must be positive", f->name, arg->key);
        if (!strcmp(arg->key, "growth") && x <= 1)
            return fail(src, al, "%s: growth must be above 1", f->name);
        if ((!strcmp(arg->key, "workers") || !strcmp(arg->key, "prefetch")) && (x < 1 || x > 64))
            return fail(src, al, "%s: %s must be 1 to 64", f->name, arg->key);
    }
    if (!strcmp(f->name, "idx") && ir_attr_int(v->args, "shuffle", 1) > 1)
        return fail(src, loc, "idx: shuffle must be 0 (samples in file order) or 1");
    if (!strcmp(f->name, "shards")) {
        const char *cache = ir_attr_str(v->args, "cache", "none"), *on_error = ir_attr_str(v->args, "on_error", "fail");
        if (strcmp(cache, "memory") && strcmp(cache, "none"))
            return fail(src, loc, "shards: cache must be memory or none, not '%s'", cache);
        if (strcmp(on_error, "fail") && strcmp(on_error, "skip"))
            return fail(src, loc, "shards: on_error must be fail or skip, not '%s'", on_error);
    }
    return 0;
}

/* early_stop's group: its names, types and ranges. */
static int check_group(ir_attr *a, const key_info *k, const kl_source *src)
{
    ir_attr_val *v = &a->val;
    kl_loc loc = v->loc.line ? v->loc : a->loc;
    if (v->kind != IR_ATTR_CALL || v->s[0])
        return fail(src, loc, "%s is a group %s", k->key, EARLY_STOP_FORM);
    char err[256];
    if (ir_spec_normalize(EARLY_STOP_SPEC, k->key, v->args, err, sizeof err))
        return fail(src, loc, "%s", err);
    const ir_attr *m = ir_attrs_find(v->args, "metric");
    if (!m || m->val.kind != IR_ATTR_STR || !ir_attr_val_is_word(&m->val))
        return fail(src, loc, "%s: metric names a report of the model, or loss", k->key);
    if (ir_attr_int(v->args, "patience", 3) < 1)
        return fail(src, loc, "%s: patience must be at least 1 (evaluations without improvement)", k->key);
    ir_attr *d = ir_attrs_find(v->args, "min_delta");
    if (d && d->val.kind == IR_ATTR_INT)
        d->val = ir_attr_val_float((double)d->val.i);
    if (d && (d->val.kind != IR_ATTR_FLOAT || !isfinite(d->val.f) || d->val.f < 0))
        return fail(src, loc, "%s: min_delta must be a finite number, not negative", k->key);
    return 0;
}

static int check_one(ir_attr *a, const kl_source *src)
{
    const key_info *k = find_key(a->key);
    ir_attr_val *v = &a->val;
    kl_loc loc = v->loc.line ? v->loc : a->loc;
    if (!k) {
        kl_buf names = {0};
        for (size_t i = 0; i < KL_ARRAY_LEN(keys); i++)
            kl_buf_printf(&names, "%s%s", i ? ", " : "", keys[i].key);
        fail(src, a->loc, "unknown train setting '%s' (settings: %s)", a->key, names.s);
        kl_buf_free(&names);
        return -1;
    }
    switch (k->kind) {
    case K_INT:
        if (v->kind != IR_ATTR_INT || v->i < k->min)
            return fail(src, loc, "%s must be an integer of at least %lld (%s)", k->key, (long long)k->min, k->help);
        if (v->i > ((int64_t)1 << 40))
            return fail(src, loc, "%s is too large", k->key);
        return 0;
    case K_BOOL:
        /* true and false are 1 and 0 in a model file; words in a flag. */
        if (v->kind == IR_ATTR_STR && (!strcmp(v->s, "true") || !strcmp(v->s, "false"))) {
            bool b = !strcmp(v->s, "true");
            ir_attr_val_free(v);
            *v = ir_attr_val_int(b);
        }
        if (v->kind != IR_ATTR_INT || (v->i != 0 && v->i != 1))
            return fail(src, loc, "%s must be true or false (%s)", k->key, k->help);
        return 0;
    case K_FLOAT:
        if (v->kind == IR_ATTR_INT)
            *v = ir_attr_val_float((double)v->i);
        if (v->kind != IR_ATTR_FLOAT || !isfinite(v->f) || v->f < 0)
            return fail(src, loc, "%s must be a number, not negative (%s)", k->key, k->help);
        return 0;
    case K_WORD:
        if (v->kind != IR_ATTR_STR || !word_in(v->s, k->words)) {
            kl_buf w = {0};
            words_list(&w, k->words);
            fail(src, loc, "%s must be %s", k->key, w.s);
            kl_buf_free(&w);
            return -1;
        }
        return 0;
    case K_CALL:
        return check_call(a, k, src);
    case K_GROUP:
        return check_group(a, k, src);
    case K_BYTES: {
        int64_t b = v->kind == IR_ATTR_INT ? v->i : v->kind == IR_ATTR_STR ? parse_bytes(v->s) : -1;
        /* 1e9 from a command line arrives as a float. */
        if (v->kind == IR_ATTR_FLOAT && v->f >= 0 && v->f < 9e18 && v->f == floor(v->f))
            b = (int64_t)v->f;
        if (b < 0)
            return fail(src, loc, "%s must be a byte count such as 2000000000 or \"2GiB\"", k->key);
        ir_attr_val_free(v);
        *v = ir_attr_val_int(b);
        v->loc = loc;
        return 0;
    }
    case K_PATH:
        if (v->kind != IR_ATTR_STR || !v->s[0])
            return fail(src, loc, "%s must be a path in quotes (%s)", k->key, k->help);
        return 0;
    case K_RECOMPUTE:
        if (v->kind == IR_ATTR_STR && (!strcmp(v->s, "none") ||
                                       ((!strcmp(v->s, "auto") || !strcmp(v->s, "copies")) && !strcmp(k->key, "recompute"))))
            return 0;
        if (v->kind == IR_ATTR_LIST) {
            for (int i = 0; i < v->nitems; i++)
                if (v->items[i].kind != IR_ATTR_STR || !ir_attr_val_is_word(&v->items[i]))
                    return fail(src, v->items[i].loc.line ? v->items[i].loc : loc,
                                "%s lists the names of defs", k->key);
            return 0;
        }
        return fail(src, loc, "%s must be %s", k->key, k->help);
    }
    return 0;
}

int kl_train_check(ir_attrs *train, const kl_source *src)
{
    for (int i = 0; i < train->n; i++) {
        for (int j = 0; j < i; j++)
            if (!strcmp(train->v[i].key, train->v[j].key))
                return fail(src, train->v[i].loc, "train setting '%s' is given twice", train->v[i].key);
        if (check_one(&train->v[i], src))
            return -1;
    }
    return 0;
}

/* Reads flag text as an int, a float or a name. */
static ir_attr_val value_from_text(const char *text)
{
    size_t len = strlen(text);
    if (len >= 2 && text[0] == '[' && text[len - 1] == ']') {
        /* "[a, b]": a list of names (recompute, keep_fp32). */
        ir_attr_val list = {.kind = IR_ATTR_LIST};
        char *body = kl_xstrndup(text + 1, len - 2);
        for (char *save = NULL, *w = strtok_r(body, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
            list.items = kl_xrealloc(list.items, sizeof *list.items * (size_t)(list.nitems + 1));
            list.items[list.nitems++] = ir_attr_val_str(w);
        }
        free(body);
        return list;
    }
    char *end;
    errno = 0;
    long long i = strtoll(text, &end, 10);
    /* Past i64 strtoll saturates: such a number is read as a float, which
     * an integer setting refuses, instead of as 2^63 - 1. */
    if (*text && !*end && errno != ERANGE)
        return ir_attr_val_int(i);
    double f = strtod(text, &end);
    if (*text && !*end)
        return ir_attr_val_float(f);
    return ir_attr_val_str(text);
}

/* "name(...)": a call value. */
static bool looks_like_call(const char *text)
{
    size_t n = 0;
    while (isalnum((unsigned char)text[n]) || text[n] == '_')
        n++;
    size_t len = strlen(text);
    /* n == 0: a group, (metric = accuracy, patience = 2). */
    return (n == 0 || !isdigit((unsigned char)text[0])) && text[n] == '(' && len > n + 1 && text[len - 1] == ')';
}

/* --data PATH replaces the train block's whole data call: names on
 * stderr the settings of that call it drops (a test split, augmentation,
 * a cache), which a bare path cannot carry; call is the new one. */
static void note_dropped_data(const ir_attr *data, const ir_attr_val *call, const char *flag, const char *text)
{
    if (!data || data->val.kind != IR_ATTR_CALL || !data->val.args)
        return;
    kl_buf b = {0};
    const char *spec = "";
    for (const call_form *f = data_forms; f->name; f++)
        if (!strcmp(f->name, data->val.s))
            spec = f->spec;
    for (int i = 0; i < data->val.args->n; i++) {
        const ir_attr *a = &data->val.args->v[i];
        /* The new call's own settings (a pack folder's test split). */
        if (!strcmp(a->key, "path") || (!strcmp(call->s, data->val.s) && ir_attrs_find(call->args, a->key)))
            continue;
        /* A setting at its form's default (filled in by the check) is
         * not dropped: the new call gets the same default. */
        char *def = kl_xasprintf("%s:%s=", a->key, a->val.kind == IR_ATTR_INT ? "int" : "str");
        const char *at = strstr(spec, def);
        char *val = a->val.kind == IR_ATTR_INT ? kl_xasprintf("%lld", (long long)a->val.i)
                                               : kl_xstrdup(a->val.kind == IR_ATTR_STR ? a->val.s : "");
        size_t dl = strlen(def), vl = strlen(val);
        bool same = at && !strncmp(at + dl, val, vl) && (at[dl + vl] == ' ' || !at[dl + vl]);
        if (!same)
            kl_buf_printf(&b, "%s%s", b.len ? ", " : "", a->key);
        free(def);
        free(val);
    }
    if (b.len)
        fprintf(stderr,
                "kiln: note: %s %s replaces the train block's %s(...) and drops its %s\n"
                "---> to keep them: --set 'data=%s(\"%s\", ...)'\n",
                flag, text, data->val.s, b.s, call->s, ir_attrs_find(call->args, "path")->val.s);
    kl_buf_free(&b);
}

/* kl_train_set with the flag's name for messages. */
static int train_set_as(ir_attrs *train, const char *key, const char *text, const char *flag)
{
    kl_source src;
    kl_source_from_string(&src, flag, text);
    ir_attrs tmp = {0};
    int rc;
    if (!strcmp(key, "lr")) {
        /* The learning rate lives in the optimizer call. */
        ir_attr *opt = ir_attrs_find(train, "optimizer");
        ir_attr_val call = {0};
        if (opt)
            ir_attr_val_copy(&call, &opt->val);
        else
            call = ir_attr_val_str("sgd");
        ir_attrs_set(&tmp, "optimizer", call);
        rc = check_one(&tmp.v[0], &src);
        if (!rc) {
            ir_attrs_set(tmp.v[0].val.args, "lr", value_from_text(text));
            rc = check_one(&tmp.v[0], &src);
        }
    } else if (!find_key(key)) {
        kl_error("%s is not a train setting", flag);
        rc = -1;
    } else if (!strcmp(key, "data") && !strncmp(text, "synthetic:", 10)) {
        /* --data synthetic:N */
        ir_attr_val call = {.kind = IR_ATTR_CALL, .s = kl_xstrdup("synthetic")};
        call.args = kl_xcalloc(1, sizeof *call.args);
        ir_attrs_set(call.args, "samples", value_from_text(text + 10));
        ir_attrs_set(&tmp, key, call);
        rc = check_one(&tmp.v[0], &src);
    } else if (looks_like_call(text)) {
        /* --set 'optimizer=sgd(lr=0.1)', --set 'loss_scale=static(8)':
         * a call as the train block writes it. */
        ir_attr_val v;
        rc = ir_parse_value(&src, &v);
        if (!rc) {
            ir_attrs_set(&tmp, key, v);
            rc = check_one(&tmp.v[0], &src);
        }
    } else if (!strcmp(key, "data") && !text[strspn(text, " \t")]) {
        kl_error("%s: needs a data folder, a .tar shard path or synthetic:N; got an empty value", flag);
        rc = -1;
    } else if (!strcmp(key, "data")) {
        /* --data DIR: a path, even one that reads as a name or a number;
         * a .tar path is a shard (pattern). */
        size_t len = strlen(text);
        bool tar = len > 4 && !strcmp(text + len - 4, ".tar");
        ir_attr_val call = {0};
        /* A folder kiln pack wrote (its manifest.json) is read as its
         * shards, not as IDX files. */
        rc = tar ? 1 : kl_pack_folder_data(text, flag, &call);
        if (rc > 0) {
            call = (ir_attr_val){.kind = IR_ATTR_CALL, .s = kl_xstrdup(tar ? "shards" : "idx")};
            call.args = kl_xcalloc(1, sizeof *call.args);
            ir_attrs_set(call.args, "path", ir_attr_val_str(text));
        }
        if (rc >= 0) {
            note_dropped_data(ir_attrs_find(train, "data"), &call, flag, text);
            ir_attrs_set(&tmp, key, call);
            rc = check_one(&tmp.v[0], &src);
        }
    } else {
        ir_attrs_set(&tmp, key, value_from_text(text));
        rc = check_one(&tmp.v[0], &src);
    }
    if (!rc) {
        ir_attr_val out;
        ir_attr_val_copy(&out, &tmp.v[0].val);
        ir_attrs_set(train, tmp.v[0].key, out);
    }
    ir_attrs_free(&tmp);
    kl_source_free(&src);
    return rc;
}

int kl_train_set(ir_attrs *train, const char *key, const char *text)
{
    /* The key's own flag: --eval-every for eval_every. */
    char *flag = kl_xasprintf("--%s", key);
    for (char *c = flag; *c; c++)
        if (*c == '_')
            *c = '-';
    int rc = train_set_as(train, key, text, flag);
    free(flag);
    return rc;
}

int kl_train_check_set(const char *key, const char *text)
{
    /* lr goes into the optimizer's arguments later; its value is checked
     * here as the optimizer checks it, so that a config file's line is
     * the one named. */
    if (!strcmp(key, "lr")) {
        char *end;
        double v = strtod(text, &end);
        if (end == text || *end || !isfinite(v) || v <= 0) {
            kl_error("--set lr: '%s' is not a positive number", text);
            return -1;
        }
        return 0;
    }
    char *flag = kl_xasprintf("--set %s", key);
    ir_attrs scratch = {0};
    int rc = train_set_as(&scratch, key, text, flag);
    ir_attrs_free(&scratch);
    free(flag);
    return rc;
}

/* lr_scaling's base: the effective batch the train block's lr was
 * written for, its batch x accumulate, taken before --batch or
 * --accumulate change them (and only then: a block alone needs no
 * base_batch key to mean this). --set base_batch, applied after, wins. */
static void keep_base_batch(ir_attrs *train, const char *const *kv)
{
    bool changes = false;
    for (int i = 0; kv && kv[i]; i += 2)
        changes |= !strcmp(kv[i], "batch") || !strcmp(kv[i], "accumulate");
    if (!changes || ir_attrs_find(train, "base_batch"))
        return;
    ir_attr *b = ir_attrs_find(train, "batch");
    if (b && b->val.kind != IR_ATTR_INT)
        return; /* batch = auto: no number the lr was written for */
    ir_attrs_set_int(train, "base_batch", ir_attr_int(train, "batch", 32) * ir_attr_int(train, "accumulate", 1));
}

int kl_train_set_all(ir_attrs *train, const char *const *kv)
{
    keep_base_batch(train, kv);
    /* --lr sets the lr of the optimizer: after every other setting, so
     * that --set optimizer=... given after it does not drop it. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; kv && kv[i]; i += 2)
            if ((pass == 1) == !strcmp(kv[i], "lr") && kl_train_set(train, kv[i], kv[i + 1]))
                return -1;
    return 0;
}

/* ---- the typed form ---- */

static const ir_attr_val *call_of(const ir_attrs *train, const char *key)
{
    ir_attr *a = ir_attrs_find(train, key);
    return a && a->val.kind == IR_ATTR_CALL ? &a->val : NULL;
}

static double arg_f(const ir_attr_val *call, const char *key, double dflt)
{
    return call && call->args ? ir_attr_float(call->args, key, dflt) : dflt;
}

static int64_t arg_i(const ir_attr_val *call, const char *key, int64_t dflt)
{
    return call && call->args ? ir_attr_int(call->args, key, dflt) : dflt;
}

void kl_train_read(const ir_attrs *train, kl_train_config *c)
{
    memset(c, 0, sizeof *c);
    const ir_attr_val *data = call_of(train, "data");
    if (data && !strcmp(data->s, "synthetic")) {
        c->data_format = kl_xstrdup("synthetic");
        c->synthetic_samples = arg_i(data, "samples", 4096);
        c->data_shuffle = true;
    } else if (data && !strcmp(data->s, "shards")) {
        c->data_format = kl_xstrdup("shards");
        c->data_path = kl_xstrdup(ir_attr_str(data->args, "path", ""));
        const char *test = ir_attr_str(data->args, "test", NULL);
        c->data_test = test ? kl_xstrdup(test) : NULL;
        c->data_workers = (int)arg_i(data, "workers", 2);
        c->data_prefetch = (int)arg_i(data, "prefetch", 4);
        c->data_shuffle_buffer = arg_i(data, "shuffle_buffer", 1000);
        c->data_shuffle = c->data_shuffle_buffer > 0;
        c->data_cache = !strcmp(ir_attr_str(data->args, "cache", "none"), "memory");
        c->data_skip = !strcmp(ir_attr_str(data->args, "on_error", "fail"), "skip");
        c->augment.crop_pad = 0;
        ir_attr *aug = ir_attrs_find(data->args, "augment");
        for (int i = 0; aug && aug->val.kind == IR_ATTR_LIST && i < aug->val.nitems; i++) {
            const ir_attr_val *st = &aug->val.items[i];
            if (!strcmp(st->s, "random_crop"))
                c->augment.crop_pad = ir_attr_int(st->args, "pad", 4);
            else if (!strcmp(st->s, "hflip"))
                c->augment.hflip = true;
            else if (!strcmp(st->s, "normalize")) {
                const ir_attr_val *m = &ir_attrs_find(st->args, "mean")->val, *sd = &ir_attrs_find(st->args, "std")->val;
                c->augment.nmean = m->kind == IR_ATTR_LIST ? m->nitems : 1;
                c->augment.nstd = sd->kind == IR_ATTR_LIST ? sd->nitems : 1;
                for (int k = 0; k < c->augment.nmean; k++)
                    c->augment.mean[k] = m->kind == IR_ATTR_LIST ? m->items[k].f : m->f;
                for (int k = 0; k < c->augment.nstd; k++)
                    c->augment.std[k] = sd->kind == IR_ATTR_LIST ? sd->items[k].f : sd->f;
            }
        }
    } else if (data && !strcmp(data->s, "tokens")) {
        c->data_format = kl_xstrdup("tokens");
        c->data_path = kl_xstrdup(ir_attr_str(data->args, "path", ""));
        const char *val = ir_attr_str(data->args, "val", NULL);
        c->data_test = val ? kl_xstrdup(val) : NULL;
        c->data_context = arg_i(data, "context", 1);
        c->data_val_windows = arg_i(data, "val_windows", 0);
        c->data_shuffle = true;
        c->data_workers = 1;
        c->data_prefetch = 4;
    } else {
        c->data_format = kl_xstrdup("idx");
        const char *path = data && data->args ? ir_attr_str(data->args, "path", NULL) : NULL;
        c->data_path = kl_xstrdup(path ? path : "/usr/share/datasets/fashion-mnist");
        c->data_shuffle = arg_i(data, "shuffle", 1) != 0;
    }
    c->batch = ir_attr_int(train, "batch", 32);
    c->accumulate = ir_attr_int(train, "accumulate", 1);
    c->epochs = ir_attr_int(train, "epochs", 1);
    c->steps = ir_attr_int(train, "steps", 0);
    c->seed = ir_attr_int(train, "seed", 0);
    c->eval_every = ir_attr_int(train, "eval_every", -1);
    c->log_every = ir_attr_int(train, "log_every", 100);
    c->threads = ir_attr_int(train, "threads", 0);

    const ir_attr_val *opt = call_of(train, "optimizer");
    const char *on = opt ? opt->s : "sgd";
    c->opt.kind = !strcmp(on, "adam") ? KL_OPT_ADAM : !strcmp(on, "adamw") ? KL_OPT_ADAMW : KL_OPT_SGD;
    c->opt.lr = arg_f(opt, "lr", c->opt.kind == KL_OPT_SGD ? 0.01 : 0.001);
    c->opt.momentum = arg_f(opt, "momentum", 0);
    c->opt.nesterov = arg_i(opt, "nesterov", 0) != 0;
    c->opt.beta1 = arg_f(opt, "beta1", 0.9);
    c->opt.beta2 = arg_f(opt, "beta2", 0.999);
    c->opt.eps = arg_f(opt, "eps", 1e-8);
    c->opt.weight_decay = arg_f(opt, "weight_decay", c->opt.kind == KL_OPT_ADAMW ? 0.01 : 0);

    const ir_attr_val *s = call_of(train, "schedule");
    const char *sn = s ? s->s : "constant";
    c->sched.kind = !strcmp(sn, "step") ? KL_SCHED_STEP
                    : !strcmp(sn, "cosine") ? KL_SCHED_COSINE
                    : !strcmp(sn, "warmup_cosine") ? KL_SCHED_WARMUP_COSINE
                    : !strcmp(sn, "linear") ? KL_SCHED_LINEAR : KL_SCHED_CONSTANT;
    c->sched.warmup = arg_i(s, "warmup", 0);
    c->sched.every = arg_i(s, "every", 1);
    c->sched.gamma = arg_f(s, "gamma", 0.1);
    c->sched.span = ir_attr_int(train, "schedule_steps", 0);
    c->sched.min_lr = c->sched.kind == KL_SCHED_LINEAR ? arg_f(s, "end_lr", 0) : arg_f(s, "min_lr", 0);

    const char *lrs = ir_attr_str(train, "lr_scaling", "none");
    c->lr_scaling = !strcmp(lrs, "linear") ? KL_LRS_LINEAR : !strcmp(lrs, "sqrt") ? KL_LRS_SQRT : KL_LRS_NONE;
    c->base_batch = ir_attr_int(train, "base_batch", 0);
    c->clip = ir_attr_float(train, "clip", 0);
    const char *prec = ir_attr_str(train, "precision", "fp32");
    c->precision = !strcmp(prec, "bf16") ? KL_PREC_BF16 : !strcmp(prec, "fp16") ? KL_PREC_FP16 : KL_PREC_FP32;

    const ir_attr_val *ls = call_of(train, "loss_scale");
    c->loss_scale.dynamic = !ls || !strcmp(ls->s, "dynamic");
    c->loss_scale.init = arg_f(ls, "scale", c->loss_scale.dynamic ? 65536 : 1);
    c->loss_scale.growth = arg_f(ls, "growth", 2);
    c->loss_scale.backoff = arg_f(ls, "backoff", 0.5);
    c->loss_scale.interval = arg_i(ls, "interval", 2000);
    c->max_skipped_steps = ir_attr_int(train, "max_skipped_steps", 32);

    const char *sh = ir_attr_str(train, "shard", "none");
    c->shard = !strcmp(sh, "dp") ? KL_SHARD_DP : !strcmp(sh, "zero1") ? KL_SHARD_ZERO1 : !strcmp(sh, "zero2") ? KL_SHARD_ZERO2
               : !strcmp(sh, "zero3") ? KL_SHARD_ZERO3 : KL_SHARD_NONE;

    ir_attr *rc = ir_attrs_find(train, "recompute");
    if (rc && rc->val.kind == IR_ATTR_LIST) {
        kl_buf b = {0};
        for (int i = 0; i < rc->val.nitems; i++)
            kl_buf_printf(&b, "%s%s", i ? "," : "", rc->val.items[i].s);
        c->recompute = kl_buf_take(&b);
    } else {
        c->recompute = kl_xstrdup(rc && rc->val.kind == IR_ATTR_STR ? rc->val.s : "copies");
    }
    c->memory_limit = ir_attr_int(train, "memory_limit", 0);
    const char *tb = ir_attr_str(train, "tensorboard", NULL);
    c->tensorboard = tb ? kl_xstrdup(tb) : NULL;
    c->bucket = ir_attr_int(train, "bucket", 25 << 20);
    c->overlap = strcmp(ir_attr_str(train, "overlap", "on"), "off") != 0;
    c->tensor_parallel = (int)ir_attr_int(train, "tensor_parallel", 1);
    c->sync_batchnorm = ir_attr_int(train, "sync_batchnorm", 0) != 0;
    /* Clamped, not wrapped: a huge count is refused as more stages than
     * the model has (passes/pipeline_stages.c), never read as a small one. */
    int64_t pp = ir_attr_int(train, "pipeline_parallel", 1);
    c->pipeline_parallel = pp > INT_MAX ? INT_MAX : (int)pp;
    const char *ps = ir_attr_str(train, "pipeline_schedule", "1f1b");
    c->pipeline_schedule = !strcmp(ps, "gpipe") ? KL_PIPE_GPIPE : !strcmp(ps, "interleaved") ? KL_PIPE_INTERLEAVED
                           : !strcmp(ps, "zero_bubble") ? KL_PIPE_ZERO_BUBBLE : KL_PIPE_1F1B;
    int64_t pv = ir_attr_int(train, "pipeline_virtual_stages", KL_PIPE_VIRTUAL);
    c->pipeline_virtual = pv > KL_PIPE_VIRTUAL_MAX ? KL_PIPE_VIRTUAL_MAX + 1 : (int)pv; /* refused by the pass */
    const char *tpr = ir_attr_str(train, "tp_reduce", "fp32");
    c->tp_reduce = !strcmp(tpr, "bf16") ? KL_TP_REDUCE_BF16 : !strcmp(tpr, "fp16") ? KL_TP_REDUCE_FP16
                   : !strcmp(tpr, "exact") ? KL_TP_REDUCE_EXACT : KL_TP_REDUCE_FP32;
    c->comm_timeout = ir_attr_float(train, "comm_timeout", 300);
    const ir_attr_val *es = call_of(train, "early_stop");
    if (es) {
        c->early_stop.metric = kl_xstrdup(ir_attr_str(es->args, "metric", "loss"));
        c->early_stop.patience = arg_i(es, "patience", 3);
        c->early_stop.min_delta = arg_f(es, "min_delta", 0);
    }
}

int kl_train_key_count(void) { return (int)KL_ARRAY_LEN(keys); }
const char *kl_train_key_name(int i) { return i >= 0 && i < (int)KL_ARRAY_LEN(keys) ? keys[i].key : NULL; }

void kl_train_config_free(kl_train_config *c)
{
    free(c->data_format);
    free(c->data_path);
    free(c->data_test);
    free(c->recompute);
    free(c->tensorboard);
    free(c->early_stop.metric);
    memset(c, 0, sizeof *c);
}

int64_t kl_train_base_batch(const kl_train_config *c)
{
    return c->base_batch ? c->base_batch : c->batch * c->accumulate;
}

double kl_train_scaled_lr(const kl_train_config *c, int64_t ranks)
{
    int64_t base = kl_train_base_batch(c);
    double ratio = (double)(c->batch * c->accumulate * ranks) / (double)base;
    switch (c->lr_scaling) {
    case KL_LRS_LINEAR: return c->opt.lr * ratio;
    case KL_LRS_SQRT: return c->opt.lr * sqrt(ratio);
    default: return c->opt.lr;
    }
}

const char *kl_precision_name(kl_precision p)
{
    return p == KL_PREC_BF16 ? "bf16" : p == KL_PREC_FP16 ? "fp16" : "fp32";
}

const char *kl_tp_reduce_name(kl_tp_reduce r)
{
    return r == KL_TP_REDUCE_BF16 ? "bf16" : r == KL_TP_REDUCE_FP16 ? "fp16" : r == KL_TP_REDUCE_EXACT ? "exact" : "fp32";
}

const char *kl_pipe_schedule_name(kl_pipe_schedule s)
{
    return s == KL_PIPE_GPIPE ? "gpipe" : s == KL_PIPE_INTERLEAVED ? "interleaved" : s == KL_PIPE_ZERO_BUBBLE ? "zero_bubble" : "1f1b";
}

int64_t kl_parse_bytes(const char *s)
{
    return parse_bytes(s);
}
