/* The memory per rank of a sharded training graph against ZeRO's
 * formulas (README, "Many ranks"): params, gradients and optimizer state,
 * what the memory plan holds for them on one rank.
 *
 * ZeRO's paper counts mixed-precision Adam with 2-byte params and
 * gradients and K = 12 bytes of fp32 state per param (master, m, v):
 * dp (2 + 2 + K) Psi, zero1 2 Psi + 2 Psi + K Psi / N, zero2 2 Psi +
 * (2 + K) Psi / N, zero3 (2 + 2 + K) Psi / N. Kiln's layout differs in
 * its dtypes, not in what is partitioned: the params stay fp32 on every
 * rank (plus their 16-bit copies under bf16/fp16) and the gradients are
 * fp32 (the precision pass makes them so). So the check is against the
 * same formula with Kiln's bytes: P bytes of params and G of gradients
 * per param held whole or partitioned as the stage says, and the state
 * S per param (Adam's m, v: 8; and the fp32 master slice under ZeRO: 4)
 * over N: zero1 (P + G) Psi + S Psi / N, zero2 P Psi + (G + S) Psi / N,
 * zero3 (P + G + S') Psi / N, where the fp32 master slice is the param
 * (S' = the optimizer's state alone: Adam 8). Both formulas are
 * printed. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct rank_bytes {
    int64_t psi, params, grads, state, master;
    int stage;    /* 0: dp, 1: zero1, 2: zero2, 3: zero3 */
    bool lowp;    /* 16-bit copies of the params (bf16, fp16) */
    int k;        /* the formula's fp32 state bytes per param: master 4, Adam's m, v 8 (SGD: momentum 4) */
} rank_bytes;

static rank_bytes count(const ir_graph *g)
{
    rank_bytes r = {0};
    for (int i = 0; i < g->decls.n; i++) {
        const ir_value *v = ir_val(g, g->decls.v[i]);
        if (v->kind == IR_VAL_PARAM) {
            r.psi += ir_type_numel(&v->type);
            r.params += ir_type_bytes(&v->type);
        } else if (v->kind == IR_VAL_STATE) {
            /* Low-precision copies are params too; accumulators gradients. */
            const char *role = ir_attr_str(&v->attrs, "role", "");
            if (!strcmp(role, "tp_mask"))
                continue; /* a padded split's mask: a constant of its size */
            if (!strcmp(role, "lowp")) {
                r.params += ir_type_bytes(&v->type);
                r.lowp = true;
            }
            else if (!strcmp(role, "grad_acc"))
                r.grads += ir_type_bytes(&v->type);
            else if (!strcmp(role, "zero_master")) {
                r.master += ir_type_bytes(&v->type);
                r.stage = r.stage ? r.stage : 1;
            } else if (!strcmp(role, "zero3_master")) {
                /* The params' slices (passes/shard_zero3.c). */
                int64_t counts[32];
                int nc = ir_attr_ints(&v->attrs, "counts", counts, 32);
                for (int k = 0; k < nc; k++)
                    r.psi += counts[k];
                r.params += ir_type_bytes(&v->type);
                r.stage = 3;
            } else
                r.state += ir_type_bytes(&v->type);
        }
    }
    /* zero2's gradients are the reduce-scattered slices (made in
     * backward); the whole gradients live only until their bucket's
     * reduce-scatter. */
    int64_t slices = 0;
    r.k = 4;
    for (int i = 0; i < g->nodes.n; i++) {
        const ir_node *n = ir_nd(g, i);
        if (!n->dead && n->op == IR_OP_ADAM_UPDATE)
            r.k = 12;
        else if (!n->dead && n->op == IR_OP_SGD_UPDATE && r.k < 12)
            r.k = n->in.n >= 5 && !strcmp(ir_attr_str(&ir_val(g, n->in.v[4])->attrs, "role", ""), "optimizer_state") ? 8 : 4;
        if (!n->dead && n->op == IR_OP_REDUCE_SCATTER && n->phase == IR_PHASE_BACKWARD) {
            r.stage = r.stage == 3 ? 3 : 2;
            slices += ir_type_bytes(&ir_val(g, n->out.v[0])->type);
        }
    }
    bool accumulates = r.grads > 0;
    if (r.stage < 2)
        for (int i = 0; i < g->grads.n && !accumulates; i++)
            r.grads += ir_type_bytes(&ir_val(g, g->grads.v[i].grad)->type);
    else if (!accumulates)
        r.grads = slices;
    return r;
}

