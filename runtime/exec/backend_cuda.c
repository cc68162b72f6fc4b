/* The CUDA backend: device memory, generated kernels compiled by NVRTC,
 * cuBLASLt for GEMMs, a compute stream and a copy stream, CUDA graphs.
 *
 * The driver (libcuda.so.1) and cuBLASLt are opened with dlopen, so the
 * executable starts on machines without them; kl_cuda_backend_new then
 * says why there is no GPU and the caller trains on the CPU. Every driver
 * and cuBLASLt call goes through CU() or LT(), which name the call, file
 * and line when it fails; a failure after start-up is fatal (exit 1).
 *
 * Streams: kernels and GEMMs run on the compute stream. copy_in copies the
 * caller's data into a pinned host buffer and moves it on the copy stream
 * into a device staging buffer, so the transfer overlaps the work already
 * queued on the compute stream; the compute stream then waits for it (an
 * event) and copies it into place. Kernel arguments (step, seed) live in
 * device memory, so a captured graph reads the current ones.
 *
 * Collectives (NCCL, runtime/exec/nccl.h) run on a third stream, the
 * communication stream: each starts after the compute work queued before
 * it (an event), and the compute stream waits for them (another event)
 * only where the executor says a later step needs their memory
 * (collective_wait), so they overlap the rest of backward as the CPU's
 * communication thread does. */
#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_cuda_state.h"
#include "cuda_launch.h"
#include "cuda_lt.h"
#include "nvrtc.h"
#ifdef KILN_HAVE_NCCL
#include "nccl.h"
#endif

/* ---- the host's waits for the device ---- */

#ifdef KILN_HAVE_NCCL
/* The communicator whose comm_timeout bounds the host's waits: the
 * widest world among the NCCL communicators' (NULL: none open). */
static kl_comm *watch_comm(cuda_backend *cb)
{
    kl_comm *best = NULL;
    for (int i = 0; i < cb->nccl.n; i++) {
        kl_comm *c = kl_comm_whole(kl_nccl_comm(cb->nccl.v[i]));
        if (!best || kl_comm_world(c) > kl_comm_world(best))
            best = c;
    }
    return best;
}
#endif

/* Waits until e's work completed. With NCCL communicators open the wait
 * polls against comm_timeout: NCCL has no timeout of its own, so a rank
 * that stopped or hung would leave the others waiting here forever (the
 * CPU's collectives have the same watchdog, runtime/comm/comm.h). Past the
 * timeout the ranks tell each other, the error names the ranks that did
 * not arrive, and the job is aborted. why: what the host waits for. */
static void host_wait(cuda_backend *cb, CUevent e, const char *why)
{
#ifdef KILN_HAVE_NCCL
    kl_comm *c = watch_comm(cb);
    double limit = c ? kl_comm_timeout(c) : 0;
    if (limit > 0) {
        double t0 = kl_now();
        for (;;) {
            CUresult r = kl_cu_api.cuEventQuery(e);
            if (r != CUDA_ERROR_NOT_READY) {
                CU(r);
                return;
            }
            double t = kl_now() - t0;
            if (t > limit) {
                char desc[300];
                snprintf(desc, sizeof desc, "the GPU's queued work with its NCCL collectives (%s)", why);
                kl_comm_timed_out(c, desc);
            }
            /* As the driver's own wait spins at first; then the core is yielded, then slept on. */
            if (t > 1e-2) {
                struct timespec d = {0, 100000};
                nanosleep(&d, NULL);
            } else if (t > 1e-3) {
                sched_yield();
            }
        }
    }
#endif
    (void)why;
    CU(kl_cu_api.cuEventSynchronize(e));
}

/* Waits until the work queued on s so far completed (host_wait). */
static void host_sync(cuda_backend *cb, CUstream s, const char *why)
{
    CU(kl_cu_api.cuEventRecord(cb->host_ev, s));
    host_wait(cb, cb->host_ev, why);
}

/* ---- memory and copies ---- */

/* Frees the copy slots' device staging buffers (outside the memory plan:
 * cuda_copy_in makes them again where they fit). True if any was held. */
static bool release_staging(cuda_backend *cb)
{
    bool any = false;
    for (int i = 0; i < NSLOTS; i++) {
        copy_slot *s = &cb->slots[i];
        if (!s->dev)
            continue;
        if (s->used)
            host_wait(cb, s->done, "a copy slot's last copy");
        CU(kl_cu_api.cuMemFree(s->dev));
        s->dev = 0, s->dev_cap = 0;
        any = true;
    }
    return any;
}

