/* The simulated device's memory and its sanitizer.
 *
 * Device memory is host memory, so the emulated kernels use device
 * pointers directly; every allocation is kept in a table. The sanitizer
 * (on unless KILN_SIMGPU_SANITIZE=0) reports, naming the call, and ends
 * the process with SIM_SAN_EXIT:
 *   - out of bounds: each cuMemAlloc sits between two red zones (a
 *     signalling-NaN pattern of its own); a copy, memset, GEMM operand or
 *     collective buffer is checked exactly before it runs, a kernel's
 *     pointer arguments' red zones after it ran (a write past the end; a
 *     read there is not seen, and reads a NaN);
 *   - use after free: freed memory is poisoned (all-ones bytes) and held
 *     back from reuse (QUARANTINE_BYTES); an operation or a kernel
 *     argument there is reported, and a write into it is found when it
 *     leaves the quarantine or at the end;
 *   - uninitialised memory: new memory holds a signalling-NaN pattern
 *     (0x7fa0 in every 16-bit half), and a copy to the host of a word
 *     still holding it is reported;
 *   - cross-stream hazards: every stream and graph branch is a lane with a
 *     vector clock (events carry snapshots, waits and host
 *     synchronisations merge them); each allocation keeps its recent
 *     accesses (byte ranges; a kernel's pointer argument is a write at that
 *     byte, as the simulator cannot know a kernel's extent), and an access
 *     that conflicts with another lane's (one of them a write) that it is
 *     not ordered after is reported;
 *   - host access without synchronisation: pinned memory is mapped twice
 *     (the host's view and the device's); while a cuMemcpyDtoHAsync into
 *     it is pending, the host's view of its pages is protected, and a host
 *     access to the destination before a synchronisation that covers the
 *     copy is reported (an access elsewhere on those pages only lifts the
 *     protection);
 *   - leaks: allocations still held when the last context is released. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim.h"

#define RED_ZONE 256 /* bytes before and after each allocation (keeps its 256-byte alignment) */
#define UNINIT_BYTE(x) (((uintptr_t)(x) & 1) ? 0x7f : 0xa0) /* 0x7fa0: bf16, f32 (0x7fa07fa0) sNaN */
#define RED_BYTE(x) (((uintptr_t)(x) & 1) ? 0x7f : 0xb1)    /* 0x7fb1: another sNaN */
#define UNINIT_WORD 0x7fa07fa0u
#define MAX_RECS 65536

typedef struct san_rec {
    size_t lo, hi; /* bytes of the allocation */
    int lane;
    bool write;
    uint64_t clock;
    char call[72];
} san_rec;

typedef struct sim_alloc {
    char *p;        /* the caller's pointer */
    size_t n;       /* asked for */
    size_t charged; /* counted, and the usable bytes (512-byte units) */
    bool pinned;    /* host memory from cuMemHostAlloc */
    char *dev_view; /* pinned: the device's mapping of the same pages */
    size_t mapped;  /* pinned: bytes mapped */
    uint64_t id;    /* #id in reports: the allocation's number */
    san_rec *recs;
    int nrecs, cap_recs;
} sim_alloc;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_alloc *allocs;
static int nallocs, cap_allocs;
static size_t mem_used;
static uint64_t next_id;
static int san = -1; /* KILN_SIMGPU_SANITIZE */

void sim_san_init(void)
{
    const char *v = getenv("KILN_SIMGPU_SANITIZE");
    san = !(v && !strcmp(v, "0"));
}

bool sim_san_on(void)
{
    return san != 0;
}

void sim_san_report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "kiln: simulated device: sanitizer: %s\n"
                    "kiln: simulated device: sanitizer: the process ends (exit status %d; KILN_SIMGPU_SANITIZE=0 turns "
                    "the sanitizer off)\n",
            line, SIM_SAN_EXIT);
    fflush(stderr);
    _exit(SIM_SAN_EXIT);
}

/* ---- lanes and clocks ---- */

static uint64_t clocks[SIM_LANES][SIM_LANES];
static char lane_kind[SIM_LANES]; /* 0 free, 'h' host, 's' stream, 'g' graph branch */
static __thread int cur_lane;     /* 0: the host */
static uint64_t host_epoch;

