/* The simulated device's streams, events, copies, memsets and graphs.
 *
 * Each stream is a worker thread that runs its queue in order: a call
 * only queues work and returns, as on a GPU, so a host read before
 * cuStreamSynchronize, or a stream that uses another's result without
 * cuStreamWaitEvent, sees stale memory. Events carry a generation: a
 * record queues "complete generation g" and a wait queues "block until
 * generation g completed", g taken when the wait is queued (CUDA's
 * semantics: the most recent record at the time of the call).
 *
 * Capture (cuStreamBeginCapture) records the stream's work as a graph
 * instead of running it; cuGraphLaunch queues the recorded nodes, in
 * their recorded order, as one item of the stream it is launched on.
 * As in CUDA, a stream that waits on an event recorded in a capturing
 * stream joins the capture (its later work is recorded in the same
 * graph), and cuStreamEndCapture refuses a graph whose joined streams'
 * last work the origin stream has not waited for
 * (CUDA_ERROR_STREAM_CAPTURE_UNJOINED). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

typedef struct sim_op {
    sim_fn fn;
    void *arg;
    struct sim_op *next;
    CUstream stream;  /* queued on, or recorded from (a capture) */
    int lane;         /* in an executable graph: its branch's lane (-1: the launching stream's) */
    uint64_t *host_vc; /* the host's clock, taken when queued (sim_mem.c) */
} sim_op;

struct CUgraph_st {
    sim_op *head, *tail;
    int n;
    bool invalid;    /* an unsupported call during capture */
    CUstream origin; /* the stream that began the capture */
};

struct CUgraphExec_st {
    sim_op *nodes; /* the graph's, moved here */
    int n;
    int lanes[SIM_LANES]; /* one per joined stream's branch */
    int nlanes;
};

struct CUstream_st {
    struct CUstream_st *next_live; /* every live stream (sim_device_idle) */
    pthread_t th;
    sim_op *head, *tail;
    bool busy, quit;
    pthread_cond_t cv; /* work queued, or finished (under lock) */
    CUgraph capture;   /* capturing into this graph */
    /* While capturing: the nodes this stream recorded, and how many of
     * them the origin stream (or one joined to it) has waited for. */
    uint64_t captured, joined;
    uint64_t capture_id; /* of the capture it records into (a graph's number) */
    int lane;            /* its clock (sim_mem.c) */
    uint64_t host_epoch; /* the host's clock epoch its last operation took */
};

struct CUevent_st {
    unsigned flags;
    /* Recorded last in a capture: by which stream, after how many of its
     * nodes (a wait on it joins that capture). */
    uint64_t capture_id; /* 0: not recorded in a capture */
    CUstream capture_stream;
    uint64_t capture_at;
    uint64_t recorded, completed; /* generations */
    double when;                  /* seconds, at completion */
    uint64_t vc[SIM_LANES];       /* the recording lane's clock, at completion */
};

/* One lock for every queue and event: the simulator is about order, not
 * speed. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t events_cv = PTHREAD_COND_INITIALIZER;
static CUstream live_streams;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void free_ops(sim_op *o)
{
    while (o) {
        sim_op *n = o->next;
        free(o->arg);
        free(o->host_vc);
        free(o);
        o = n;
    }
}

/* KILN_SIMGPU_DELAY_MS=N: each queued item waits N ms before it runs, so
 * that a test sees what a missing wait or synchronisation does every
 * time, not only when the host happens to win. */
static int delay_ms(void)
{
    static int ms = -1;
    if (ms < 0) {
        const char *d = getenv("KILN_SIMGPU_DELAY_MS");
        ms = d ? atoi(d) : 0;
        ms = ms < 0 ? 0 : ms;
    }
    return ms;
}

static void *worker(void *arg)
{
    CUstream s = arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!s->head && !s->quit)
            pthread_cond_wait(&s->cv, &lock);
        if (!s->head)
            break;
        sim_op *o = s->head;
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        s->busy = true;
        pthread_mutex_unlock(&lock);
        if (delay_ms()) {
            struct timespec d = {delay_ms() / 1000, (long)(delay_ms() % 1000) * 1000000L};
            nanosleep(&d, NULL);
        }
        if (o->host_vc)
            sim_clock_merge(s->lane, o->host_vc);
        sim_lane_enter(s->lane);
        if (!sim_sticky())
            o->fn(o->arg);
        free(o->arg);
        free(o->host_vc);
        free(o);
        pthread_mutex_lock(&lock);
        s->busy = false;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

