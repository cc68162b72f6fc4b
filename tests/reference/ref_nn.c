/* Reference functions of GEMM, convolution, reductions, losses, pooling
 * and normalisation, forward and backward. */
#include "ref_ops.h"

/* ---- GEMM and convolution ---- */

/* y[..., i, j] = sum_k A[..., i, k] B[..., k, j], A = a or a^T, B = b or
 * b^T, batch dims broadcast. */
void ref_MATMUL(ref_eval *r, const ir_node *n)
{
    const ir_type *ta = TIN(r, n, 0), *tb = TIN(r, n, 1), *ty = TOUT(r, n, 0);
    double *a = IN(r, n, 0), *b = IN(r, n, 1), *y = OUT(r, n, 0);
    bool tra = attr_i(n, "transpose_a", 0), trb = attr_i(n, "transpose_b", 0);
    int64_t M = ty->dim[ty->rank - 2], N = ty->dim[ty->rank - 1];
    int64_t K = ta->dim[ta->rank - (tra ? 2 : 1)];
    ir_type ya = *ty, ba = *ta, bb = *tb; /* batch shapes */
    ya.rank -= 2, ba.rank -= 2, bb.rank -= 2;
    int64_t idx[IR_MAX_RANK];
    for (int64_t t = 0, nb = numel(&ya); t < nb; t++) {
        unravel(&ya, t, idx);
        const double *A = a + bcast_at(&ba, &ya, idx) * M * K, *B = b + bcast_at(&bb, &ya, idx) * K * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (tra ? A[k * M + i] : A[i * K + k]) * (trb ? B[j * K + k] : B[k * N + j]);
                y[(t * M + i) * N + j] = s;
            }
    }
}

typedef struct conv_geom {
    int64_t n, c, h, w;     /* input */
    int64_t o, oh, ow;      /* output */
    int64_t kh, kw, groups;
    int64_t s[2], p[2], d[2];
} conv_geom;

static conv_geom conv_of(const ir_node *n, const ir_type *x, const ir_type *wt, const ir_type *y)
{
    conv_geom g = {x->dim[0], x->dim[1], x->dim[2], x->dim[3], y->dim[1], y->dim[2], y->dim[3],
                   wt->dim[2], wt->dim[3], attr_i(n, "groups", 1), {0}, {0}, {0}};
    attr_pair(n, "stride", g.s);
    attr_pair(n, "pad", g.p);
    attr_pair(n, "dilation", g.d);
    return g;
}

/* Visits every (output element, tap) pair of a convolution: out and w
 * flat indices, and the input's (-1 where the tap reads padding). */
typedef void (*conv_visit)(void *arg, int64_t yi, int64_t wi, int64_t xi);

static void conv_taps(const conv_geom *g, conv_visit f, void *arg)
{
    int64_t cg = g->c / g->groups, og = g->o / g->groups;
    for (int64_t b = 0; b < g->n; b++)
        for (int64_t o = 0; o < g->o; o++)
            for (int64_t i = 0; i < g->oh; i++)
                for (int64_t j = 0; j < g->ow; j++) {
                    int64_t yi = ((b * g->o + o) * g->oh + i) * g->ow + j;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t u = 0; u < g->kh; u++)
                            for (int64_t v = 0; v < g->kw; v++) {
                                int64_t hi = i * g->s[0] - g->p[0] + u * g->d[0];
                                int64_t wi = j * g->s[1] - g->p[1] + v * g->d[1];
                                int64_t ci = (o / og) * cg + c;
                                int64_t xi = hi < 0 || hi >= g->h || wi < 0 || wi >= g->w
                                                 ? -1
                                                 : ((b * g->c + ci) * g->h + hi) * g->w + wi;
                                f(arg, yi, ((o * cg + c) * g->kh + u) * g->kw + v, xi);
                            }
                }
}

typedef struct conv_bufs {
    double *x, *w, *y;
} conv_bufs;

