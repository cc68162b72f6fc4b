/* --generate: text from a checkpoint. An evaluation plan at batch 1 runs
 * once per new token over the last `context` tokens (the model's tokens
 * input [1, T], left-aligned, the rest zeros: causal attention keeps the
 * padding out of the rows before it), and the next byte is drawn from the
 * logits row of the last real token: the largest logit at temperature 0,
 * else softmax(logits / temperature) over the top_k largest (all when
 * 0), with a stream of (seed, token number). The same flags give the same
 * text at one thread (the logits are then bit for bit the same). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer.h"
#include "next_token.h"
#include "compile.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/safetensors.h"
#include "base/scalar.h"

typedef struct gen_model {
    kl_exec *e;
    int tokens, targets, logits; /* values; targets -1 when the model has none */
    int64_t context, vocab;
} gen_model;

/* The model's inputs must be tokens [1, T] and, optionally, targets of
 * the same shape (fed zeros); the cross-entropy's logits [T, V]. */
static int check_inputs(const ir_graph *g, gen_model *m, const char *model)
{
    m->tokens = m->targets = -1;
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind != IR_VAL_INPUT)
            continue;
        bool ok = (v->type.dtype == IR_I32 || v->type.dtype == IR_I64) && v->type.rank == 2;
        if (!strcmp(v->name, "tokens") && ok)
            m->tokens = v->id;
        else if (!strcmp(v->name, "targets") && ok)
            m->targets = v->id;
        else {
            char *ts = ir_type_str(&v->type);
            kl_error("%s: --generate feeds a language model's inputs tokens and targets (i32[batch, T]); "
                     "it has input '%s' (%s)",
                     model, v->name, ts);
            free(ts);
            return -1;
        }
    }
    if (m->tokens < 0) {
        kl_error("%s: --generate needs an input 'tokens' (i32[batch, T])", model);
        return -1;
    }
    m->context = ir_val(g, m->tokens)->type.dim[1];
    return 0;
}

static int make_model(trainer *t, const kl_source *src, gen_model *m)
{
    const char *kv[132];
    int n = 0;
    for (int i = 0; i < t->opt.nkv; i++)
        kv[n++] = t->opt.kv[i];
    kv[n++] = "batch";
    kv[n++] = "1";
    kv[n] = NULL;
    ir_graph *g = kl_compile_load(src, kv);
    kl_compile_opts co = {.mode = KL_MODE_EVAL, .stop_after = "passes"};
    kl_compiled *c = g ? kl_compile_graph(g, &co) : NULL;
    if (!c)
        return -1;
    g = kl_compiled_take_graph(c);
    if (check_inputs(g, m, t->model)) {
        ir_graph_free(g);
        return -1;
    }
    m->logits = train_logits_value(g);
    const ir_type *lt = m->logits >= 0 ? &ir_val(g, m->logits)->type : NULL;
    if (!lt || lt->rank != 2 || lt->dim[0] != m->context) {
        kl_error("%s: --generate reads the logits [T, vocabulary] of the model's cross_entropy; %s", t->model,
                 lt ? "they are not one row per position of tokens" : "the model has none");
        ir_graph_free(g);
        return -1;
    }
    m->vocab = lt->dim[1];
    if (m->vocab != 256) {
        kl_error("%s: --generate writes bytes, so the model's vocabulary must be 256 (byte-level tokens); it is %lld",
                 t->model, (long long)m->vocab);
        ir_graph_free(g);
        return -1;
    }
    kl_plan_opts po = {.keep = &m->logits, .nkeep = 1};
    co.stop_after = NULL;
    co.plan = &po;
    c = kl_compile_graph(g, &co);
    m->e = c ? kl_compiled_exec(t->s, c, NULL) : NULL;
    return m->e ? 0 : -1;
}

int train_generate(trainer *t, const kl_source *src)
{
    const train_options *o = &t->opt;
    gen_model m = {0};
    if (make_model(t, src, &m))
        return -1;
    kl_run_state rs = {0};
    if (o->resume ? kl_checkpoint_load_held(t->s, o->resume, &rs) : kl_st_init_session(t->s, o->init, false, true)) {
        kl_exec_free(m.e);
        return -1;
    }
    int64_t T = m.context, V = m.vocab, plen = (int64_t)strlen(o->generate);
    int64_t total = plen + o->gen_tokens;
    int32_t *seq = kl_xmalloc(sizeof(int32_t) * (size_t)total);
    for (int64_t i = 0; i < plen; i++)
        seq[i] = (unsigned char)o->generate[i];
    const ir_type *tt = &ir_val(m.e->g, m.tokens)->type, *lt = &ir_val(m.e->g, m.logits)->type;
    size_t in_bytes = (size_t)ir_type_bytes(tt), lbytes = (size_t)ir_type_bytes(lt);
    void *in = kl_xmalloc(in_bytes), *zeros = kl_xcalloc(1, in_bytes), *logits = kl_xmalloc(lbytes);
    float *row = kl_xmalloc(sizeof(float) * (size_t)V);
    train_scored *s = kl_xmalloc(sizeof *s * (size_t)V);
    kl_kargs args = {0, (uint64_t)t->cfg.seed};
    fwrite(o->generate, 1, (size_t)plen, stdout);
    for (int64_t len = plen; len < total; len++) {
        /* The last T tokens, left-aligned. */
        int64_t w = len < T ? len : T, from = len - w;
        memset(in, 0, in_bytes);
        for (int64_t i = 0; i < w; i++)
            kl_store_as(tt->dtype, in, i, (double)seq[from + i]);
        kl_exec_write(m.e, m.tokens, in, in_bytes);
        if (m.targets >= 0)
            kl_exec_write(m.e, m.targets, zeros, in_bytes);
        kl_exec_run(m.e, KL_ALL_PHASES, &args);
        kl_exec_read(m.e, m.logits, logits, lbytes);
        for (int64_t c = 0; c < V; c++)
            row[c] = (float)kl_load_as(lt->dtype, logits, (w - 1) * V + c);
        seq[len] = train_sample_pick(row, V, o->temperature, o->top_k, (uint64_t)t->cfg.seed, len - plen, s);
        putchar(seq[len]);
        fflush(stdout);
    }
    putchar('\n');
    free(seq), free(in), free(zeros), free(logits), free(row), free(s);
    kl_exec_free(m.e);
    return 0;
}