CUresult sim_enqueue(CUstream s, sim_fn fn, void *arg, size_t arg_bytes)
{
    sim_op *o = calloc(1, sizeof *o);
    o->fn = fn;
    o->stream = s;
    o->lane = -1;
    if (arg_bytes) {
        o->arg = malloc(arg_bytes);
        memcpy(o->arg, arg, arg_bytes);
    }
    if (!s) {
        /* The legacy default stream: here, at once (Kiln never uses it),
         * in the host's lane. */
        sim_lane_enter(0);
        fn(o->arg);
        sim_host_synced_lane(0);
        free(o->arg);
        free(o);
        return sim_sticky();
    }
    pthread_mutex_lock(&lock);
    if (s->capture) {
        CUgraph g = s->capture;
        s->captured++;
        if (g->tail)
            g->tail->next = o;
        else
            g->head = o;
        g->tail = o;
        g->n++;
    } else {
        /* What the host waited for before it queued this is ordered
         * before it. */
        uint64_t epoch = sim_host_epoch();
        if (s->host_epoch != epoch) {
            o->host_vc = malloc(sizeof(uint64_t) * SIM_LANES);
            sim_clock_get(0, o->host_vc);
            s->host_epoch = epoch;
        }
        if (s->tail)
            s->tail->next = o;
        else
            s->head = o;
        s->tail = o;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&lock);
    return sim_sticky();
}

/* ---- streams ---- */

SIM_EXPORT CUresult cuStreamCreate(CUstream *out, unsigned flags)
{
    SIM_FAULT(CUresult, "cuStreamCreate");
    if (!sim_dev)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    CUstream s = calloc(1, sizeof *s);
    s->lane = sim_lane_new(false);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, worker, s)) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&lock);
    s->next_live = live_streams;
    live_streams = s;
    pthread_mutex_unlock(&lock);
    *out = s;
    return CUDA_SUCCESS;
}

static void wait_idle(CUstream s)
{
    while (s->head || s->busy)
        pthread_cond_wait(&s->cv, &lock);
}

void sim_device_idle(void)
{
    pthread_mutex_lock(&lock);
    for (CUstream s = live_streams; s; s = s->next_live)
        wait_idle(s);
    for (CUstream s = live_streams; s; s = s->next_live)
        sim_host_synced_lane(s->lane);
    pthread_mutex_unlock(&lock);
}

SIM_EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    SIM_FAULT(CUresult, "cuStreamSynchronize");
    if (!s)
        return sim_sticky();
    pthread_mutex_lock(&lock);
    if (s->capture) {
        s->capture->invalid = true;
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    wait_idle(s);
    sim_host_synced_lane(s->lane);
    pthread_mutex_unlock(&lock);
    return sim_sticky();
}

SIM_EXPORT CUresult cuStreamDestroy(CUstream s)
{
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    /* CUDA lets the queued work finish first. */
    pthread_mutex_lock(&lock);
    wait_idle(s);
    s->quit = true;
    pthread_cond_broadcast(&s->cv);
    for (CUstream *l = &live_streams; *l; l = &(*l)->next_live)
        if (*l == s) {
            *l = s->next_live;
            break;
        }
    pthread_mutex_unlock(&lock);
    pthread_join(s->th, NULL);
    pthread_cond_destroy(&s->cv);
    sim_lane_free(s->lane);
    free(s);
    return CUDA_SUCCESS;
}

/* ---- events ---- */

SIM_EXPORT CUresult cuEventCreate(CUevent *out, unsigned flags)
{
    SIM_FAULT(CUresult, "cuEventCreate");
    if (!sim_dev)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS))
        return CUDA_ERROR_INVALID_VALUE;
    CUevent e = calloc(1, sizeof *e);
    e->flags = flags;
    *out = e;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuEventDestroy(CUevent e)
{
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    /* CUDA releases an event's resources once its work completes: the
     * simulator waits for it. */
    pthread_mutex_lock(&lock);
    while (e->completed < e->recorded)
        pthread_cond_wait(&events_cv, &lock);
    pthread_mutex_unlock(&lock);
    free(e);
    return CUDA_SUCCESS;
}

typedef struct ev_arg {
    CUevent e;
    uint64_t gen;
} ev_arg;