static void *cuda_alloc(kl_backend *be, size_t bytes)
{
    CUdeviceptr p;
    CUresult r = kl_cu_api.cuMemAlloc(&p, bytes ? bytes : 256);
    /* The plan's memory comes first: --batch auto fills the free memory
     * with it, counting no staging buffer. */
    if (r == CUDA_ERROR_OUT_OF_MEMORY && release_staging(cb_of(be)))
        r = kl_cu_api.cuMemAlloc(&p, bytes ? bytes : 256);
    if (r != CUDA_SUCCESS) {
        size_t free_b = 0, total = 0;
        kl_cu_api.cuMemGetInfo(&free_b, &total);
        kl_error("out of GPU memory allocating %.1f MiB (%.1f of %.1f MiB free): %s\n"
                 "---> try a smaller --batch, or --accumulate N with a batch N times smaller",
                 (double)bytes / 1048576.0, (double)free_b / 1048576.0, (double)total / 1048576.0, kl_cu_error(r));
        exit(1);
    }
    return (void *)(uintptr_t)p;
}

static void cuda_free(kl_backend *be, void *p)
{
    host_sync(cb_of(be), cb_of(be)->compute, "before freeing device memory");
    CU(kl_cu_api.cuMemFree(dptr(p)));
}

static void grow_host(void **p, size_t *cap, size_t want)
{
    if (*cap >= want)
        return;
    if (*p)
        CU(kl_cu_api.cuMemFreeHost(*p));
    size_t n = want < 4096 ? 4096 : want;
    CU(kl_cu_api.cuMemHostAlloc(p, n, 0));
    *cap = n;
}

/* The next copy slot, once its previous copy has landed. */
static copy_slot *next_slot(cuda_backend *cb, size_t host_bytes)
{
    copy_slot *s = &cb->slots[cb->next_slot++ % NSLOTS];
    if (s->used)
        host_wait(cb, s->done, "a copy slot's last copy");
    grow_host(&s->host, &s->host_cap, host_bytes);
    return s;
}

static void cuda_copy_in(kl_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_backend *cb = cb_of(be);
    kl_check(!cb->capturing);
    if (bytes > LARGE_COPY) {
        /* Checkpoints and big parameters: pinned chunks, in order on the
         * compute stream. */
        for (size_t off = 0; off < bytes; off += LARGE_COPY / 4) {
            size_t n = bytes - off < LARGE_COPY / 4 ? bytes - off : LARGE_COPY / 4;
            copy_slot *s = next_slot(cb, n);
            memcpy(s->host, (const char *)src + off, n);
            CU(kl_cu_api.cuMemcpyHtoDAsync(dptr((char *)dst + off), s->host, n, cb->compute));
            CU(kl_cu_api.cuEventRecord(s->done, cb->compute));
            s->used = true;
        }
        return;
    }
    if (!bytes)
        return;
    copy_slot *s = next_slot(cb, bytes);
    memcpy(s->host, src, bytes);
    if (bytes > SMALL_COPY && s->dev_cap < bytes) {
        if (s->dev)
            CU(kl_cu_api.cuMemFree(s->dev));
        /* The staging buffer is outside the memory plan (--batch auto
         * fills the free memory with the plan): where it does not fit, the
         * copy goes straight to dst, in order on the compute stream. */
        s->dev = 0, s->dev_cap = 0;
        if (kl_cu_api.cuMemAlloc(&s->dev, bytes) == CUDA_SUCCESS)
            s->dev_cap = bytes;
        else
            s->dev = 0;
    }
    if (bytes <= SMALL_COPY || !s->dev) {
        CU(kl_cu_api.cuMemcpyHtoDAsync(dptr(dst), s->host, bytes, cb->compute));
    } else {
        /* The transfer overlaps the queued work; the compute stream takes
         * it over when it gets there. */
        CU(kl_cu_api.cuMemcpyHtoDAsync(s->dev, s->host, bytes, cb->copy));
        CU(kl_cu_api.cuEventRecord(s->copied, cb->copy));
        CU(kl_cu_api.cuStreamWaitEvent(cb->compute, s->copied, 0));
        CU(kl_cu_api.cuMemcpyDtoDAsync(dptr(dst), s->dev, bytes, cb->compute));
    }
    CU(kl_cu_api.cuEventRecord(s->done, cb->compute));
    s->used = true;
}

static void cuda_copy_out(kl_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_backend *cb = cb_of(be);
    kl_check(!cb->capturing);
    size_t chunk = bytes < (8u << 20) ? bytes : (8u << 20);
    grow_host(&cb->bounce, &cb->bounce_cap, chunk);
    for (size_t off = 0; off < bytes; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        CU(kl_cu_api.cuMemcpyDtoHAsync(cb->bounce, dptr((const char *)src + off), n, cb->compute));
        host_sync(cb, cb->compute, "a copy to the host");
        memcpy((char *)dst + off, cb->bounce, n);
    }
}