static void fwd_tap(void *arg, int64_t yi, int64_t wi, int64_t xi)
{
    conv_bufs *c = arg;
    if (xi >= 0)
        c->y[yi] += c->x[xi] * c->w[wi];
}

static void grad_input_tap(void *arg, int64_t yi, int64_t wi, int64_t xi)
{
    conv_bufs *c = arg; /* x is dx here, y is dy */
    if (xi >= 0)
        c->x[xi] += c->y[yi] * c->w[wi];
}

static void grad_weight_tap(void *arg, int64_t yi, int64_t wi, int64_t xi)
{
    conv_bufs *c = arg; /* w is dw here, y is dy */
    if (xi >= 0)
        c->w[wi] += c->y[yi] * c->x[xi];
}

void ref_CONV2D(ref_eval *r, const ir_node *n)
{
    conv_geom g = conv_of(n, TIN(r, n, 0), TIN(r, n, 1), TOUT(r, n, 0));
    conv_bufs c = {IN(r, n, 0), IN(r, n, 1), OUT(r, n, 0)};
    conv_taps(&g, fwd_tap, &c);
    if (n->in.n == 3) {
        double *bias = IN(r, n, 2);
        for (int64_t i = 0, m = numel(TOUT(r, n, 0)); i < m; i++)
            c.y[i] += bias[(i / (g.oh * g.ow)) % g.o];
    }
}

/* conv2d_grad_input(dy, w) -> dx, dx's shape in the attributes */
void ref_CONV2D_GRAD_INPUT(ref_eval *r, const ir_node *n)
{
    conv_geom g = conv_of(n, TOUT(r, n, 0), TIN(r, n, 1), TIN(r, n, 0));
    conv_bufs c = {OUT(r, n, 0), IN(r, n, 1), IN(r, n, 0)};
    conv_taps(&g, grad_input_tap, &c);
}

/* conv2d_grad_weight(dy, x) -> dw */
void ref_CONV2D_GRAD_WEIGHT(ref_eval *r, const ir_node *n)
{
    conv_geom g = conv_of(n, TIN(r, n, 1), TOUT(r, n, 0), TIN(r, n, 0));
    conv_bufs c = {IN(r, n, 1), OUT(r, n, 0), IN(r, n, 0)};
    conv_taps(&g, grad_weight_tap, &c);
}

/* ---- reductions and losses ---- */

/* x's shape with the reduced axes (attribute "axis", normalised by the
 * shape rule) set to 1: the keepdim shape, whose flat index is the
 * result's with or without keepdim. */
static ir_type kept_shape(const ir_node *n, const ir_type *x)
{
    int64_t axes[IR_MAX_RANK];
    int na = ir_attr_ints(&n->attrs, "axis", axes, IR_MAX_RANK);
    ir_type k = *x;
    for (int i = 0; i < na; i++)
        k.dim[axes[i]] = 1;
    return k;
}

typedef enum { RED_SUM, RED_MEAN, RED_MAX } red_kind;

static void reduce(ref_eval *r, const ir_node *n, red_kind kind)
{
    const ir_type *tx = TIN(r, n, 0);
    ir_type k = kept_shape(n, tx);
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    int64_t m = numel(&k), idx[IR_MAX_RANK];
    for (int64_t j = 0; j < m; j++)
        y[j] = kind == RED_MAX ? -INFINITY : 0;
    for (int64_t i = 0, nx = numel(tx); i < nx; i++) {
        unravel(tx, i, idx);
        int64_t j = bcast_at(&k, tx, idx);
        y[j] = kind == RED_MAX ? (x[i] > y[j] || x[i] != x[i] ? x[i] : y[j]) : y[j] + x[i];
    }
    if (kind == RED_MEAN)
        for (int64_t j = 0; j < m; j++)
            y[j] /= (double)(numel(tx) / m);
}