static void run_record(void *p)
{
    ev_arg *a = p;
    pthread_mutex_lock(&lock);
    a->e->when = now();
    sim_clock_get(sim_lane_current(), a->e->vc);
    if (a->e->completed < a->gen)
        a->e->completed = a->gen;
    pthread_cond_broadcast(&events_cv);
    pthread_mutex_unlock(&lock);
}

/* In a graph, a record completes the generation current at each replay. */
static void run_record_latest(void *p)
{
    ev_arg *a = p;
    pthread_mutex_lock(&lock);
    a->e->when = now();
    sim_clock_get(sim_lane_current(), a->e->vc);
    a->e->completed = a->e->recorded;
    pthread_cond_broadcast(&events_cv);
    pthread_mutex_unlock(&lock);
}

static void run_wait(void *p)
{
    ev_arg *a = p;
    pthread_mutex_lock(&lock);
    while (a->e->completed < a->gen && !sim_sticky())
        pthread_cond_wait(&events_cv, &lock);
    sim_clock_merge(sim_lane_current(), a->e->vc);
    pthread_mutex_unlock(&lock);
}

SIM_EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    SIM_FAULT(CUresult, "cuEventRecord");
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    bool capturing = s && s->capture;
    ev_arg a = {e, capturing ? 0 : ++e->recorded};
    e->capture_id = capturing ? s->capture_id : 0;
    e->capture_stream = capturing ? s : NULL;
    e->capture_at = capturing ? s->captured + 1 : 0; /* with the record itself */
    pthread_mutex_unlock(&lock);
    return sim_enqueue(s, capturing ? run_record_latest : run_record, &a, sizeof a);
}

SIM_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    SIM_FAULT(CUresult, "cuStreamWaitEvent");
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    ev_arg a = {e, e->recorded};
    /* The recording stream, while it still captures into that graph. */
    CUstream rec = NULL;
    for (CUstream o = live_streams; o && e->capture_id; o = o->next_live)
        if (o == e->capture_stream && o->capture && o->capture_id == e->capture_id)
            rec = o;
    if (s && rec) {
        if (!s->capture) {
            /* Joins the capture: from here its work is the graph's. */
            s->capture = rec->capture;
            s->capture_id = rec->capture_id;
            s->captured = s->joined = 0;
        } else if (s->capture_id == rec->capture_id && rec->joined < e->capture_at) {
            rec->joined = e->capture_at;
        }
    }
    pthread_mutex_unlock(&lock);
    return sim_enqueue(s, run_wait, &a, sizeof a);
}

SIM_EXPORT CUresult cuEventSynchronize(CUevent e)
{
    SIM_FAULT(CUresult, "cuEventSynchronize");
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    uint64_t g = e->recorded;
    while (e->completed < g && !sim_sticky())
        pthread_cond_wait(&events_cv, &lock);
    sim_host_synced(e->vc);
    pthread_mutex_unlock(&lock);
    return sim_sticky();
}

SIM_EXPORT CUresult cuEventQuery(CUevent e)
{
    SIM_FAULT(CUresult, "cuEventQuery");
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = sim_sticky();
    if (r)
        return r;
    pthread_mutex_lock(&lock);
    bool done = e->completed >= e->recorded;
    if (done)
        sim_host_synced(e->vc);
    pthread_mutex_unlock(&lock);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    SIM_FAULT(CUresult, "cuEventElapsedTime");
    if (!a || !b)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (!a->recorded || !b->recorded)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (a->completed < a->recorded || b->completed < b->recorded)
        r = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)((b->when - a->when) * 1e3);
    pthread_mutex_unlock(&lock);
    return r;
}

/* ---- copies and memsets ---- */

typedef struct copy_arg {
    void *dst;
    const void *src;
    size_t n;
    char *staged; /* pageable host source, copied when queued */
    int pending;  /* a copy to pinned memory: its sim_san_pending_d2h slot */
} copy_arg;

static void run_htod(void *p)
{
    copy_arg *a = p;
    sim_san_access("cuMemcpyHtoDAsync", "destination", a->dst, a->n, true);
    memcpy(a->dst, a->staged ? a->staged : a->src, a->n);
}

static void run_htod_staged_free(void *p)
{
    copy_arg *a = p;
    run_htod(a);
    free(a->staged);
}

