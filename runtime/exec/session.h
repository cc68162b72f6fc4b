/* Executing plans: a session owns the device (backend) and the persistent
 * values (params and state), shared by every plan it runs; an exec is one
 * plan bound to memory (its arena and the session's persistent values). */
#ifndef KILN_SESSION_H
#define KILN_SESSION_H

#include "backend.h"
#include "runtime/comm/comm.h"
/* kl_load_as, kl_store_as, kl_init_values: host values of any dtype. */
#include "runtime/data/values.h"
/* Host bf16/f16 conversions (kl_f32_to_bf16, ...): the kernels' own text. */
#include "base/scalar.h"

typedef struct kl_persist {
    char *name;
    ir_type type;
    void *ptr;  /* device memory */
    char *role; /* "param", else the value's role attribute ("optimizer_state",
                 * "lowp", ...), else "state" */
} kl_persist;

typedef struct kl_session {
    kl_backend *be;
    uint64_t seed;
    KL_VEC(kl_persist) persist;
    bool no_graphs; /* never replay runs as recorded graphs (--no-cuda-graph) */
    kl_comm *comm;  /* the collectives' communicator (not owned); NULL: one rank */
    /* Collectives on a communication thread, overlapped with compute
     * (runtime/exec/overlap.h; train key overlap, on unless set off): the
     * thread, started by the first exec with collectives in a world of
     * more than one rank. */
    bool overlap;
    struct kl_comm_thread *comm_thread;
} kl_session;

/* A run recorded as a graph (on backends that record them): after
 * KL_GRAPH_WARMUP plain runs with one phase mask, the next is recorded and
 * every later one replays it. */
#define KL_GRAPH_WARMUP 2
typedef struct kl_exec_graph {
    unsigned mask;
    int runs;
    void *graph;
    bool failed;
} kl_exec_graph;

typedef struct kl_exec {
    kl_session *s;
    ir_graph *g;   /* owned */
    kl_plan *plan; /* owned */
    void *arena;
    bool arena_shared; /* another exec's arena (kl_exec_new_sharing) */
    void **ptrs;   /* per plan buffer */
    void ***args;  /* per step: kernel argument pointers */
    bool *lt_done; /* per step: the GEMM step before it did its work in
                      the GEMM's epilogue (kl_step.lt_covered) this run */
    double *step_seconds; /* per step, summed over runs, when profiling */
    int64_t *step_runs;
    /* Per step, when profiling: the part of step_seconds a collective on
     * the communication thread ran hidden behind compute (not waited for);
     * step_seconds - step_hidden is its exposed time. 0 for other steps. */
    double *step_hidden;
    struct kl_trace *trace; /* timeline of every step, when tracing */
    char **labels;          /* per step, for the timeline */
    kl_exec_graph graphs[8]; /* per phase mask run */
    int ngraphs;
    /* Start-up values (IR_PHASE_STARTUP steps) live in the arena: the
     * exec whose arena this is (itself, or the host it shares), and, in
     * that one, the exec whose start-up values the arena holds now. */
    struct kl_exec *arena_host;
    const struct kl_exec *arena_user;
    struct kl_overlap *overlap; /* NULL: collectives run in program order */
    /* The collectives of every run: their seconds (on the communication
     * thread, or inline), the part of those the executor spent waiting for
     * them (all of it without overlap; the rest was hidden behind
     * compute) and how many ran. */
    double comm_seconds, comm_waited;
    int64_t comm_calls;
    const struct kl_exec_filter *filter; /* during kl_exec_run_filtered */
} kl_exec;

kl_session *kl_session_new(kl_backend *be, uint64_t seed);
void kl_session_free(kl_session *s);
/* The persistent value named name, or NULL. */
kl_persist *kl_session_find(kl_session *s, const char *name);

/* Prepares the kernels of g's finished plan (compiled through memory
 * planning by driver/compile.c), allocates its arena and binds the
 * persistent values, creating and initialising those the session does not
 * have yet. Takes ownership of g and plan. NULL after an error. */
kl_exec *kl_exec_new(kl_session *s, ir_graph *g, kl_plan *plan);
/* The same, running in host's arena when its plan fits there, else in an
 * arena of its own: one arena for the training and evaluation plans, which
 * never run interleaved (a run of one overwrites every value of the other,
 * pinned ones included: feed inputs before each run, read results right
 * after it). host must outlive the exec. */
kl_exec *kl_exec_new_sharing(kl_session *s, ir_graph *g, kl_plan *plan, kl_exec *host);
void kl_exec_free(kl_exec *e);
/* A new arena for e's plan, whose offsets were placed again
 * (plan_memory_of: a pipeline stage's own), and every pointer bound to
 * it; before e runs and before another exec shares its arena. */
void kl_exec_rebind_arena(kl_exec *e);
/* Runs the steps whose phase is in phase_mask (1 << IR_PHASE_*): as a
 * replayed graph once warm, where the backend records graphs and neither
 * the session nor profiling rules it out. The start-up steps run first,
 * once: on the first run, and again only after another exec ran in the
 * same arena. */
void kl_exec_run(kl_exec *e, unsigned phase_mask, const kl_kargs *args);
#define KL_ALL_PHASES 7u
/* Pipeline parallelism (driver/train_pipeline.c): a rank runs its
 * stage's steps only. run[i]: whether this rank runs step i; at (may be
 * NULL): called after each step's place in the order, run or not (where
 * the stage sends what it made and receives what another stage made). */
typedef struct kl_exec_filter {
    const bool *run;
    void (*at)(void *ctx, int step);
    void *ctx;
} kl_exec_filter;
/* kl_exec_run of the steps f lets this rank run (never a replayed
 * graph; the start-up steps run whole, as in kl_exec_run). */
void kl_exec_run_filtered(kl_exec *e, unsigned phase_mask, const kl_kargs *args, const kl_exec_filter *f);

/* Starts timing every step of every run (synchronising after each). */
void kl_exec_profile(kl_exec *e);
/* Profiles and writes every step as an event of the timeline t. */
void kl_exec_trace(kl_exec *e, struct kl_trace *t);
/* Prints the time per step, largest first, grouped by label: op, source
 * location, calls, total and mean time, share, GB/s and GFLOP/s. */
void kl_exec_print_profile(const kl_exec *e, FILE *out, int top);

/* Copies host data into value v's buffer (bytes must match). Only inputs,
 * the loss, reports, kept values (kl_compile_opts.plan) and persistent values
 * may be accessed between runs: the plan reuses the memory of the rest. */
void kl_exec_write(kl_exec *e, int v, const void *host, size_t bytes);
void kl_exec_read(kl_exec *e, int v, void *host, size_t bytes);
/* Reads a scalar value as a double. */
double kl_exec_scalar(kl_exec *e, int v);
/* Fills every input with values from a stream seeded by seed: u8 in
 * [0, 256), floats in [-1, 1), other integers in [0, classes), classes
 * from the cross-entropy's logits (2 without one). For benches and
 * checks that need a step's data but no dataset. */
void kl_exec_random_inputs(kl_exec *e, uint64_t seed);

#endif