static void cuda_fill_zero(kl_backend *be, void *dst, size_t bytes)
{
    CU(kl_cu_api.cuMemsetD8Async(dptr(dst), 0, bytes, cb_of(be)->compute));
}

static void cuda_sync(kl_backend *be)
{
    host_sync(cb_of(be), cb_of(be)->compute, "the step's end");
}

/* ---- kernels ---- */

static uint64_t name_hash(const char *s)
{
    return kl_hash_bytes(KL_HASH_INIT, s, strlen(s));
}

static cu_kernel *find_kernel(cuda_backend *cb, const char *name)
{
    if (!cb->index_cap)
        return NULL;
    for (uint64_t i = name_hash(name);; i++) {
        int k = cb->index[i & (uint64_t)(cb->index_cap - 1)];
        if (k < 0)
            return NULL;
        if (!strcmp(cb->kernels.v[k].name, name))
            return &cb->kernels.v[k];
    }
}

static void index_kernels(cuda_backend *cb)
{
    int cap = 64;
    while (cap < 2 * cb->kernels.n + 2)
        cap *= 2;
    free(cb->index);
    cb->index = kl_xmalloc(sizeof(int) * (size_t)cap);
    for (int i = 0; i < cap; i++)
        cb->index[i] = -1;
    cb->index_cap = cap;
    for (int k = 0; k < cb->kernels.n; k++) {
        uint64_t i = name_hash(cb->kernels.v[k].name);
        while (cb->index[i & (uint64_t)(cap - 1)] >= 0)
            i++;
        cb->index[i & (uint64_t)(cap - 1)] = k;
    }
}

/* Whether a built-in image has every launch's function: an image built
 * with the other KILN_CUDA_ATTENTION choice has the other attention
 * kernel (the tiled one's function ends in _tiled), and is compiled
 * afresh instead. */
static bool image_has_launches(const kl_kernel_src *k, const void *image)
{
    CUmodule mod;
    if (kl_cu_api.cuModuleLoadData(&mod, image) != CUDA_SUCCESS)
        return false;
    bool all = true;
    for (int i = 0; i < k->cuda.nlaunches && all; i++) {
        CUfunction f;
        all = kl_cu_api.cuModuleGetFunction(&f, mod, k->cuda.launches[i].fn) == CUDA_SUCCESS;
    }
    CU(kl_cu_api.cuModuleUnload(mod));
    return all;
}

/* Loads a compiled kernel and sizes its launches for this device. */
static int load_kernel(cuda_backend *cb, const kl_kernel_src *k, const void *image)
{
    cu_kernel ck = {kl_xstrdup(k->name), NULL, NULL, k->cuda.nlaunches, k->cuda.nbufs, k->cuda.workspace > 0};
    CUresult r = kl_cu_api.cuModuleLoadData(&ck.mod, image);
    if (r != CUDA_SUCCESS) {
        kl_error("cannot load kernel %s (%s) for %s: %s", k->name, k->what, cb->arch, kl_cu_error(r));
        free(ck.name);
        return -1;
    }
    ck.l = kl_xcalloc((size_t)ck.nl + 1, sizeof *ck.l);
    for (int i = 0; i < ck.nl; i++) {
        const kir_cuda_launch *L = &k->cuda.launches[i];
        cu_launch *cl = &ck.l[i];
        CU(kl_cu_api.cuModuleGetFunction(&cl->f, ck.mod, L->fn));
        int min_grid = 0, suggested = 0, max_threads = 0, per_sm = 0;
        CU(kl_cu_api.cuOccupancyMaxPotentialBlockSize(&min_grid, &suggested, cl->f, NULL, 0, 0));
        CU(kl_cu_api.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, cl->f));
        cl->block = kl_cuda_block_size(L, cb->sms, suggested, max_threads);
        CU(kl_cu_api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cl->f, (int)cl->block, 0));
        cl->grid = kl_cuda_grid_size(L, cl->block, cb->sms, per_sm);
    }
    kl_vec_push(cb->kernels, ck);
    return 0;
}

/* Says, once per attention kernel, whether the tiled kernel
 * (codegen/cuda_attn.cuh) or the generated one runs it, and why. */
static void say_attention(cuda_backend *cb, const kl_plan *plan)
{
    for (int i = 0; i < plan->kernels.n && !cb->o.quiet; i++) {
        const kl_kernel_src *k = &plan->kernels.v[i];
        char why[160] = "";
        if (k->attn.kind == CG_ATTN_NONE || find_kernel(cb, k->name))
            continue;
        bool tiled = k->cuda.nlaunches == 1 && k->cuda.launches[0].threads > 0;
        if (!tiled)
            cg_cuda_attention_fits(&k->attn, k->cuda.nbufs, why, sizeof why);
        kl_fprintf_escaped(stderr, "kiln: %s (%s): %s%s\n", k->what, k->name,
                           tiled ? "tiled CUDA kernel" : "generated kernel: ", why);
    }
}

