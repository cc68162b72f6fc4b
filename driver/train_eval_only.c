/* --eval-only: the evaluation plans alone, compiled in arenas of their
 * own at the batch a training run evaluates with, the values from a
 * checkpoint (--resume) or safetensors (--init), one evaluation line and
 * record, and --predict's per-sample outputs. */
#include "trainer.h"
#include "budget.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/safetensors.h"
#include "compile.h"

/* An evaluation plan of batch rows in an arena of its own; with
 * --predict, the plan keeps the logits and the labels (or, without a
 * cross-entropy, the model's output) for reading after each run. */
static kl_exec *make_eval_only_exec(trainer *t, const kl_source *src, int64_t batch, bindings *b)
{
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)batch);
    ir_graph *g = train_load_with(src, &t->opt, "batch", num);
    kl_compile_opts co = {.mode = KL_MODE_EVAL, .stop_after = "passes"};
    kl_compiled *c = g ? kl_compile_graph(g, &co) : NULL;
    if (!c)
        return NULL;
    g = kl_compiled_take_graph(c);
    int logits = train_logits_value(g), out = -1;
    if (t->opt.predict && logits < 0) {
        /* The model's output is read after the run, and a fused group
         * keeps its inner values in registers: unfused, every value is
         * stored. */
        ir_graph_free(g);
        co.no_fusion = true;
        g = train_load_with(src, &t->opt, "batch", num);
        c = g ? kl_compile_graph(g, &co) : NULL;
        if (!c)
            return NULL;
        g = kl_compiled_take_graph(c);
        out = train_output_value(g);
    }
    if (t->opt.predict && logits < 0 && out < 0 && !g->outputs.n) {
        kl_error("--predict: the model has no cross_entropy whose logits it could write, declares no output, and its "
                 "loss compares no output with a target (such as pred in mean((pred - y) ** 2))\n"
                 "---> declare what to write in the model: output NAME = EXPR");
        ir_graph_free(g);
        return NULL;
    }
    if (t->opt.predict && logits >= 0 && t->test_set.tokens) {
        kl_error("--predict writes one row of class scores per sample; a sample of token data has %lld positions\n"
                 "---> evaluate with --eval-only alone, or sample text with --generate",
                 (long long)t->test_set.context);
        ir_graph_free(g);
        return NULL;
    }
    if (t->opt.predict && logits >= 0 && ir_val(g, logits)->type.rank != 2) {
        kl_error("--predict: the cross_entropy's logits are %s; --predict writes one row of class scores per "
                 "sample (logits [batch, classes])",
                 ir_type_str(&ir_val(g, logits)->type));
        ir_graph_free(g);
        return NULL;
    }
    /* The labels --predict writes are the value the cross-entropy reads
     * (whatever field of the data it is bound to, after any cast), kept
     * like the logits so that neither stays inside a fused kernel. */
    int keep[2] = {logits, train_labels_value(g)};
    kl_plan_opts po = {.keep = keep, .nkeep = 2};
    if (logits < 0) {
        /* No cross-entropy: the model's output alone. */
        keep[0] = out;
        po.nkeep = 1;
    }
    co.stop_after = NULL;
    co.plan = t->opt.predict ? &po : NULL;
    c = kl_compile_graph(g, &co);
    kl_exec *e = c ? kl_compiled_exec(t->s, c, NULL) : NULL;
    if (!e || train_bind_inputs(e->g, &t->test_set, b, t->model)) {
        kl_exec_free(e);
        return NULL;
    }
    return e;
}

/* --eval-only: the evaluation plans alone, at the batch a training run
 * evaluates with (the largest that fits the training plan's arena, which
 * is compiled for its size alone): the same batches give the same sums,
 * so the line is the training run's. The values come from --resume (the
 * model's alone; the optimizer state is skipped) or --init. */
int train_run_eval_only(trainer *t, const kl_source *src, ir_graph *g)
{
    kl_compile_opts co = {.mode = KL_MODE_TRAIN};
    kl_compiled *c = kl_compile_graph(g, &co);
    if (!c)
        return -1;
    int64_t arena = c->plan->arena_bytes;
    kl_compiled_free(c);
    kl_replan rp = {src, t->opt.kv, 0, 0};
    int64_t n = t->test_set.count;
    if (n == 0) {
        kl_error("%s: --eval-only: the data has no test split to evaluate (shards(..., test = \"...\"))", t->model);
        return -1;
    }
    int64_t eb = kl_eval_batch_within(&rp, n, t->cfg.batch, kl_eval_batch(n, t->cfg.batch), arena);
    if (!(t->eval = make_eval_only_exec(t, src, eb, &t->eb)))
        return -1;
    if (n % eb && !(t->eval_tail = make_eval_only_exec(t, src, n % eb, &t->etb)))
        return -1;
    if (kl_dataset_check_labels(&t->test_set, t->eb.ce_classes))
        return -1;
    kl_run_state rs = {0};
    if (t->opt.resume ? kl_checkpoint_load_held(t->s, t->opt.resume, &rs)
                      : kl_st_init_session(t->s, t->opt.init, t->opt.init_partial, false))
        return -1;
    if (t->opt.predict && train_predict_begin(t, n, t->eval->g))
        return -1;
    eval_result er;
    train_evaluate(t, &er);
    kl_buf line = {0}, json = {0};
    train_eval_metrics(t, &er, &line, &json);
    printf("eval  loss %.4f%s  (%lld samples)\n", er.loss, line.s, (long long)er.samples);
    fflush(stdout);
    train_json_line(t, "{\"type\": \"eval\", \"step\": %llu, \"loss\": %.6g%s}", (unsigned long long)rs.step, er.loss,
                    json.s);
    kl_buf_free(&line);
    kl_buf_free(&json);
    return t->opt.predict ? train_predict_finish(t) : 0;
}
