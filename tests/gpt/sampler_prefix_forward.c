/* The logits of a prompt's last byte by a full forward of the prompt
 * alone, through the f64 reference evaluator (tests/reference), with the
 * checkpoint's params:
 *   sampler_prefix_forward MODEL.kl CKPT PROMPT
 * The model is a byte-level language model with inputs tokens and
 * targets [batch, T] (examples/gpt.kl); it runs at batch 1 in evaluation
 * mode, the prompt left-aligned in tokens and the positions after it
 * filled with '~' (not --generate's zeros: a causal model's row of the
 * last prompt byte must not depend on them). Prints the argmax and then
 * the 256 logits of row strlen(PROMPT) - 1, one per line.
 * tests/gpt/sampler_prefix.sh compares --generate's greedy byte with it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "driver/trainer.h"
#include "reference/ref_eval.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/exec/session.h"
#include "unit/session_fixture.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.kl CKPT PROMPT\n", argv[0]);
        return 2;
    }
    kl_source src;
    if (kl_source_read(&src, argv[1]))
        return 1;
    const char *kv[] = {"batch", "1", NULL};
    ir_graph *g = kl_compile_load(&src, kv);
    kl_compile_opts co = {.mode = KL_MODE_EVAL, .verify = true, .stop_after = "passes"};
    kl_compiled *c = g ? kl_compile_graph(g, &co) : NULL;
    if (!c)
        return 1;
    g = kl_compiled_take_graph(c);
    int tokens = ir_find_value(g, "tokens"), targets = ir_find_value(g, "targets"), logits = train_logits_value(g);
    int64_t T = tokens >= 0 ? ir_val(g, tokens)->type.dim[1] : 0, plen = (int64_t)strlen(argv[3]);
    if (tokens < 0 || logits < 0 || plen < 1 || plen > T || ir_val(g, logits)->type.dim[1] != 256) {
        fprintf(stderr, "%s: needs tokens [1, T], a cross_entropy over 256 bytes and a prompt of 1..T bytes\n",
                argv[0]);
        return 1;
    }
    /* The params: a session over the same graph, loaded from the checkpoint. */
    kl_backend *be = fixture_cpu_backend();
    kl_session *s = kl_session_new(be, 1);
    co.stop_after = NULL;
    c = kl_compile_graph(g, &co);
    kl_exec *e = c ? kl_compiled_exec(s, c, NULL) : NULL;
    kl_run_state rs = {0};
    if (!e || kl_checkpoint_load_held(s, argv[2], &rs))
        return 1;
    ref_eval *r = ref_new(e->g);
    for (int i = 0; i < s->persist.n; i++) {
        const kl_persist *p = &s->persist.v[i];
        int v = ir_find_value(e->g, p->name);
        if (v < 0)
            continue;
        int64_t n = ir_type_numel(&p->type);
        void *raw = kl_xmalloc((size_t)ir_type_bytes(&p->type) + 1);
        double *x = kl_xmalloc(sizeof(double) * (size_t)(n + 1));
        be->ops->copy_out(be, raw, p->ptr, (size_t)ir_type_bytes(&p->type));
        for (int64_t j = 0; j < n; j++)
            x[j] = kl_load_as(p->type.dtype, raw, j);
        ref_set(r, v, x);
        free(raw), free(x);
    }
    double *in = kl_xcalloc((size_t)T, sizeof(double)), *zeros = kl_xcalloc((size_t)T, sizeof(double));
    for (int64_t i = 0; i < T; i++)
        in[i] = i < plen ? (unsigned char)argv[3][i] : '~';
    ref_set(r, tokens, in);
    if (targets >= 0)
        ref_set(r, targets, zeros);
    ref_run(r, 1u << IR_PHASE_FORWARD);
    const double *row = r->v[logits] + (plen - 1) * 256;
    int best = 0;
    for (int t = 1; t < 256; t++)
        if (row[t] > row[best])
            best = t;
    printf("%d\n", best);
    for (int t = 0; t < 256; t++)
        printf("%.17g\n", row[t]);
    free(in), free(zeros);
    ref_free(r);
    kl_exec_free(e);
    kl_session_free(s);
    be->ops->destroy(be);
    kl_source_free(&src);
    return 0;
}