static const char *lane_name(int lane, char *buf, size_t n)
{
    if (lane == 0)
        snprintf(buf, n, "the host");
    else
        snprintf(buf, n, "%s %d", lane_kind[lane] == 'g' ? "graph branch" : "stream", lane);
    return buf;
}

int sim_lane_new(bool graph)
{
    pthread_mutex_lock(&mem_lock);
    lane_kind[0] = 'h';
    int got = -1;
    for (int i = 1; i < SIM_LANES && got < 0; i++)
        if (!lane_kind[i]) {
            lane_kind[i] = graph ? 'g' : 's';
            got = i;
        }
    pthread_mutex_unlock(&mem_lock);
    return got;
}

/* A freed lane keeps its clock: a stream that takes it later continues
 * it, so old records stay comparable. */
void sim_lane_free(int lane)
{
    if (lane <= 0)
        return;
    pthread_mutex_lock(&mem_lock);
    lane_kind[lane] = 0;
    pthread_mutex_unlock(&mem_lock);
}

void sim_lane_set(int lane)
{
    cur_lane = lane;
}

void sim_lane_enter(int lane)
{
    cur_lane = lane;
    if (lane < 0)
        return;
    pthread_mutex_lock(&mem_lock);
    clocks[lane][lane]++;
    pthread_mutex_unlock(&mem_lock);
}

int sim_lane_current(void)
{
    return cur_lane;
}

void sim_clock_get(int lane, uint64_t *vc)
{
    pthread_mutex_lock(&mem_lock);
    if (lane >= 0)
        memcpy(vc, clocks[lane], sizeof clocks[lane]);
    else
        memset(vc, 0, sizeof clocks[0]);
    pthread_mutex_unlock(&mem_lock);
}

static void merge_locked(int lane, const uint64_t *vc)
{
    for (int i = 0; i < SIM_LANES; i++)
        if (clocks[lane][i] < vc[i])
            clocks[lane][i] = vc[i];
}

void sim_clock_merge(int lane, const uint64_t *vc)
{
    if (lane < 0)
        return;
    pthread_mutex_lock(&mem_lock);
    merge_locked(lane, vc);
    pthread_mutex_unlock(&mem_lock);
}

static void resolve_pending_locked(void);

void sim_host_synced_lane(int lane)
{
    if (lane < 0)
        return;
    pthread_mutex_lock(&mem_lock);
    merge_locked(0, clocks[lane]);
    host_epoch++;
    resolve_pending_locked();
    pthread_mutex_unlock(&mem_lock);
}

void sim_host_synced(const uint64_t *vc)
{
    pthread_mutex_lock(&mem_lock);
    merge_locked(0, vc);
    host_epoch++;
    resolve_pending_locked();
    pthread_mutex_unlock(&mem_lock);
}

uint64_t sim_host_epoch(void)
{
    return __atomic_load_n(&host_epoch, __ATOMIC_SEQ_CST);
}

/* ---- the allocation table ---- */

/* The live allocation holding p (device or pinned), or -1. */
static int find_alloc(const void *p, size_t n, bool pinned)
{
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].pinned == pinned && (const char *)p >= allocs[i].p &&
            (const char *)p + n <= allocs[i].p + allocs[i].n)
            return i;
    return -1;
}

bool sim_mem_valid(CUdeviceptr p, size_t n)
{
    pthread_mutex_lock(&mem_lock);
    bool ok = find_alloc((const void *)(uintptr_t)p, n, false) >= 0;
    pthread_mutex_unlock(&mem_lock);
    return ok;
}

bool sim_host_pinned(const void *p, size_t n)
{
    pthread_mutex_lock(&mem_lock);
    bool ok = find_alloc(p, n, true) >= 0;
    pthread_mutex_unlock(&mem_lock);
    return ok;
}

void *sim_pinned_device_view(const void *host)
{
    pthread_mutex_lock(&mem_lock);
    int i = find_alloc(host, 1, true);
    void *v = i >= 0 ? allocs[i].dev_view + ((const char *)host - allocs[i].p) : (void *)host;
    pthread_mutex_unlock(&mem_lock);
    return v;
}

