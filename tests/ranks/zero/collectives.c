/* The collectives reduce_scatter, all_gather and rank_broadcast against
 * known values, on every rank of an mpirun (or on one rank without one):
 *
 *   collectives        (tests/ranks/zero/collectives.sh runs it on 1-4 ranks)
 *
 * Rank r holds x[i] = (r + 1)(i + 1), small integers that f32, bf16 and
 * f16 carry exactly, so every result is known: reduce_scatter's element
 * j on rank r is (i + 1) N(N + 1)/2 at i = r ceil(n/N) + j while i < n,
 * else 0 (the padding); all_gather's element r n + i is (r + 1)(i + 1);
 * rank_broadcast from the last rank gives N (i + 1). Each is checked
 * twice: by the communicator's calls (runtime/comm/comm.h), for sizes 1, 7,
 * 10 and 12 (7 and 10 do not divide by 3 or 4), and through the executor
 * (a graph of the ops compiled by kl_compile_graph and run by a session:
 * the plan's collective steps). Prints one line per failure and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/scalar.h"
#include "driver/compile.h"
#include "runtime/comm/comm.h"
#include "runtime/exec/session.h"

static int bad;

static void put(ir_dtype dt, void *buf, int64_t i, double x) { kl_store_as(dt, buf, i, x); }
static double get(ir_dtype dt, const void *buf, int64_t i) { return kl_load_as(dt, buf, i); }

static void expect(const char *what, ir_dtype dt, int64_t n, int rank, int64_t i, double got, double want)
{
    if (got != want && bad++ < 20)
        fprintf(stderr, "FAIL: rank %d: %s (%s, n = %lld) element %lld is %g, not %g\n", rank, what, ir_dtype_name(dt),
                (long long)n, (long long)i, got, want);
}

static void fill(ir_dtype dt, void *x, int64_t n, int rank)
{
    for (int64_t i = 0; i < n; i++)
        put(dt, x, i, (double)(rank + 1) * (double)(i + 1));
}

/* rs (shard elements), ag (N n), bc (n) against the known values. */
static void check_results(const char *how, ir_dtype dt, int64_t n, int rank, int world, const void *rs, const void *ag,
                          const void *bc)
{
    int64_t shard = kl_comm_shard_count(n, world);
    char what[96];
    snprintf(what, sizeof what, "%s reduce_scatter", how);
    for (int64_t j = 0; j < shard; j++) {
        int64_t i = (int64_t)rank * shard + j;
        expect(what, dt, n, rank, j, get(dt, rs, j), i < n ? (double)(i + 1) * world * (world + 1) / 2 : 0.0);
    }
    snprintf(what, sizeof what, "%s all_gather", how);
    for (int64_t k = 0; k < (int64_t)world * n; k++)
        expect(what, dt, n, rank, k, get(dt, ag, k), (double)(k / n + 1) * (double)(k % n + 1));
    snprintf(what, sizeof what, "%s rank_broadcast", how);
    for (int64_t i = 0; bc && i < n; i++)
        expect(what, dt, n, rank, i, get(dt, bc, i), (double)world * (double)(i + 1));
}

static void by_calls(kl_comm *c, ir_dtype dt, int64_t n)
{
    int rank = kl_comm_rank(c), world = kl_comm_world(c);
    size_t esz = (size_t)ir_dtype_size(dt);
    int64_t shard = kl_comm_shard_count(n, world);
    void *x = kl_xmalloc((size_t)n * esz), *rs = kl_xmalloc((size_t)shard * esz), *ag = kl_xmalloc((size_t)(world * n) * esz);
    void *bc = kl_xmalloc((size_t)n * esz);
    fill(dt, x, n, rank);
    fill(dt, bc, n, rank);
    kl_comm_reduce_scatter(c, x, n, rs, dt, "x");
    kl_comm_all_gather(c, x, n, ag, dt, "x");
    kl_comm_broadcast(c, bc, n, dt, world - 1, "x");
    check_results("comm", dt, n, rank, world, rs, ag, bc);
    free(x);
    free(rs);
    free(ag);
    free(bc);
}