static void run_dtoh(void *p)
{
    copy_arg *a = p;
    sim_san_uninit("cuMemcpyDtoHAsync", a->src, a->n);
    sim_san_access("cuMemcpyDtoHAsync", "source", a->src, a->n, false);
    memcpy(a->dst, a->src, a->n);
    sim_san_d2h_ran(a->pending);
}

static void run_dtod(void *p)
{
    copy_arg *a = p;
    sim_san_access("cuMemcpyDtoDAsync", "source", a->src, a->n, false);
    sim_san_access("cuMemcpyDtoDAsync", "destination", a->dst, a->n, true);
    memcpy(a->dst, a->src, a->n);
}

#define DEV(p) ((void *)(uintptr_t)(p))

static CUresult bad_range(const char *call, CUdeviceptr p, size_t n)
{
    sim_say("%s: [%#llx, +%zu bytes) is not inside one device allocation", call, (unsigned long long)p, n);
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    SIM_FAULT(CUresult, "cuMemcpyHtoDAsync");
    if (!n)
        return sim_sticky();
    if (!sim_mem_check("cuMemcpyHtoDAsync", "destination", DEV(dst), n))
        return bad_range("cuMemcpyHtoDAsync", dst, n);
    if (s && s->capture) {
        /* Kiln never copies from the host inside a graph. */
        s->capture->invalid = true;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    copy_arg a = {DEV(dst), src, n, NULL, -1};
    if (!sim_host_pinned(src, n)) {
        /* From pageable memory the driver stages the data before it
         * returns; from pinned memory it reads it when the copy runs. */
        a.staged = malloc(n);
        memcpy(a.staged, src, n);
        return sim_enqueue(s, run_htod_staged_free, &a, sizeof a);
    }
    a.src = sim_pinned_device_view(src);
    return sim_enqueue(s, run_htod, &a, sizeof a);
}

SIM_EXPORT CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    SIM_FAULT(CUresult, "cuMemcpyDtoHAsync");
    if (!n)
        return sim_sticky();
    if (!sim_mem_check("cuMemcpyDtoHAsync", "source", DEV(src), n))
        return bad_range("cuMemcpyDtoHAsync", src, n);
    if (s && s->capture) {
        s->capture->invalid = true;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    copy_arg a = {dst, DEV(src), n, NULL, -1};
    bool pinned = sim_host_pinned(dst, n);
    if (pinned) {
        /* The host may not look until it synchronised with the copy. */
        a.dst = sim_pinned_device_view(dst);
        if (s)
            a.pending = sim_san_pending_d2h(dst, n, s->lane);
    }
    CUresult r = sim_enqueue(s, run_dtoh, &a, sizeof a);
    /* To pageable memory the call returns once the copy is done. */
    if (!r && !pinned)
        r = cuStreamSynchronize(s);
    return r;
}

SIM_EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    SIM_FAULT(CUresult, "cuMemcpyDtoDAsync");
    if (!n)
        return sim_sticky();
    if (!sim_mem_check("cuMemcpyDtoDAsync", "destination", DEV(dst), n))
        return bad_range("cuMemcpyDtoDAsync (destination)", dst, n);
    if (!sim_mem_check("cuMemcpyDtoDAsync", "source", DEV(src), n))
        return bad_range("cuMemcpyDtoDAsync (source)", src, n);
    copy_arg a = {DEV(dst), DEV(src), n, NULL, -1};
    return sim_enqueue(s, run_dtod, &a, sizeof a);
}

typedef struct set_arg {
    void *dst;
    unsigned value;
    size_t n, width;
} set_arg;

static void run_set(void *p)
{
    set_arg *a = p;
    sim_san_access(a->width == 1 ? "cuMemsetD8Async" : "cuMemsetD32Async", "destination", a->dst, a->n * a->width,
                   true);
    if (a->width == 1) {
        memset(a->dst, (int)(a->value & 0xff), a->n);
        return;
    }
    uint32_t *d = a->dst;
    for (size_t i = 0; i < a->n; i++)
        d[i] = a->value;
}

SIM_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
    SIM_FAULT(CUresult, "cuMemsetD8Async");
    if (!n)
        return sim_sticky();
    if (!sim_mem_check("cuMemsetD8Async", "destination", DEV(dst), n))
        return bad_range("cuMemsetD8Async", dst, n);
    set_arg a = {DEV(dst), v, n, 1};
    return sim_enqueue(s, run_set, &a, sizeof a);
}