/* Freed device memory is poisoned (all-ones bytes) and held back from
 * reuse while the most recent QUARANTINE_BYTES of frees fit: a later
 * copy, memset, GEMM operand or kernel argument there is reported (or,
 * with the sanitizer off, refused as outside every allocation), and a
 * kernel reading it reads NaNs. */
#define QUARANTINE_BYTES ((size_t)256 << 20)
#define QUARANTINE_N 4096
static struct {
    char *p; /* the caller's pointer; the red zones around it */
    size_t charged;
    uint64_t id;
} quarantine[QUARANTINE_N];
static int q_head, q_count;
static size_t q_bytes;

static int find_freed(const void *p)
{
    for (int k = 0; k < q_count; k++) {
        int i = (q_head + k) % QUARANTINE_N;
        if ((const char *)p >= quarantine[i].p && (const char *)p < quarantine[i].p + quarantine[i].charged)
            return i;
    }
    return -1;
}

/* The first byte of [p, p + n) that is not all-ones, or n. */
static size_t first_not_poison(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] != 0xff)
            return i;
    return n;
}

static void check_freed(int i, const char *when)
{
    size_t at = first_not_poison(quarantine[i].p, quarantine[i].charged);
    if (san && at < quarantine[i].charged)
        sim_san_report("use after free: byte +%zu of buffer #%llu (%zu bytes, freed) was written after cuMemFree "
                       "(found %s)",
                       at, (unsigned long long)quarantine[i].id, quarantine[i].charged, when);
}

static void quarantine_add(char *p, size_t charged, uint64_t id)
{
    memset(p, 0xff, charged);
    while (q_count && (q_bytes + charged > QUARANTINE_BYTES || q_count == QUARANTINE_N)) {
        check_freed(q_head, "when it left the quarantine");
        free(quarantine[q_head].p - RED_ZONE);
        q_bytes -= quarantine[q_head].charged;
        q_head = (q_head + 1) % QUARANTINE_N;
        q_count--;
    }
    if (charged > QUARANTINE_BYTES) {
        free(p - RED_ZONE);
        return;
    }
    int at = (q_head + q_count) % QUARANTINE_N;
    quarantine[at].p = p, quarantine[at].charged = charged, quarantine[at].id = id;
    q_bytes += charged;
    q_count++;
}

/* The red zones of allocation i: before it, and from its end (the bytes
 * asked for) to the end of the zone after it. */
static void check_red_zones(const sim_alloc *a, const char *who)
{
    if (!san)
        return;
    const char *lo = a->p - RED_ZONE, *hi = a->p + a->charged + RED_ZONE;
    for (const char *x = lo; x < a->p; x++)
        if ((unsigned char)*x != RED_BYTE(x))
            sim_san_report("out of bounds: %s wrote byte %td before buffer #%llu (%zu bytes at %p)", who,
                           a->p - x, (unsigned long long)a->id, a->n, (void *)a->p);
    for (const char *x = a->p + a->n; x < hi; x++)
        if ((unsigned char)*x != RED_BYTE(x))
            sim_san_report("out of bounds: %s wrote byte +%td of buffer #%llu (%zu bytes at %p): %td bytes past its end",
                           who, x - a->p, (unsigned long long)a->id, a->n, (void *)a->p, x - (a->p + a->n) + 1);
}