/* x -> reduce_scatter, all_gather, rank_broadcast (root the last rank),
 * each a report of an eval graph. */
static void by_executor(kl_comm *c, ir_dtype dt, int64_t n)
{
    int rank = kl_comm_rank(c), world = kl_comm_world(c);
    ir_graph *g = ir_graph_new("collectives");
    ir_type t = {dt, 1, {n}};
    int x = ir_declare(g, IR_VAL_INPUT, "x", &t, (kl_loc){0, 0});
    ir_attrs a = {0};
    ir_attrs_set_int(&a, "ranks", world);
    int rs = ir_emit(g, IR_OP_REDUCE_SCATTER, &x, 1, &a, "rs");
    int ag = ir_emit(g, IR_OP_ALL_GATHER, &x, 1, &a, "ag");
    ir_attrs_set_int(&a, "root", world - 1);
    int bc = ir_emit(g, IR_OP_RANK_BROADCAST, &x, 1, &a, "bc");
    ir_attrs_free(&a);
    int outs[3] = {rs, ag, bc};
    const char *names[3] = {"rs", "ag", "bc"};
    for (int i = 0; i < 3; i++) {
        ir_report r = {kl_xstrdup(names[i]), outs[i], false};
        kl_vec_push(g->reports, r);
    }
    kl_compile_opts cc = {.mode = KL_MODE_EVAL, .verify = true, .ranks = world};
    kl_compiled *comp = kl_compile_graph(g, &cc);
    if (!comp) {
        fprintf(stderr, "FAIL: rank %d: the graph of collectives (%s) does not compile\n", rank, ir_dtype_name(dt));
        bad++;
        return;
    }
    kl_cpu_options co = {.threads = 1, .quiet = true};
    kl_backend *be = kl_cpu_backend_new(&co);
    kl_session *s = kl_session_new(be, 1);
    s->comm = c;
    ir_graph *eg = comp->g;
    kl_exec *e = kl_compiled_exec(s, comp, NULL);
    if (!e) {
        fprintf(stderr, "FAIL: rank %d: no exec of the graph of collectives\n", rank);
        bad++;
        return;
    }
    size_t esz = (size_t)ir_dtype_size(dt);
    int64_t shard = kl_comm_shard_count(n, world);
    void *hx = kl_xmalloc((size_t)n * esz), *hrs = kl_xmalloc((size_t)shard * esz);
    void *hag = kl_xmalloc((size_t)(world * n) * esz), *hbc = kl_xmalloc((size_t)n * esz);
    fill(dt, hx, n, rank);
    kl_exec_write(e, ir_find_value(eg, "x"), hx, (size_t)n * esz);
    kl_kargs ka = {0, 1};
    kl_exec_run(e, 1u << IR_PHASE_FORWARD, &ka);
    kl_exec_read(e, ir_find_value(eg, "rs"), hrs, (size_t)shard * esz);
    kl_exec_read(e, ir_find_value(eg, "ag"), hag, (size_t)(world * n) * esz);
    kl_exec_read(e, ir_find_value(eg, "bc"), hbc, (size_t)n * esz);
    check_results("executor", dt, n, rank, world, hrs, hag, hbc);
    free(hx);
    free(hrs);
    free(hag);
    free(hbc);
    kl_exec_free(e);
    s->comm = NULL;
    kl_session_free(s);
    be->ops->destroy(be);
}

int main(void)
{
    kl_comm *c = kl_comm_open();
    if (!c)
        return 1;
    const ir_dtype dts[] = {IR_F32, IR_BF16, IR_F16};
    const int64_t sizes[] = {1, 7, 10, 12};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            by_calls(c, dts[d], sizes[k]);
            by_executor(c, dts[d], sizes[k]);
        }
    if (!kl_comm_rank(c))
        printf("%s: %d ranks, reduce_scatter, all_gather, rank_broadcast: %s\n", kl_comm_desc(c), kl_comm_world(c),
               bad ? "FAILED" : "ok");
    int rc = bad ? 1 : 0;
    kl_comm_close(c);
    return rc;
}