int64_t pass_param_count(const ir_graph *g) { return count(g).psi; }

char *pass_rank_memory(const ir_graph *g, int ranks)
{
    rank_bytes r = count(g);
    /* With tensor parallelism (shard_tp.c) a rank's Psi is its share:
     * the split params' slices and the replicated params, and ZeRO
     * partitions over the ranks / T data-parallel ranks of its slices. */
    int T = pass_tp_ranks(g), dp = ranks > T ? ranks / T : 1;
    double n = (double)dp, mb = 1e-6, P = (double)r.psi;
    int64_t total = r.params + r.grads + r.state + r.master;
    char *tp = T > 1 ? kl_xasprintf(" on this rank of a tensor-parallel group of %d, N = %d data-parallel ranks", T, dp)
                     : kl_xstrdup("");
    char *formulas = kl_xasprintf("ZeRO formulas (K = 12, Psi = %lld params%s): dp 16 Psi = %.2f MB, zero1 %.2f MB, zero2 "
                                  "%.2f MB, zero3 %.2f MB",
                                  (long long)r.psi, tp, 16 * P * mb, (4 * P + 12 * P / n) * mb, (2 * P + 14 * P / n) * mb,
                                  16 * P / n * mb);
    free(tp);
    char *out;
    if (r.stage == 0) {
        out = kl_xasprintf("per rank (%d rank%s, shard dp, everything replicated): params %.2f MB, gradients %.2f MB, "
                           "optimizer and other state %.2f MB, total %.2f MB = %.2f bytes per param; %s",
                           ranks > 1 ? ranks : 1, ranks > 1 ? "s" : "", r.params * mb, r.grads * mb, r.state * mb, total * mb,
                           r.psi ? (double)total / P : 0.0, formulas);
    } else {
        /* Kiln's bytes per param: fp32 params (and their 16-bit copies),
         * fp32 gradients, the fp32 state (master and the optimizer's). */
        double bp = r.lowp ? 6 : 4, bg = 4, bs = r.stage == 3 ? r.k - 4 : r.k;
        double formula = r.stage == 1   ? (bp + bg) * P + bs * P / n
                         : r.stage == 2 ? bp * P + (bg + bs) * P / n
                                        : (bp + bg + bs) * P / n;
        char *kf = r.stage == 1   ? kl_xasprintf("(%.0f + %.0f + %.0f / N) Psi", bp, bg, bs)
                   : r.stage == 2 ? kl_xasprintf("(%.0f + (%.0f + %.0f) / N) Psi", bp, bg, bs)
                                  : kl_xasprintf("(%.0f + %.0f + %.0f) Psi / N", bp, bg, bs);
        char *master = r.stage == 3 ? kl_xstrdup("") : kl_xasprintf(", fp32 master slices %.2f MB", r.master * mb);
        out = kl_xasprintf("per rank (%d rank%s, shard zero%d, %s): %s %.2f MB, gradients %.2f MB, optimizer state "
                           "%.2f MB%s, total %.2f MB; zero%d formula with Kiln's bytes %s = "
                           "%.2f MB (measured / formula %.4f); %s",
                           ranks > 1 ? ranks : 1, ranks > 1 ? "s" : "", r.stage,
                           r.stage == 1   ? "optimizer state and fp32 master partitioned"
                           : r.stage == 2 ? "gradients, optimizer state and fp32 master partitioned"
                                          : "params, gradients and optimizer state partitioned",
                           r.stage == 3 ? "param slices (fp32 masters)" : "params", r.params * mb, r.grads * mb,
                           r.state * mb, master, total * mb, r.stage, kf, formula * mb,
                           r.psi ? (double)total / formula : 0.0, formulas);
        free(kf);
        free(master);
    }
    free(formulas);
    return out;
}