static int cuda_prepare(kl_backend *be, const kl_plan *plan)
{
    cuda_backend *cb = cb_of(be);
    int rc = 0;
    say_attention(cb, plan);
    KL_VEC(int) missing = {0};
    for (int i = 0; i < plan->kernels.n && !rc; i++) {
        const kl_kernel_src *k = &plan->kernels.v[i];
        if (find_kernel(cb, k->name))
            continue;
        bool dup = false;
        for (int j = 0; j < missing.n && !dup; j++)
            dup = !strcmp(plan->kernels.v[missing.v[j]].name, k->name);
        if (dup)
            continue;
        const kl_cuda_builtin *b = cb->o.builtins;
        while (b && b->name && !(strcmp(b->name, k->name) == 0 && strcmp(b->arch, cb->arch) == 0))
            b++;
        if (b && b->name && (k->attn.kind == CG_ATTN_NONE || image_has_launches(k, b->image)))
            rc = load_kernel(cb, k, b->image);
        else
            kl_vec_push(missing, i);
    }
    if (!rc && missing.n) {
        kl_nvrtc_job *jobs = kl_xcalloc((size_t)missing.n, sizeof *jobs);
        for (int j = 0; j < missing.n; j++) {
            const kl_kernel_src *k = &plan->kernels.v[missing.v[j]];
            jobs[j].name = k->name;
            jobs[j].owned = kir_cuda_program(k->cuda.src, k->cuda.needs);
            jobs[j].src = jobs[j].owned;
        }
        /* KILN_CUDA_PTX=1: PTX for the driver to compile (a GPU newer than
         * NVRTC's CUBIN targets, or to look at the PTX in the cache). */
        const char *ptx = getenv("KILN_CUDA_PTX");
        kl_nvrtc_opts no = {.arch = cb->arch, .ptx = ptx && !strcmp(ptx, "1"), .cache_dir = cb->o.cache_dir,
                            .quiet = cb->o.quiet};
        if (kl_nvrtc_compile(jobs, missing.n, &no))
            rc = -1;
        for (int j = 0; j < missing.n && !rc; j++)
            rc = load_kernel(cb, &plan->kernels.v[missing.v[j]], jobs[j].image);
        kl_nvrtc_jobs_free(jobs, missing.n);
    }
    kl_vec_free(missing);
    index_kernels(cb);
    char *lt = plan_lt_summary(plan);
    if (!rc && lt && !cb->o.quiet)
        kl_fprintf_escaped(stderr, "kiln: cuBLASLt GEMM epilogues: %s%s\n", lt,
                           cb->lt_epilogues ? "" : "; off (KILN_CUDA_LT_EPILOGUE=0): the generated kernels do them");
    free(lt);
    return rc;
}

/* The kernels' step and seed, in device memory (set with memsets, which
 * take their values when queued: no host buffer must outlive them). */
static void upload_args(cuda_backend *cb, const kl_kargs *a)
{
    if (cb->kargs_set && cb->kargs_now.step == a->step && cb->kargs_now.seed == a->seed)
        return;
    uint32_t w[4];
    memcpy(w, a, sizeof w);
    for (int i = 0; i < 4; i++)
        CU(kl_cu_api.cuMemsetD32Async(cb->kargs + 4 * (CUdeviceptr)i, w[i], 1, cb->compute));
    cb->kargs_now = *a;
    cb->kargs_set = true;
}

static void cuda_set_args(kl_backend *be, const kl_kargs *args)
{
    cuda_backend *cb = cb_of(be);
    kl_check(!cb->capturing);
    upload_args(cb, args);
}

static void cuda_launch(kl_backend *be, const kl_plan *plan, int kernel, void *const *bufs, const kl_kargs *args)
{
    cuda_backend *cb = cb_of(be);
    cu_kernel *k = find_kernel(cb, plan->kernels.v[kernel].name);
    kl_check(k != NULL);
    /* While capturing, the arguments were set before (set_args). */
    if (!cb->capturing)
        upload_args(cb, args);
    void *params[IR_KERNEL_MAX_BUFS + 2];
    kl_check(k->nbufs <= IR_KERNEL_MAX_BUFS);
    for (int i = 0; i < k->nbufs; i++)
        params[i] = (void *)&bufs[i];
    int np = k->nbufs;
    if (k->split_ws)
        params[np++] = &cb->split_ws;
    params[np] = &cb->kargs;
    for (int i = 0; i < k->nl; i++)
        CU(kl_cu_api.cuLaunchKernel(k->l[i].f, k->l[i].grid, 1, 1, k->l[i].block, 1, 1, 0, cb->compute, params, NULL));
}