void ref_SUM(ref_eval *r, const ir_node *n) { reduce(r, n, RED_SUM); }
void ref_MEAN(ref_eval *r, const ir_node *n) { reduce(r, n, RED_MEAN); }
void ref_MAX(ref_eval *r, const ir_node *n) { reduce(r, n, RED_MAX); }

/* x viewed as [outer, len, inner] around axis */
typedef struct axis_view {
    int64_t outer, len, inner;
} axis_view;

static axis_view around(const ir_type *t, int axis)
{
    axis_view a = {1, t->dim[axis], 1};
    for (int d = 0; d < t->rank; d++)
        if (d < axis)
            a.outer *= t->dim[d];
        else if (d > axis)
            a.inner *= t->dim[d];
    return a;
}

#define AT(av, o, i, q) (((o) * (av).len + (i)) * (av).inner + (q))

/* softmax (log = false) or log-softmax along axis */
static void softmax(ref_eval *r, const ir_node *n, bool logs)
{
    axis_view a = around(TIN(r, n, 0), (int)attr_i(n, "axis", -1));
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t o = 0; o < a.outer; o++)
        for (int64_t q = 0; q < a.inner; q++) {
            double mx = -INFINITY, s = 0;
            for (int64_t i = 0; i < a.len; i++)
                mx = fmax(mx, x[AT(a, o, i, q)]);
            for (int64_t i = 0; i < a.len; i++)
                s += exp(x[AT(a, o, i, q)] - mx);
            for (int64_t i = 0; i < a.len; i++) {
                double z = x[AT(a, o, i, q)] - mx;
                y[AT(a, o, i, q)] = logs ? z - log(s) : exp(z) / s;
            }
        }
}

void ref_SOFTMAX(ref_eval *r, const ir_node *n) { softmax(r, n, false); }
void ref_LOG_SOFTMAX(ref_eval *r, const ir_node *n) { softmax(r, n, true); }

/* log sum_c exp(row[c]) */
static double logsumexp(const double *row, int64_t C)
{
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; c++)
        mx = fmax(mx, row[c]);
    for (int64_t c = 0; c < C; c++)
        s += exp(row[c] - mx);
    return mx + log(s);
}

static int64_t label_at(const double *labels, int64_t i, int64_t C)
{
    int64_t l = (int64_t)labels[i];
    if (l < 0 || l >= C)
        kl_panic("reference: label %lld out of range [0, %lld)", (long long)l, (long long)C);
    return l;
}

/* Whether row i counts: its label is not the node's ignore_index. */
static bool row_counts(const ir_node *n, const double *lab, int64_t i)
{
    return !ir_attrs_find(&n->attrs, "ignore_index") || lab[i] != (double)attr_i(n, "ignore_index", 0);
}

/* mean over the rows that count of -log softmax(logits)[label] */
void ref_CROSS_ENTROPY(ref_eval *r, const ir_node *n)
{
    const ir_type *t = TIN(r, n, 0);
    int64_t N = t->dim[0], C = t->dim[1], kept = 0;
    double *l = IN(r, n, 0), *lab = IN(r, n, 1), *y = OUT(r, n, 0), s = 0;
    for (int64_t i = 0; i < N; i++)
        if (row_counts(n, lab, i)) {
            s += logsumexp(l + i * C, C) - l[i * C + label_at(lab, i, C)];
            kept++;
        }
    y[0] = s / (double)kept;
}

/* the fraction of rows whose largest logit (the first, on ties) is the label */
void ref_ACCURACY(ref_eval *r, const ir_node *n)
{
    const ir_type *t = TIN(r, n, 0);
    int64_t N = t->dim[0], C = t->dim[1], hits = 0;
    double *l = IN(r, n, 0), *lab = IN(r, n, 1), *y = OUT(r, n, 0);
    for (int64_t i = 0; i < N; i++) {
        int64_t best = 0;
        for (int64_t c = 1; c < C; c++)
            if (l[i * C + c] > l[i * C + best])
                best = c;
        hits += best == label_at(lab, i, C);
    }
    y[0] = (double)hits / (double)N;
}