static CUresult add_device(void **out, size_t n)
{
    /* Device memory comes in 2 MiB pages' granularity on a GPU; the
     * simulator counts 512-byte units (cuMemAlloc aligns to 256). */
    size_t charged = (n + 511) / 512 * 512;
    pthread_mutex_lock(&mem_lock);
    if (mem_used + charged > sim_mem_total) {
        pthread_mutex_unlock(&mem_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *raw = NULL;
    if (posix_memalign(&raw, 256, charged + 2 * RED_ZONE)) {
        pthread_mutex_unlock(&mem_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    char *p = (char *)raw + RED_ZONE;
    if (nallocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 256;
        allocs = realloc(allocs, sizeof *allocs * (size_t)cap_allocs);
    }
    allocs[nallocs++] = (sim_alloc){.p = p, .n = n, .charged = charged, .id = ++next_id};
    mem_used += charged;
    /* A GPU's new memory holds whatever was there: here a signalling NaN
     * in f32, bf16 (and fp16: a NaN), so a read of memory nothing wrote
     * shows in the results, and a copy of it to the host is reported. */
    for (char *x = raw; x < p; x++)
        *x = (char)RED_BYTE(x);
    for (char *x = p; x < p + n; x++)
        *x = (char)UNINIT_BYTE(x);
    for (char *x = p + n; x < p + charged + RED_ZONE; x++)
        *x = (char)RED_BYTE(x);
    pthread_mutex_unlock(&mem_lock);
    *out = p;
    return CUDA_SUCCESS;
}

/* Pinned memory: the same pages mapped twice, so the host's view can be
 * protected while the device's stays writable. */
static CUresult add_pinned(void **out, size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), mapped = (n + page - 1) / page * page;
    int fd = memfd_create("kiln-simgpu-pinned", MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    char *host = MAP_FAILED, *dev = MAP_FAILED;
    if (!ftruncate(fd, (off_t)mapped)) {
        host = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        dev = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    close(fd);
    if (host == MAP_FAILED || dev == MAP_FAILED) {
        if (host != MAP_FAILED)
            munmap(host, mapped);
        if (dev != MAP_FAILED)
            munmap(dev, mapped);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&mem_lock);
    if (nallocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 256;
        allocs = realloc(allocs, sizeof *allocs * (size_t)cap_allocs);
    }
    allocs[nallocs++] =
        (sim_alloc){.p = host, .n = n, .charged = n, .pinned = true, .dev_view = dev, .mapped = mapped, .id = ++next_id};
    pthread_mutex_unlock(&mem_lock);
    *out = host;
    return CUDA_SUCCESS;
}

static void drop_pending_locked(const char *lo, const char *hi);

static CUresult remove_alloc(void *p, bool pinned, const char *call)
{
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].p == p && allocs[i].pinned == pinned) {
            sim_alloc a = allocs[i];
            allocs[i] = allocs[--nallocs];
            free(a.recs);
            if (pinned) {
                drop_pending_locked(a.p, a.p + a.mapped);
                munmap(a.p, a.mapped);
                munmap(a.dev_view, a.mapped);
            } else {
                char who[64];
                snprintf(who, sizeof who, "an operation before %s", call);
                check_red_zones(&a, who);
                mem_used -= a.charged;
                quarantine_add(a.p, a.charged, a.id);
            }
            pthread_mutex_unlock(&mem_lock);
            return CUDA_SUCCESS;
        }
    int q = pinned ? -1 : find_freed(p);
    pthread_mutex_unlock(&mem_lock);
    if (san && q >= 0)
        sim_san_report("%s of %p: buffer #%llu was freed already (a double free)", call, p,
                       (unsigned long long)quarantine[q].id);
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- the checks ---- */

bool sim_mem_check(const char *call, const char *what, const void *p, size_t n)
{
    pthread_mutex_lock(&mem_lock);
    if (find_alloc(p, n, false) >= 0) {
        pthread_mutex_unlock(&mem_lock);
        return true;
    }
    if (!san) {
        pthread_mutex_unlock(&mem_lock);
        return false;
    }
    const char *c = p;
    for (int i = 0; i < nallocs; i++) {
        const sim_alloc *a = &allocs[i];
        if (a->pinned)
            continue;
        if (c >= a->p && c < a->p + a->n)
            sim_san_report("out of bounds: %s, %s [+%td, %zu bytes) of buffer #%llu (%zu bytes at %p): %zu bytes past "
                           "its end",
                           call, what, c - a->p, n, (unsigned long long)a->id, a->n, (void *)a->p,
                           (size_t)(c - a->p) + n - a->n);
        if (c < a->p && c + n > a->p - RED_ZONE)
            sim_san_report("out of bounds: %s, %s [%p, %zu bytes) starts %td bytes before buffer #%llu (%zu bytes at %p)",
                           call, what, p, n, a->p - c, (unsigned long long)a->id, a->n, (void *)a->p);
    }
    int q = find_freed(p);
    if (q >= 0)
        sim_san_report("use after free: %s, %s [+%td, %zu bytes) of buffer #%llu (%zu bytes), freed by cuMemFree",
                       call, what, c - quarantine[q].p, n, (unsigned long long)quarantine[q].id, quarantine[q].charged);
    sim_san_report("out of bounds: %s, %s [%p, %zu bytes) is inside no device allocation", call, what, p, n);
}

void sim_san_uninit(const char *call, const void *p, size_t n)
{
    if (!san)
        return;
    const char *c = p;
    const char *w = (const char *)(((uintptr_t)c + 3) & ~(uintptr_t)3);
    size_t found = 0;
    const char *first = NULL;
    for (; w + 4 <= c + n; w += 4) {
        uint32_t v;
        memcpy(&v, w, 4);
        if (v == UNINIT_WORD) {
            found++;
            first = first ? first : w;
        }
    }
    if (!found)
        return;
    pthread_mutex_lock(&mem_lock);
    int i = find_alloc(p, n, false);
    unsigned long long id = i >= 0 ? (unsigned long long)allocs[i].id : 0;
    size_t bytes = i >= 0 ? allocs[i].n : 0;
    ptrdiff_t off = i >= 0 ? first - allocs[i].p : 0;
    pthread_mutex_unlock(&mem_lock);
    sim_san_report("uninitialised memory: %s copies to the host %zu words nothing wrote, the first at byte +%td of "
                   "buffer #%llu (%zu bytes)",
                   call, found, off, id, bytes);
}

static void hazard(const sim_alloc *a, const san_rec *r, const char *call, const char *what, size_t lo, size_t n,
                   bool write)
{
    char me[40], them[40];
    lane_name(cur_lane, me, sizeof me);
    lane_name(r->lane, them, sizeof them);
    sim_san_report("cross-stream hazard: %s (%s) on %s %s [+%zu, %zu bytes) of buffer #%llu (%zu bytes), which %s on %s "
                   "%s [+%zu, %zu bytes) with nothing ordering the two (no event recorded after the one and waited for "
                   "before the other, no synchronisation)",
                   call, what, me, write ? "writes" : "reads", lo, n, (unsigned long long)a->id, a->n, r->call, them,
                   r->write ? "wrote" : "read", r->lo, r->hi - r->lo);
}

static void access_locked(sim_alloc *a, const char *call, const char *what, size_t lo, size_t hi, bool write)
{
    int t = cur_lane;
    for (int i = 0; i < a->nrecs; i++) {
        const san_rec *r = &a->recs[i];
        if (r->lo < hi && lo < r->hi && r->lane != t && (write || r->write) && clocks[t][r->lane] < r->clock)
            hazard(a, r, call, what, lo, hi - lo, write);
    }
    /* Records this one supersedes: any later access ordered after this
     * one is ordered after them too. */
    int k = 0;
    for (int i = 0; i < a->nrecs; i++) {
        const san_rec *r = &a->recs[i];
        bool covered = r->lo >= lo && r->hi <= hi;
        bool before = r->lane == t || clocks[t][r->lane] >= r->clock;
        if (!(covered && before && (write || (!r->write && r->lane == t))))
            a->recs[k++] = *r;
    }
    a->nrecs = k;
    if (a->nrecs == MAX_RECS) {
        /* The oldest half goes: fewer hazards seen, none invented. */
        memmove(a->recs, a->recs + MAX_RECS / 2, sizeof *a->recs * (MAX_RECS / 2));
        a->nrecs = MAX_RECS / 2;
    }
    if (a->nrecs == a->cap_recs) {
        a->cap_recs = a->cap_recs ? 2 * a->cap_recs : 16;
        a->recs = realloc(a->recs, sizeof *a->recs * (size_t)a->cap_recs);
    }
    san_rec *r = &a->recs[a->nrecs++];
    *r = (san_rec){lo, hi, t, write, clocks[t][t], ""};
    snprintf(r->call, sizeof r->call, "%s (%s)", call, what);
}

void sim_san_access(const char *call, const char *what, const void *p, size_t n, bool write)
{
    if (!san || cur_lane < 0 || !p || !n)
        return;
    pthread_mutex_lock(&mem_lock);
    int i = find_alloc(p, 1, false);
    if (i >= 0) {
        sim_alloc *a = &allocs[i];
        size_t lo = (size_t)((const char *)p - a->p), hi = lo + n > a->n ? a->n : lo + n;
        access_locked(a, call, what, lo, hi, write);
    }
    pthread_mutex_unlock(&mem_lock);
}

void sim_san_kernel_before(const char *name, void *const *ptrs, int n)
{
    if (!san)
        return;
    pthread_mutex_lock(&mem_lock);
    for (int k = 0; k < n; k++) {
        if (!ptrs[k] || find_alloc(ptrs[k], 1, false) >= 0)
            continue;
        int q = find_freed(ptrs[k]);
        if (q >= 0)
            sim_san_report("use after free: kernel %s, argument %d points at byte +%td of buffer #%llu (%zu bytes), "
                           "freed by cuMemFree",
                           name, k, (const char *)ptrs[k] - quarantine[q].p, (unsigned long long)quarantine[q].id,
                           quarantine[q].charged);
    }
    pthread_mutex_unlock(&mem_lock);
}

void sim_san_kernel_after(const char *name, void *const *ptrs, int n)
{
    if (!san)
        return;
    char who[200], lane[40];
    snprintf(who, sizeof who, "kernel %s (on %s)", name, lane_name(cur_lane, lane, sizeof lane));
    pthread_mutex_lock(&mem_lock);
    for (int k = 0; k < n; k++) {
        int i = ptrs[k] ? find_alloc(ptrs[k], 1, false) : -1;
        if (i < 0)
            continue;
        check_red_zones(&allocs[i], who);
        if (cur_lane >= 0) {
            char what[24];
            snprintf(what, sizeof what, "argument %d", k);
            size_t lo = (size_t)((const char *)ptrs[k] - allocs[i].p);
            snprintf(who, sizeof who, "kernel %s", name);
            access_locked(&allocs[i], who, what, lo, lo + 1, true);
        }
    }
    pthread_mutex_unlock(&mem_lock);
}

void sim_san_leaks(const char *call)
{
    if (!san)
        return;
    pthread_mutex_lock(&mem_lock);
    for (int k = 0; k < q_count; k++)
        check_freed((q_head + k) % QUARANTINE_N, "at the last context's release");
    size_t dev = 0, bytes = 0;
    const sim_alloc *first = NULL;
    for (int i = 0; i < nallocs; i++) {
        if (!allocs[i].pinned)
            check_red_zones(&allocs[i], "an operation");
        dev++;
        bytes += allocs[i].n;
        if (!first || allocs[i].id < first->id)
            first = &allocs[i];
    }
    if (dev)
        sim_san_report("leak: %zu allocation(s) (%zu bytes) still held at %s (the last context's release), the first "
                       "buffer #%llu (%zu bytes of %s memory)",
                       dev, bytes, call, (unsigned long long)first->id, first->n,
                       first->pinned ? "pinned host" : "device");
    pthread_mutex_unlock(&mem_lock);
}

/* ---- host access before synchronisation ---- */

#define PENDING_N 64
static struct {
    bool used, ran, protected;
    char *lo, *hi;         /* the destination */
    char *page_lo, *page_hi; /* the pages protected */
    int lane;
    uint64_t clock; /* the copy's, once it ran */
} pending[PENDING_N];
static struct sigaction old_segv;
static bool segv_installed;

static void protect_locked(void)
{
    /* Every page some protected pending copy covers: none while none. */
    for (int i = 0; i < PENDING_N; i++)
        if (pending[i].used && pending[i].protected)
            mprotect(pending[i].page_lo, (size_t)(pending[i].page_hi - pending[i].page_lo), PROT_NONE);
}

static void unprotect(int i)
{
    mprotect(pending[i].page_lo, (size_t)(pending[i].page_hi - pending[i].page_lo), PROT_READ | PROT_WRITE);
    pending[i].protected = false;
}

static void on_segv(int sig, siginfo_t *si, void *ctx)
{
    char *x = si->si_addr;
    bool ours = false;
    for (int i = 0; i < PENDING_N; i++) {
        if (!pending[i].used || !pending[i].protected || x < pending[i].page_lo || x >= pending[i].page_hi)
            continue;
        if (x >= pending[i].lo && x < pending[i].hi) {
            char s[40];
            lane_name(pending[i].lane, s, sizeof s);
            sim_san_report("host access without synchronisation: byte +%td of the destination of a cuMemcpyDtoHAsync "
                           "(%td bytes at %p) queued on %s, before that stream or an event recorded after the copy "
                           "was synchronised",
                           x - pending[i].lo, pending[i].hi - pending[i].lo, (void *)pending[i].lo, s);
        }
        /* Elsewhere on the copy's pages: its protection is lifted. */
        unprotect(i);
        ours = true;
    }
    if (ours) {
        protect_locked();
        return;
    }
    sigaction(SIGSEGV, &old_segv, NULL);
    if (old_segv.sa_flags & SA_SIGINFO && old_segv.sa_sigaction)
        old_segv.sa_sigaction(sig, si, ctx);
    else if (old_segv.sa_handler != SIG_DFL && old_segv.sa_handler != SIG_IGN)
        old_segv.sa_handler(sig);
}

int sim_san_pending_d2h(void *dst, size_t n, int lane)
{
    if (!san)
        return -1;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    pthread_mutex_lock(&mem_lock);
    if (!segv_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &old_segv);
        segv_installed = true;
    }
    int got = -1;
    for (int i = 0; i < PENDING_N && got < 0; i++)
        if (!pending[i].used)
            got = i;
    if (got >= 0) {
        char *lo = dst;
        pending[got].used = true, pending[got].ran = false, pending[got].protected = true;
        pending[got].lo = lo, pending[got].hi = lo + n;
        pending[got].page_lo = (char *)((uintptr_t)lo & ~(uintptr_t)(page - 1));
        pending[got].page_hi = (char *)(((uintptr_t)lo + n + page - 1) & ~(uintptr_t)(page - 1));
        pending[got].lane = lane;
        protect_locked();
    }
    pthread_mutex_unlock(&mem_lock);
    return got;
}

void sim_san_d2h_ran(int slot)
{
    if (slot < 0)
        return;
    pthread_mutex_lock(&mem_lock);
    pending[slot].lane = cur_lane;
    pending[slot].clock = cur_lane >= 0 ? clocks[cur_lane][cur_lane] : 0;
    pending[slot].ran = true;
    pthread_mutex_unlock(&mem_lock);
}

static void resolve_pending_locked(void)
{
    bool any = false;
    for (int i = 0; i < PENDING_N; i++)
        if (pending[i].used && pending[i].ran && (pending[i].lane < 0 || clocks[0][pending[i].lane] >= pending[i].clock)) {
            if (pending[i].protected)
                unprotect(i);
            pending[i].used = false;
            any = true;
        }
    if (any)
        protect_locked();
}

static void drop_pending_locked(const char *lo, const char *hi)
{
    for (int i = 0; i < PENDING_N; i++)
        if (pending[i].used && pending[i].lo >= lo && pending[i].lo < hi) {
            if (pending[i].protected)
                unprotect(i);
            pending[i].used = false;
        }
    protect_locked();
}

/* ---- the API ---- */

SIM_EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytes)
{
    SIM_FAULT(CUresult, "cuMemAlloc");
    if (!sim_dev)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_sticky();
    if (r)
        return r;
    void *p;
    if ((r = add_device(&p, bytes)))
        return r;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemFree(CUdeviceptr p)
{
    SIM_FAULT(CUresult, "cuMemFree");
    if (!sim_dev)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p)
        return CUDA_SUCCESS;
    /* The queued work that may still use it runs first. */
    sim_device_idle();
    return remove_alloc((void *)(uintptr_t)p, false, "cuMemFree");
}

SIM_EXPORT CUresult cuMemGetInfo(size_t *free_b, size_t *total)
{
    SIM_FAULT(CUresult, "cuMemGetInfo");
    if (!sim_dev)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&mem_lock);
    *free_b = sim_mem_total - mem_used;
    *total = sim_mem_total;
    pthread_mutex_unlock(&mem_lock);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags)
{
    SIM_FAULT(CUresult, "cuMemHostAlloc");
    if (!sim_dev)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p || !bytes || flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return add_pinned(p, bytes);
}

SIM_EXPORT CUresult cuMemFreeHost(void *p)
{
    if (!sim_dev)
        return CUDA_ERROR_NOT_INITIALIZED;
    return remove_alloc(p, true, "cuMemFreeHost");
}