/* ---- graphs ---- */

static int cuda_capture_begin(kl_backend *be)
{
    cuda_backend *cb = cb_of(be);
    CUresult r = kl_cu_api.cuStreamBeginCapture(cb->compute, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (r != CUDA_SUCCESS) {
        /* Not an error: the run goes on, the step queued as it comes. */
        kl_fprintf_escaped(kl_diag_stream(), "kiln: note: cannot capture a CUDA graph: %s; running without graphs\n",
                           kl_cu_error(r));
        return -1;
    }
    cb->capturing = true;
    return 0;
}

static void *cuda_capture_end(kl_backend *be)
{
    cuda_backend *cb = cb_of(be);
    CUgraph g = NULL;
    CUgraphExec ex = NULL;
    CUresult r = kl_cu_api.cuStreamEndCapture(cb->compute, &g);
    cb->capturing = false;
    if (r == CUDA_SUCCESS)
        r = kl_cu_api.cuGraphInstantiate(&ex, g, 0);
    if (g)
        CU(kl_cu_api.cuGraphDestroy(g));
    if (r != CUDA_SUCCESS) {
        kl_fprintf_escaped(kl_diag_stream(), "kiln: note: recording the step as a CUDA graph failed: %s; running without graphs\n",
                           kl_cu_error(r));
        return NULL;
    }
    return ex;
}

static void cuda_graph_launch(kl_backend *be, void *graph)
{
    CU(kl_cu_api.cuGraphLaunch((CUgraphExec)graph, cb_of(be)->compute));
}

static void cuda_graph_free(kl_backend *be, void *graph)
{
    host_sync(cb_of(be), cb_of(be)->compute, "before freeing a CUDA graph");
    CU(kl_cu_api.cuGraphExecDestroy((CUgraphExec)graph));
}

/* ---- collectives (NCCL) ---- */

#ifdef KILN_HAVE_NCCL
static struct kl_nccl *nccl_of(cuda_backend *cb, kl_comm *c)
{
    for (int i = 0; i < cb->nccl.n; i++)
        if (kl_nccl_comm(cb->nccl.v[i]) == c)
            return cb->nccl.v[i];
    kl_vec_push(cb->nccl, kl_nccl_open(c));
    return cb->nccl.v[cb->nccl.n - 1];
}

/* reduce_scatter's operand padded with zeros to world x shard, in
 * comm_pad (grown before graphs are recorded: the first runs are not). */
static const void *pad_operand(cuda_backend *cb, const kl_coll *k, int64_t padded)
{
    size_t esz = (size_t)ir_dtype_size(k->dt), bytes = (size_t)padded * esz;
    if (bytes > cb->comm_pad_bytes) {
        host_sync(cb, cb->comm, "before growing reduce_scatter's padded operand");
        if (cb->comm_pad)
            CU(kl_cu_api.cuMemFree(cb->comm_pad));
        CU(kl_cu_api.cuMemAlloc(&cb->comm_pad, bytes));
        cb->comm_pad_bytes = bytes;
    }
    CU(kl_cu_api.cuMemsetD8Async(cb->comm_pad, 0, bytes, cb->comm));
    CU(kl_cu_api.cuMemcpyDtoDAsync(cb->comm_pad, dptr(k->in), (size_t)k->count * esz, cb->comm));
    return (const void *)(uintptr_t)cb->comm_pad;
}

static void cuda_collective(kl_backend *be, const kl_coll *k)
{
    cuda_backend *cb = cb_of(be);
    CU(kl_cu_api.cuEventRecord(cb->comm_ready, cb->compute));
    CU(kl_cu_api.cuStreamWaitEvent(cb->comm, cb->comm_ready, 0));
    size_t bytes = (size_t)k->count * (size_t)ir_dtype_size(k->dt);
    if (!k->comm) {
        /* A world of one: the result is the operand. */
        if (k->in != k->out && bytes)
            CU(kl_cu_api.cuMemcpyDtoDAsync(dptr(k->out), dptr(k->in), bytes, cb->comm));
    } else if (k->count > 0) {
        struct kl_nccl *nc = nccl_of(cb, k->comm);
        int world = kl_comm_world(k->comm);
        switch (k->kind) {
        case KL_COLL_ALL_REDUCE:
            kl_nccl_all_reduce(nc, k->in, k->out, k->count, k->dt, k->op, cb->comm, k->what);
            break;
        case KL_COLL_BROADCAST:
            kl_nccl_broadcast(nc, k->in, k->out, k->count, k->dt, k->root, cb->comm, k->what);
            break;
        case KL_COLL_REDUCE_SCATTER: {
            int64_t shard = kl_comm_shard_count(k->count, world);
            const void *in = shard * world == k->count ? k->in : pad_operand(cb, k, shard * world);
            kl_nccl_reduce_scatter(nc, in, k->out, shard, k->dt, cb->comm, k->what);
            break;
        }
        case KL_COLL_ALL_GATHER:
            kl_nccl_all_gather(nc, k->in, k->out, k->count, k->dt, cb->comm, k->what);
            break;
        }
    }
    CU(kl_cu_api.cuEventRecord(cb->comm_done, cb->comm));
    cb->comm_pending = true;
}

static void cuda_collective_wait(kl_backend *be)
{
    cuda_backend *cb = cb_of(be);
    if (!cb->comm_pending)
        return;
    CU(kl_cu_api.cuStreamWaitEvent(cb->compute, cb->comm_done, 0));
    cb->comm_pending = false;
}
#endif

/* ---- lifetime ---- */

static void cuda_destroy(kl_backend *be)
{
    cuda_backend *cb = cb_of(be);
    host_sync(cb, cb->compute, "the run's end");
    host_sync(cb, cb->copy, "the run's end");
    host_sync(cb, cb->comm, "the run's end");
#ifdef KILN_HAVE_NCCL
    for (int i = 0; i < cb->nccl.n; i++)
        kl_nccl_close(cb->nccl.v[i]);
#endif
    kl_vec_free(cb->nccl);
    if (cb->comm_pad)
        CU(kl_cu_api.cuMemFree(cb->comm_pad));
    CU(kl_cu_api.cuEventDestroy(cb->comm_ready));
    CU(kl_cu_api.cuEventDestroy(cb->comm_done));
    for (int i = 0; i < cb->kernels.n; i++) {
        CU(kl_cu_api.cuModuleUnload(cb->kernels.v[i].mod));
        free(cb->kernels.v[i].name);
        free(cb->kernels.v[i].l);
    }
    kl_vec_free(cb->kernels);
    free(cb->index);
    for (int i = 0; i < cb->gemms.n; i++) {
        gemm_plan *gp = &cb->gemms.v[i];
        LT(kl_cu_api.cublasLtMatrixLayoutDestroy(gp->la));
        LT(kl_cu_api.cublasLtMatrixLayoutDestroy(gp->lb));
        LT(kl_cu_api.cublasLtMatrixLayoutDestroy(gp->lc));
        LT(kl_cu_api.cublasLtMatmulDescDestroy(gp->desc));
    }
    kl_vec_free(cb->gemms);
    LT(kl_cu_api.cublasLtDestroy(cb->lt));
    for (int i = 0; i < NSLOTS; i++) {
        copy_slot *s = &cb->slots[i];
        if (s->host)
            CU(kl_cu_api.cuMemFreeHost(s->host));
        if (s->dev)
            CU(kl_cu_api.cuMemFree(s->dev));
        CU(kl_cu_api.cuEventDestroy(s->copied));
        CU(kl_cu_api.cuEventDestroy(s->done));
    }
    if (cb->bounce)
        CU(kl_cu_api.cuMemFreeHost(cb->bounce));
    CU(kl_cu_api.cuMemFree(cb->workspace));
    CU(kl_cu_api.cuMemFree(cb->split_ws));
    CU(kl_cu_api.cuMemFree(cb->kargs));
    CU(kl_cu_api.cuEventDestroy(cb->t0));
    CU(kl_cu_api.cuEventDestroy(cb->t1));
    CU(kl_cu_api.cuEventDestroy(cb->host_ev));
    CU(kl_cu_api.cuStreamDestroy(cb->compute));
    CU(kl_cu_api.cuStreamDestroy(cb->copy));
    CU(kl_cu_api.cuStreamDestroy(cb->comm));
    CU(kl_cu_api.cuDevicePrimaryCtxRelease(cb->dev));
    free(cb);
}

static int64_t cuda_free_bytes(kl_backend *be)
{
    (void)be;
    size_t free_b = 0, total = 0;
    return kl_cu_api.cuMemGetInfo(&free_b, &total) == CUDA_SUCCESS ? (int64_t)free_b : -1;
}

static const kl_backend_ops cuda_ops = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy_in = cuda_copy_in,
    .copy_out = cuda_copy_out,
    .fill_zero = cuda_fill_zero,
    .prepare = cuda_prepare,
    .launch = cuda_launch,
    .gemm = kl_cuda_gemm,
    .gemm_epilogue = kl_cuda_gemm_epilogue,
    .sync = cuda_sync,
    .destroy = cuda_destroy,
    .set_args = cuda_set_args,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
    .free_bytes = cuda_free_bytes,
#ifdef KILN_HAVE_NCCL
    .collective = cuda_collective,
    .collective_wait = cuda_collective_wait,
#endif
};