/* cross_entropy_grad(dloss, logits, labels) = dloss (softmax - onehot) / N
 * on the rows that count (N of them, counted here, not read from the
 * count operand), 0 on the others */
void ref_CROSS_ENTROPY_GRAD(ref_eval *r, const ir_node *n)
{
    const ir_type *t = TIN(r, n, 1);
    int64_t N = t->dim[0], C = t->dim[1], kept = 0;
    double *dl = IN(r, n, 0), *l = IN(r, n, 1), *lab = IN(r, n, 2), *y = OUT(r, n, 0);
    for (int64_t i = 0; i < N; i++)
        kept += row_counts(n, lab, i);
    for (int64_t i = 0; i < N; i++) {
        if (!row_counts(n, lab, i)) {
            for (int64_t c = 0; c < C; c++)
                y[i * C + c] = 0;
            continue;
        }
        double lse = logsumexp(l + i * C, C);
        int64_t k = label_at(lab, i, C);
        for (int64_t c = 0; c < C; c++)
            y[i * C + c] = dl[0] * (exp(l[i * C + c] - lse) - (c == k)) / (double)kept;
    }
}

/* sum_to(x): x summed down to the shape it broadcasts from */
void ref_SUM_TO(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0), *ty = TOUT(r, n, 0);
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    int64_t idx[IR_MAX_RANK];
    for (int64_t i = 0, m = numel(tx); i < m; i++) {
        unravel(tx, i, idx);
        y[bcast_at(ty, tx, idx)] += x[i];
    }
}

/* softmax_grad(dy, y) = y (dy - sum(dy y)) along axis */
void ref_SOFTMAX_GRAD(ref_eval *r, const ir_node *n)
{
    axis_view a = around(TIN(r, n, 0), (int)attr_i(n, "axis", -1));
    double *dy = IN(r, n, 0), *y = IN(r, n, 1), *dx = OUT(r, n, 0);
    for (int64_t o = 0; o < a.outer; o++)
        for (int64_t q = 0; q < a.inner; q++) {
            double s = 0;
            for (int64_t i = 0; i < a.len; i++)
                s += dy[AT(a, o, i, q)] * y[AT(a, o, i, q)];
            for (int64_t i = 0; i < a.len; i++)
                dx[AT(a, o, i, q)] = y[AT(a, o, i, q)] * (dy[AT(a, o, i, q)] - s);
        }
}

/* log_softmax_grad(dy, y) = dy - exp(y) sum(dy) along axis */
void ref_LOG_SOFTMAX_GRAD(ref_eval *r, const ir_node *n)
{
    axis_view a = around(TIN(r, n, 0), (int)attr_i(n, "axis", -1));
    double *dy = IN(r, n, 0), *y = IN(r, n, 1), *dx = OUT(r, n, 0);
    for (int64_t o = 0; o < a.outer; o++)
        for (int64_t q = 0; q < a.inner; q++) {
            double s = 0;
            for (int64_t i = 0; i < a.len; i++)
                s += dy[AT(a, o, i, q)];
            for (int64_t i = 0; i < a.len; i++)
                dx[AT(a, o, i, q)] = dy[AT(a, o, i, q)] - exp(y[AT(a, o, i, q)]) * s;
        }
}

/* ---- windows ---- */

typedef struct pool_geom {
    int64_t nc, h, w, oh, ow, k[2], s[2], p[2];
} pool_geom;

/* x is the input [N, C, H, W], y the output */
static pool_geom pool_of(const ir_node *n, const ir_type *x, const ir_type *y)
{
    pool_geom g = {x->dim[0] * x->dim[1], x->dim[2], x->dim[3], y->dim[2], y->dim[3], {0}, {0}, {0}};
    attr_pair(n, "size", g.k);
    attr_pair(n, "stride", g.s);
    attr_pair(n, "pad", g.p);
    return g;
}