SIM_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s)
{
    SIM_FAULT(CUresult, "cuMemsetD32Async");
    if (!n)
        return sim_sticky();
    if (dst % 4)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_mem_check("cuMemsetD32Async", "destination", DEV(dst), n * 4))
        return bad_range("cuMemsetD32Async", dst, n * 4);
    set_arg a = {DEV(dst), v, n, 4};
    return sim_enqueue(s, run_set, &a, sizeof a);
}

/* ---- graphs ---- */

SIM_EXPORT CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode)
{
    SIM_FAULT(CUresult, "cuStreamBeginCapture");
    if (!s)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured */
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (s->capture)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else {
        s->capture = calloc(1, sizeof *s->capture);
        s->capture->origin = s;
        static uint64_t captures;
        s->capture_id = ++captures;
        s->captured = s->joined = 0;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

SIM_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    if (!s || !g)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUgraph c = s->capture;
    s->capture = NULL;
    bool unjoined = false;
    if (c) {
        /* The streams that joined leave it; each must have been waited for. */
        for (CUstream o = live_streams; o; o = o->next_live)
            if (o != s && o->capture == c) {
                unjoined |= o->joined < o->captured;
                o->capture = NULL;
            }
    }
    pthread_mutex_unlock(&lock);
    if (!c)
        return CUDA_ERROR_ILLEGAL_STATE;
    /* An injected failure (sim_fault.c): the capture ends all the same. */
    int fault = sim_fault("cuStreamEndCapture");
    if (fault) {
        free_ops(c->head);
        free(c);
        *g = NULL;
        return (CUresult)fault;
    }
    if (unjoined) {
        sim_say("cuStreamEndCapture: a stream joined the capture and its last work was not waited for by the origin stream");
        free_ops(c->head);
        free(c);
        *g = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
    if (c->invalid) {
        free_ops(c->head);
        free(c);
        *g = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *g = c;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphInstantiate(CUgraphExec *ex, CUgraph g, unsigned long long flags)
{
    SIM_FAULT(CUresult, "cuGraphInstantiate");
    if (!ex || !g || flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUgraphExec e = calloc(1, sizeof *e);
    e->n = g->n;
    e->nodes = g->head;
    /* The executable graph owns copies of the nodes: the graph may be
     * destroyed at once (Kiln does). */
    sim_op *copy = NULL, **at = &copy;
    /* Each joined stream's nodes are a branch of their own, with a lane
     * (its order against the rest is the graph's events'). */
    CUstream branch[SIM_LANES];
    for (sim_op *o = g->head; o; o = o->next) {
        sim_op *c = calloc(1, sizeof *c);
        c->fn = o->fn;
        c->stream = o->stream;
        c->lane = -1;
        if (o->stream != g->origin) {
            int b = 0;
            while (b < e->nlanes && branch[b] != o->stream)
                b++;
            if (b == e->nlanes && b < SIM_LANES) {
                branch[b] = o->stream;
                e->lanes[e->nlanes++] = sim_lane_new(true);
            }
            c->lane = b < SIM_LANES ? e->lanes[b] : -1;
        }
        c->arg = o->arg; /* shared until the graph goes */
        *at = c;
        at = &c->next;
    }
    e->nodes = copy;
    /* Give the executable graph the arguments; the graph keeps only its
     * nodes' shells. */
    for (sim_op *o = g->head; o; o = o->next)
        o->arg = NULL;
    *ex = e;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphDestroy(CUgraph g)
{
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    free_ops(g->head);
    free(g);
    return CUDA_SUCCESS;
}

typedef struct graph_arg {
    CUgraphExec e;
} graph_arg;

static void run_graph(void *p)
{
    graph_arg *a = p;
    int outer = sim_lane_current();
    for (sim_op *o = a->e->nodes; o && !sim_sticky(); o = o->next) {
        sim_lane_enter(o->stream == NULL || o->lane < 0 ? outer : o->lane);
        o->fn(o->arg);
    }
    sim_lane_set(outer);
}

SIM_EXPORT CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
    SIM_FAULT(CUresult, "cuGraphLaunch");
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    graph_arg a = {e};
    return sim_enqueue(s, run_graph, &a, sizeof a);
}

SIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e)
{
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    /* The caller synchronises before (a launched graph still running is
     * its mistake, as on a GPU). */
    free_ops(e->nodes);
    for (int i = 0; i < e->nlanes; i++)
        sim_lane_free(e->lanes[i]);
    free(e);
    return CUDA_SUCCESS;
}
