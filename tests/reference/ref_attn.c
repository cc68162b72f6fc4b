/* The reference of attention and its backward: the plain definition, the
 * Tq x Tk probabilities of one (batch, head) materialised in double,
 * written from the op's docs in ir/ops.def (not from codegen/k_attn.c). */
#include "ref_ops.h"

typedef struct attn_dims {
    int64_t batch, tq, tk, d, dv;
    bool causal;
    double scale;
} attn_dims;

static attn_dims dims_of(const ref_eval *r, const ir_node *n, int q0)
{
    const ir_type *q = TIN(r, n, q0), *k = TIN(r, n, q0 + 1), *v = TIN(r, n, q0 + 2);
    attn_dims a = {.batch = numel(q) / (q->dim[q->rank - 2] * q->dim[q->rank - 1])};
    a.tq = q->dim[q->rank - 2];
    a.d = q->dim[q->rank - 1];
    a.tk = k->dim[k->rank - 2];
    a.dv = v->dim[v->rank - 1];
    a.causal = attr_i(n, "causal", 1) != 0;
    a.scale = attr_f(n, "scale", 1 / sqrt((double)a.d));
    return a;
}

/* P = softmax(scale q k^T) of batch index b, masked entries exactly 0;
 * lse (when not NULL) gets each row's log-sum-exp. */
static void probabilities(const attn_dims *a, const double *q, const double *k, int64_t b, double *P, double *lse)
{
    for (int64_t i = 0; i < a->tq; i++) {
        double mx = -INFINITY, *row = P + i * a->tk;
        for (int64_t j = 0; j < a->tk; j++) {
            double s = 0;
            for (int64_t c = 0; c < a->d; c++)
                s += q[(b * a->tq + i) * a->d + c] * k[(b * a->tk + j) * a->d + c];
            row[j] = a->causal && j > i ? -INFINITY : s * a->scale;
            mx = fmax(mx, row[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < a->tk; j++)
            sum += exp(row[j] - mx);
        for (int64_t j = 0; j < a->tk; j++)
            row[j] = exp(row[j] - mx) / sum;
        if (lse)
            lse[b * a->tq + i] = mx + log(sum);
    }
}

void ref_ATTENTION(ref_eval *r, const ir_node *n)
{
    attn_dims a = dims_of(r, n, 0);
    double *q = IN(r, n, 0), *k = IN(r, n, 1), *v = IN(r, n, 2), *out = OUT(r, n, 0), *lse = OUT(r, n, 1);
    double *P = kl_xmalloc(sizeof(double) * (size_t)(a.tq * a.tk));
    for (int64_t b = 0; b < a.batch; b++) {
        probabilities(&a, q, k, b, P, lse);
        for (int64_t i = 0; i < a.tq; i++)
            for (int64_t c = 0; c < a.dv; c++) {
                double s = 0;
                for (int64_t j = 0; j < a.tk; j++)
                    s += P[i * a.tk + j] * v[(b * a.tk + j) * a.dv + c];
                out[(b * a.tq + i) * a.dv + c] = s;
            }
    }
    free(P);
}

/* dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(dP P)); dQ = scale dS K;
 * dK = scale dS^T Q. The saved out and lse operands are not used: P is
 * recomputed from q and k. */
static void attention_grad(ref_eval *r, const ir_node *n, bool want_q)
{
    attn_dims a = dims_of(r, n, 1);
    double *dout = IN(r, n, 0), *q = IN(r, n, 1), *k = IN(r, n, 2), *v = IN(r, n, 3);
    double *dq = want_q ? OUT(r, n, 0) : NULL, *dk = want_q ? NULL : OUT(r, n, 0), *dv = want_q ? NULL : OUT(r, n, 1);
    double *P = kl_xmalloc(sizeof(double) * (size_t)(a.tq * a.tk)), *dS = kl_xmalloc(sizeof(double) * (size_t)(a.tq * a.tk));
    for (int64_t b = 0; b < a.batch; b++) {
        probabilities(&a, q, k, b, P, NULL);
        for (int64_t i = 0; i < a.tq; i++) {
            double rowsum = 0;
            for (int64_t j = 0; j < a.tk; j++) {
                double dp = 0;
                for (int64_t c = 0; c < a.dv; c++)
                    dp += dout[(b * a.tq + i) * a.dv + c] * v[(b * a.tk + j) * a.dv + c];
                dS[i * a.tk + j] = dp;
                rowsum += dp * P[i * a.tk + j];
            }
            for (int64_t j = 0; j < a.tk; j++)
                dS[i * a.tk + j] = P[i * a.tk + j] * (dS[i * a.tk + j] - rowsum);
        }
        for (int64_t i = 0; want_q && i < a.tq; i++)
            for (int64_t c = 0; c < a.d; c++) {
                double s = 0;
                for (int64_t j = 0; j < a.tk; j++)
                    s += dS[i * a.tk + j] * k[(b * a.tk + j) * a.d + c];
                dq[(b * a.tq + i) * a.d + c] = a.scale * s;
            }
        for (int64_t j = 0; !want_q && j < a.tk; j++) {
            for (int64_t c = 0; c < a.d; c++) {
                double s = 0;
                for (int64_t i = 0; i < a.tq; i++)
                    s += dS[i * a.tk + j] * q[(b * a.tq + i) * a.d + c];
                dk[(b * a.tk + j) * a.d + c] = a.scale * s;
            }
            for (int64_t c = 0; c < a.dv; c++) {
                double s = 0;
                for (int64_t i = 0; i < a.tq; i++)
                    s += P[i * a.tk + j] * dout[(b * a.tq + i) * a.dv + c];
                dv[(b * a.tk + j) * a.dv + c] = s;
            }
        }
    }
    free(P);
    free(dS);
}

void ref_ATTENTION_GRAD_Q(ref_eval *r, const ir_node *n) { attention_grad(r, n, true); }
void ref_ATTENTION_GRAD_KV(ref_eval *r, const ir_node *n) { attention_grad(r, n, false); }