/* The input index of tap (u, v) of output (c, i, j), -1 in the padding. */
static int64_t pool_tap(const pool_geom *g, int64_t c, int64_t i, int64_t j, int64_t u, int64_t v)
{
    int64_t hi = i * g->s[0] - g->p[0] + u, wi = j * g->s[1] - g->p[1] + v;
    return hi < 0 || hi >= g->h || wi < 0 || wi >= g->w ? -1 : (c * g->h + hi) * g->w + wi;
}

/* The window's first largest input (row-major), its first NaN if it
 * holds one (NaN propagates), -1 when all padding. */
static int64_t pool_argmax(const pool_geom *g, const double *x, int64_t c, int64_t i, int64_t j)
{
    int64_t best = -1;
    for (int64_t u = 0; u < g->k[0]; u++)
        for (int64_t v = 0; v < g->k[1]; v++) {
            int64_t t = pool_tap(g, c, i, j, u, v);
            if (t >= 0 && (best < 0 || x[t] > x[best] || (x[t] != x[t] && x[best] == x[best])))
                best = t;
        }
    return best;
}

/* max over the window; padding never wins */
void ref_MAXPOOL(ref_eval *r, const ir_node *n)
{
    pool_geom g = pool_of(n, TIN(r, n, 0), TOUT(r, n, 0));
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t c = 0; c < g.nc; c++)
        for (int64_t i = 0; i < g.oh; i++)
            for (int64_t j = 0; j < g.ow; j++)
                y[(c * g.oh + i) * g.ow + j] = x[pool_argmax(&g, x, c, i, j)];
}

/* the mean over the window, padding counting as zeros (divisor: the window size) */
void ref_AVGPOOL(ref_eval *r, const ir_node *n)
{
    pool_geom g = pool_of(n, TIN(r, n, 0), TOUT(r, n, 0));
    double *x = IN(r, n, 0), *y = OUT(r, n, 0);
    for (int64_t c = 0; c < g.nc; c++)
        for (int64_t i = 0; i < g.oh; i++)
            for (int64_t j = 0; j < g.ow; j++) {
                double s = 0;
                for (int64_t u = 0; u < g.k[0]; u++)
                    for (int64_t v = 0; v < g.k[1]; v++) {
                        int64_t t = pool_tap(&g, c, i, j, u, v);
                        s += t >= 0 ? x[t] : 0;
                    }
                y[(c * g.oh + i) * g.ow + j] = s / (double)(g.k[0] * g.k[1]);
            }
}

/* maxpool_grad(dy, x, y): dy goes to each window's first maximum */
void ref_MAXPOOL_GRAD(ref_eval *r, const ir_node *n)
{
    pool_geom g = pool_of(n, TIN(r, n, 1), TIN(r, n, 0));
    double *dy = IN(r, n, 0), *x = IN(r, n, 1), *dx = OUT(r, n, 0);
    (void)IN(r, n, 2);
    for (int64_t c = 0; c < g.nc; c++)
        for (int64_t i = 0; i < g.oh; i++)
            for (int64_t j = 0; j < g.ow; j++)
                dx[pool_argmax(&g, x, c, i, j)] += dy[(c * g.oh + i) * g.ow + j];
}

/* avgpool_grad(dy): dy / window size to every tap inside the input */
void ref_AVGPOOL_GRAD(ref_eval *r, const ir_node *n)
{
    pool_geom g = pool_of(n, TOUT(r, n, 0), TIN(r, n, 0));
    double *dy = IN(r, n, 0), *dx = OUT(r, n, 0);
    for (int64_t c = 0; c < g.nc; c++)
        for (int64_t i = 0; i < g.oh; i++)
            for (int64_t j = 0; j < g.ow; j++)
                for (int64_t u = 0; u < g.k[0]; u++)
                    for (int64_t v = 0; v < g.k[1]; v++) {
                        int64_t t = pool_tap(&g, c, i, j, u, v);
                        if (t >= 0)
                            dx[t] += dy[(c * g.oh + i) * g.ow + j] / (double)(g.k[0] * g.k[1]);
                    }
}