bool kl_backend_is_cuda(const kl_backend *be)
{
    return be && be->ops == &cuda_ops;
}

/* Finds every entry point; 0, or -1 with why. */
static int open_api(char *why, size_t n)
{
    static const char *const driver[] = {"libcuda.so.1", "libcuda.so", NULL};
    static const char *const lt[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
    char err[512];
    if (kl_cu_api.cuInit && kl_cu_api.cublasLtMatmul)
        return 0;
    void *hd = kl_cuda_dlopen(driver, err, sizeof err);
    if (!hd) {
        snprintf(why, n, "no CUDA driver (%s)", err);
        return -1;
    }
#define X(f)                                                                      \
    if (!(kl_cu_api.f = (__typeof__(&f))dlsym(hd, STR(f)))) {                           \
        snprintf(why, n, "the CUDA driver lacks %s (too old?)", STR(f));          \
        return -1;                                                                \
    }
    CU_FUNCS(X)
#undef X
    void *hl = kl_cuda_dlopen(lt, err, sizeof err);
    if (!hl) {
        snprintf(why, n, "no cuBLASLt (%s)", err);
        return -1;
    }
#define X(f)                                                                      \
    if (!(kl_cu_api.f = (__typeof__(&f))dlsym(hl, STR(f)))) {                           \
        snprintf(why, n, "cuBLASLt lacks %s", STR(f));                            \
        return -1;                                                                \
    }
    LT_FUNCS(X)
#undef X
    return 0;
}

/* Set once, by an executable's main before anything else runs. */
static const kl_cuda_builtin *registered_builtins;

void kl_cuda_set_builtins(const kl_cuda_builtin *table)
{
    registered_builtins = table;
}

kl_backend *kl_cuda_backend_new(const kl_cuda_options *o, char *why, size_t n)
{
    kl_cuda_options opts = {0};
    if (o)
        opts = *o;
    if (!opts.builtins)
        opts.builtins = registered_builtins;
    const char *attn = getenv("KILN_CUDA_ATTENTION");
    if (attn && strcmp(attn, "tiled") && strcmp(attn, "generated")) {
        snprintf(why, n, "KILN_CUDA_ATTENTION must be tiled or generated, got '%s'", attn);
        return NULL;
    }
    if (open_api(why, n))
        return NULL;
    CUresult r = kl_cu_api.cuInit(0);
    if (r != CUDA_SUCCESS) {
        snprintf(why, n, "the CUDA driver does not start: %s", kl_cu_error(r));
        return NULL;
    }
    int count = 0;
    if ((r = kl_cu_api.cuDeviceGetCount(&count)) != CUDA_SUCCESS || count == 0) {
        snprintf(why, n, "no GPU found%s%s", r ? ": " : "", r ? kl_cu_error(r) : "");
        return NULL;
    }
    if (opts.device < 0 || opts.device >= count) {
        snprintf(why, n, "no GPU %d (%d present)", opts.device, count);
        return NULL;
    }
    char nvwhy[600];
    if (kl_nvrtc_load(nvwhy, sizeof nvwhy)) {
        snprintf(why, n, "%s", nvwhy);
        return NULL;
    }
    CUdevice dev;
    int major = 0, minor = 0, sms = 0;
    char name[128] = "?";
    size_t mem = 0;
    if ((r = kl_cu_api.cuDeviceGet(&dev, opts.device)) || (r = kl_cu_api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) ||
        (r = kl_cu_api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) ||
        (r = kl_cu_api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) ||
        (r = kl_cu_api.cuDeviceGetName(name, sizeof name, dev)) || (r = kl_cu_api.cuDeviceTotalMem(&mem, dev))) {
        snprintf(why, n, "cannot query GPU %d: %s", opts.device, kl_cu_error(r));
        return NULL;
    }
    if (major < 7) {
        snprintf(why, n, "%s has compute capability %d.%d; Kiln needs 7.0 or newer", name, major, minor);
        return NULL;
    }
    /* KILN_CUDA_LT_EPILOGUE=0: the generated kernels do every GEMM
     * epilogue (to compare; tests/gpu/run.sh times both). */
    const char *lte = getenv("KILN_CUDA_LT_EPILOGUE");
    if (lte && strcmp(lte, "0") && strcmp(lte, "1")) {
        snprintf(why, n, "KILN_CUDA_LT_EPILOGUE must be 0 or 1, not '%.40s'", lte);
        return NULL;
    }
    cuda_backend *cb = kl_xcalloc(1, sizeof *cb);
    cb->base.ops = &cuda_ops;
    cb->o = opts;
    cb->lt_epilogues = !lte || !strcmp(lte, "1");
    cb->dev = dev;
    cb->sms = sms;
    cb->base.threads = sms;
    snprintf(cb->arch, sizeof cb->arch, "sm_%d%d", major, minor);
    snprintf(cb->base.desc, sizeof cb->base.desc, "cuda: %.80s (%s, %d SMs, %.0f GiB)", name, cb->arch, sms,
             (double)mem / 1073741824.0);
    if ((r = kl_cu_api.cuDevicePrimaryCtxRetain(&cb->ctx, dev)) != CUDA_SUCCESS) {
        snprintf(why, n, "cannot open a context on %s: %s", name, kl_cu_error(r));
        free(cb);
        return NULL;
    }
    if ((r = kl_cu_api.cuCtxSetCurrent(cb->ctx)) != CUDA_SUCCESS) {
        /* The caller may go on to the CPU: the retained context goes. */
        snprintf(why, n, "cannot make the context on %s current: %s", name, kl_cu_error(r));
        kl_cu_api.cuDevicePrimaryCtxRelease(dev);
        free(cb);
        return NULL;
    }
    CU(kl_cu_api.cuStreamCreate(&cb->compute, CU_STREAM_NON_BLOCKING));
    CU(kl_cu_api.cuStreamCreate(&cb->copy, CU_STREAM_NON_BLOCKING));
    CU(kl_cu_api.cuStreamCreate(&cb->comm, CU_STREAM_NON_BLOCKING));
    CU(kl_cu_api.cuEventCreate(&cb->comm_ready, CU_EVENT_DISABLE_TIMING));
    CU(kl_cu_api.cuEventCreate(&cb->comm_done, CU_EVENT_DISABLE_TIMING));
    for (int i = 0; i < NSLOTS; i++) {
        CU(kl_cu_api.cuEventCreate(&cb->slots[i].copied, CU_EVENT_DISABLE_TIMING));
        CU(kl_cu_api.cuEventCreate(&cb->slots[i].done, CU_EVENT_DISABLE_TIMING));
    }
    CU(kl_cu_api.cuEventCreate(&cb->t0, CU_EVENT_DEFAULT));
    CU(kl_cu_api.cuEventCreate(&cb->t1, CU_EVENT_DEFAULT));
    CU(kl_cu_api.cuEventCreate(&cb->host_ev, CU_EVENT_DISABLE_TIMING));
    CU(kl_cu_api.cuMemAlloc(&cb->kargs, sizeof(kl_kargs)));
    CU(kl_cu_api.cuMemAlloc(&cb->split_ws, (size_t)KIR_CUDA_WORKSPACE_BYTES));
    cb->workspace_bytes = (size_t)32 << 20;
    CU(kl_cu_api.cuMemAlloc(&cb->workspace, cb->workspace_bytes));
    LT(kl_cu_api.cublasLtCreate(&cb->lt));
    return &cb->base;
}

/* ---- measuring ---- */

void kl_cuda_timer_start(kl_backend *be)
{
    cuda_backend *cb = cb_of(be);
    CU(kl_cu_api.cuEventRecord(cb->t0, cb->compute));
}

double kl_cuda_timer_stop(kl_backend *be)
{
    cuda_backend *cb = cb_of(be);
    float ms = 0;
    CU(kl_cu_api.cuEventRecord(cb->t1, cb->compute));
    CU(kl_cu_api.cuEventSynchronize(cb->t1));
    CU(kl_cu_api.cuEventElapsedTime(&ms, cb->t0, cb->t1));
    return ms / 1e3;
}

double kl_cuda_copy_bandwidth(kl_backend *be)
{
    cuda_backend *cb = cb_of(be);
    size_t bytes = (size_t)256 << 20;
    void *a = cuda_alloc(be, bytes), *b = cuda_alloc(be, bytes);
    CU(kl_cu_api.cuMemsetD8Async(dptr(a), 1, bytes, cb->compute));
    CU(kl_cu_api.cuMemcpyDtoDAsync(dptr(b), dptr(a), bytes, cb->compute)); /* warm-up */
    const int reps = 10;
    kl_cuda_timer_start(be);
    for (int i = 0; i < reps; i++)
        CU(kl_cu_api.cuMemcpyDtoDAsync(dptr(b), dptr(a), bytes, cb->compute));
    double s = kl_cuda_timer_stop(be);
    cuda_free(be, a);
    cuda_free(be, b);
    return 2.0 * (double)bytes * reps / s / 1e9;
}
