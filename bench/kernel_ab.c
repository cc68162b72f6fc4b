/* Times the same kernels from two builds of a model's generated C against
 * each other (see bench/kernel_ab.sh): both shared objects are loaded,
 * every named kernel runs on the same buffers, old and new alternated,
 * and the best CPU time of REPEATS runs of each is printed with the ratio.
 * Buffers: 12 of 40 MiB each, filled with normal bf16/f16 values of random
 * sign (so only kernels whose buffers are float data and fit are fair
 * game: no integer index inputs). One thread, flush-to-zero and
 * denormals-are-zero as the CPU backend runs kernels. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xmmintrin.h>

typedef struct { long long step; unsigned long long seed; } kargs;
typedef void (*kernel_fn)(void *const *, const kargs *);

static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: kernel_ab OLD.so NEW.so REPEATS KERNEL|OLD:NEW...\n");
        return 2;
    }
    _mm_setcsr(_mm_getcsr() | 0x8040);
    void *lib[2] = {dlopen(argv[1], RTLD_NOW), dlopen(argv[2], RTLD_NOW)};
    if (!lib[0] || !lib[1]) {
        fprintf(stderr, "kernel_ab: %s\n", dlerror());
        return 1;
    }
    int repeats = atoi(argv[3]);
    size_t bytes = (size_t)40 << 20;
    void *bufs[12];
    srand(1);
    for (int i = 0; i < 12; i++) {
        uint16_t *p = aligned_alloc(256, bytes);
        for (size_t j = 0; j < bytes / 2; j++)
            p[j] = (uint16_t)(0x3000 + (rand() & 0x7ff)) | (uint16_t)((rand() & 1) << 15);
        bufs[i] = p;
    }
    kargs ka = {1, 1};
    double total[2] = {0, 0};
    for (int a = 4; a < argc; a++) {
        /* NAME, or OLD:NEW when the kernel's name changed with its code. */
        char buf[256];
        snprintf(buf, sizeof buf, "%s", argv[a]);
        char *colon = strchr(buf, ':');
        const char *name[2] = {buf, colon ? colon + 1 : buf};
        if (colon)
            *colon = 0;
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < repeats; r++)
            for (int v = 0; v < 2; v++) {
                kernel_fn f = (kernel_fn)dlsym(lib[v], name[v]);
                if (!f) {
                    fprintf(stderr, "kernel_ab: %s has no %s\n", argv[1 + v], name[v]);
                    return 1;
                }
                double t0 = cpu_seconds();
                f(bufs, &ka);
                double t = cpu_seconds() - t0;
                best[v] = t < best[v] ? t : best[v];
            }
        printf("%-22s old %9.3f ms  new %9.3f ms  new/old %.2f\n", name[1], best[0] * 1e3, best[1] * 1e3, best[1] / best[0]);
        total[0] += best[0], total[1] += best[1];
    }
    printf("%-22s old %9.3f ms  new %9.3f ms  new/old %.2f\n", "total", total[0] * 1e3, total[1] * 1e3, total[1] / total[0]);
    return 0;
}