/* ---- normalisation ---- */

/* Batch norm statistics run over every axis but the channel (dim 1):
 * x viewed as [N, C, S]. Layer norm's over the last axis: [rows, D]. */
typedef struct norm_view {
    int64_t n, c, s; /* element (b, ch, k) at (b * c + ch) * s + k */
    bool batch;      /* per channel (batch norm) or per row (layer norm) */
} norm_view;

static norm_view norm_of(const ir_type *x, bool batch)
{
    if (!batch)
        return (norm_view){numel(x) / x->dim[x->rank - 1], x->dim[x->rank - 1], 1, false};
    norm_view v = {x->dim[0], x->dim[1], 1, true};
    for (int d = 2; d < x->rank; d++)
        v.s *= x->dim[d];
    return v;
}

/* Statistic index (channel or row) and feature index (gamma's) of element e. */
static int64_t stat_of(const norm_view *v, int64_t e) { return v->batch ? (e / v->s) % v->c : e / v->c; }
static int64_t feat_of(const norm_view *v, int64_t e) { return v->batch ? (e / v->s) % v->c : e % v->c; }
static int64_t nstats(const norm_view *v) { return v->batch ? v->c : v->n; }

/* mean and biased variance of every statistic */
static void moments(const norm_view *v, const double *x, int64_t total, double *mean, double *var)
{
    int64_t ns = nstats(v), cnt = total / ns;
    for (int64_t k = 0; k < ns; k++)
        mean[k] = var[k] = 0;
    for (int64_t e = 0; e < total; e++)
        mean[stat_of(v, e)] += x[e];
    for (int64_t k = 0; k < ns; k++)
        mean[k] /= (double)cnt;
    for (int64_t e = 0; e < total; e++) {
        double d = x[e] - mean[stat_of(v, e)];
        var[stat_of(v, e)] += d * d;
    }
    for (int64_t k = 0; k < ns; k++)
        var[k] /= (double)cnt;
}

/* y = (x - mean) invstd gamma + beta */
static void normalize(const norm_view *v, int64_t total, const double *x, const double *gamma, const double *beta,
                      const double *mean, const double *invstd, double *y)
{
    for (int64_t e = 0; e < total; e++) {
        int64_t k = stat_of(v, e), f = feat_of(v, e);
        y[e] = (x[e] - mean[k]) * invstd[k] * gamma[f] + beta[f];
    }
}

/* batchnorm(x, gamma, beta, running_mean, running_var) -> y, mean,
 * invstd = 1/sqrt(var + eps) over the batch; running statistics move by
 * momentum towards the batch's (the variance unbiased) in place. */
void ref_BATCHNORM(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0);
    norm_view v = norm_of(tx, true);
    int64_t total = numel(tx), cnt = total / v.c;
    double eps = attr_f(n, "eps", 1e-5), m = attr_f(n, "momentum", 0.1);
    double *x = IN(r, n, 0), *rm = IN(r, n, 3), *rv = IN(r, n, 4);
    double *mean = OUT(r, n, 1), *invstd = OUT(r, n, 2), *var = kl_xmalloc(sizeof(double) * (size_t)v.c);
    moments(&v, x, total, mean, var);
    for (int64_t c = 0; c < v.c; c++)
        invstd[c] = 1 / sqrt(var[c] + eps);
    normalize(&v, total, x, IN(r, n, 1), IN(r, n, 2), mean, invstd, OUT(r, n, 0));
    ir_dtype dm = TIN(r, n, 3)->dtype, dv = TIN(r, n, 4)->dtype;
    for (int64_t c = 0; c < v.c; c++) {
        rm[c] = ref_round(dm, (1 - m) * rm[c] + m * mean[c]);
        rv[c] = ref_round(dv, (1 - m) * rv[c] + m * var[c] * (double)cnt / (double)(cnt > 1 ? cnt - 1 : 1));
    }
    free(var);
}

/* batchnorm_infer(x, gamma, beta, running_mean, running_var): the running
 * statistics in place of the batch's */
void ref_BATCHNORM_INFER(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0);
    norm_view v = norm_of(tx, true);
    double eps = attr_f(n, "eps", 1e-5), *rv = IN(r, n, 4);
    double *invstd = kl_xmalloc(sizeof(double) * (size_t)v.c);
    for (int64_t c = 0; c < v.c; c++)
        invstd[c] = 1 / sqrt(rv[c] + eps);
    normalize(&v, numel(tx), IN(r, n, 0), IN(r, n, 1), IN(r, n, 2), IN(r, n, 3), invstd, OUT(r, n, 0));
    free(invstd);
}

/* batchnorm_apply(x, gamma, beta, mean, invstd): the saved statistics */
void ref_BATCHNORM_APPLY(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0);
    norm_view v = norm_of(tx, true);
    normalize(&v, numel(tx), IN(r, n, 0), IN(r, n, 1), IN(r, n, 2), IN(r, n, 3), IN(r, n, 4), OUT(r, n, 0));
}

/* layernorm(x, gamma, beta) -> y, mean, invstd over the last axis */
void ref_LAYERNORM(ref_eval *r, const ir_node *n)
{
    const ir_type *tx = TIN(r, n, 0);
    norm_view v = norm_of(tx, false);
    double eps = attr_f(n, "eps", 1e-5), *x = IN(r, n, 0);
    double *mean = OUT(r, n, 1), *invstd = OUT(r, n, 2), *var = kl_xmalloc(sizeof(double) * (size_t)v.n);
    moments(&v, x, numel(tx), mean, var);
    for (int64_t k = 0; k < v.n; k++)
        invstd[k] = 1 / sqrt(var[k] + eps);
    normalize(&v, numel(tx), x, IN(r, n, 1), IN(r, n, 2), mean, invstd, OUT(r, n, 0));
    free(var);
}

/* (dy, x, gamma, mean, invstd) -> dx, dgamma, dbeta of y = xhat gamma +
 * beta, xhat = (x - mean) invstd, the statistics over m elements:
 * dx = invstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma. */
static void norm_grad(ref_eval *r, const ir_node *n, bool batch)
{
    const ir_type *tx = TIN(r, n, 1);
    norm_view v = norm_of(tx, batch);
    int64_t total = numel(tx), ns = nstats(&v), cnt = total / ns;
    double *dy = IN(r, n, 0), *x = IN(r, n, 1), *gamma = IN(r, n, 2), *mean = IN(r, n, 3), *invstd = IN(r, n, 4);
    double *dx = OUT(r, n, 0), *dgamma = OUT(r, n, 1), *dbeta = OUT(r, n, 2);
    double *sg = kl_xcalloc((size_t)ns, sizeof(double)), *sgx = kl_xcalloc((size_t)ns, sizeof(double));
    for (int64_t e = 0; e < total; e++) {
        int64_t k = stat_of(&v, e), f = feat_of(&v, e);
        double xhat = (x[e] - mean[k]) * invstd[k], g = dy[e] * gamma[f];
        sg[k] += g;
        sgx[k] += g * xhat;
        dgamma[f] += dy[e] * xhat;
        dbeta[f] += dy[e];
    }
    for (int64_t e = 0; e < total; e++) {
        int64_t k = stat_of(&v, e), f = feat_of(&v, e);
        double xhat = (x[e] - mean[k]) * invstd[k];
        dx[e] = invstd[k] * (dy[e] * gamma[f] - sg[k] / (double)cnt - xhat * sgx[k] / (double)cnt);
    }
    free(sg);
    free(sgx);
}

void ref_BATCHNORM_GRAD(ref_eval *r, const ir_node *n) { norm_grad(r, n, true); }
void ref_LAYERNORM_GRAD(ref_eval *r, const ir_node *n) { norm_grad(r, n, false); }
