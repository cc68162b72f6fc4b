/* The data path one way: the loader's workers write each field in the
 * dtype of the input it feeds (u8 pixels into an f32 input, i32 labels
 * into an i64 one), a short batch padded by repeating its samples, and
 * train_feed copies the batch into the step's inputs with no allocation
 * on the step's thread. Counted through the linker (--wrap of malloc,
 * calloc, realloc, posix_memalign and aligned_alloc, per thread); the
 * inputs read back are checked against the data set's samples, value for
 * value. Also: two inputs may not read one field as different dtypes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "driver/trainer.h"
#include "unit/session_fixture.h"

/* ---- allocations on this thread ---- */

static __thread long allocations;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);

void *__wrap_malloc(size_t n)
{
    allocations++;
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    allocations++;
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    allocations++;
    return __real_realloc(p, n);
}

int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
    allocations++;
    return __real_posix_memalign(p, align, n);
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
    allocations++;
    return __real_aligned_alloc(align, n);
}

/* ---- the check ---- */

#define BATCH 16
#define SAMPLES 40 /* batches of 16, 16 and a short one of 8 */

static const char *model =
    "model feed {\n"
    "  input image : f32[batch, 1, 28, 28]\n"
    "  input label : i64[batch]\n"
    "  param w : [784, 10] init = kaiming\n"
    "  loss = cross_entropy(flatten(image) @ w, label)\n"
    "}\n"
    "train { batch = 16  optimizer = sgd(lr = 0.1) }\n";

static int fail(const char *what)
{
    printf("FAIL: %s\n", what);
    return 1;
}

int main(void)
{
    long a0 = allocations;
    free(kl_xmalloc(8));
    if (allocations == a0)
        return fail("the allocation counter does not count kl_xmalloc (is the link's --wrap missing?)");
    kl_compile_opts cc = {.mode = KL_MODE_EVAL, .verify = true};
    kl_compiled *cm = fixture_compile_text("feed.kl", model, &cc);
    if (!cm)
        return fail("the model does not compile");
    fixture_run r;
    fixture_start(&r, cm, 1);
    kl_backend *be = r.be;
    kl_session *s = r.s;
    kl_exec *e = r.e;
    kl_dataset d;
    bindings b;
    if (!e || kl_synthetic(SAMPLES, 5, &d) || train_bind_inputs(e->g, &d, &b, "feed.kl"))
        return fail("no exec, data set or bindings");
    if (d.field[0].feed != IR_F32 || d.field[1].feed != IR_I64)
        return fail("the bound fields' feed dtypes are not the inputs' (f32, i64)");
    /* Bound again as the same dtype (a second plan, say): fine; as
     * another: refused. */
    if (kl_dataset_bind_field(&d, 0, IR_F32) != 0 || kl_dataset_bind_field(&d, 0, IR_BF16) != -1)
        return fail("kl_dataset_bind_field: the same dtype again is fine, another is refused");

    kl_loader_opts lo = {.batch = BATCH, .depth = 3, .workers = 2};
    kl_loader *l = kl_loader_new_opts(&d, &lo);
    kl_loader_start(l, 0);
    int image = ir_find_value(e->g, "image"), label = ir_find_value(e->g, "label");
    float *x = malloc(sizeof(float) * BATCH * 784);
    int64_t *y = malloc(sizeof(int64_t) * BATCH);
    const kl_batch *bt;
    int rc = 0, batches = 0;
    long most = 0;
    while ((bt = kl_loader_next(l))) {
        if (bt->rows != BATCH)
            return fail("the batch does not hold the loader's rows");
        long before = allocations;
        train_feed(e, &b, bt);
        long n = allocations - before;
        most = n > most ? n : most;
        kl_exec_read(e, image, x, sizeof(float) * BATCH * 784);
        kl_exec_read(e, label, y, sizeof(int64_t) * BATCH);
        /* Unshuffled: row i of batch k is sample 16 k + i, a short
         * batch's rows past its size repeat its samples from the first. */
        for (int64_t i = 0; i < BATCH && !rc; i++) {
            int64_t id = bt->index * BATCH + i % bt->size;
            for (int j = 0; j < 784; j++)
                if (x[i * 784 + j] != (float)d.features[id * 784 + j]) {
                    printf("FAIL: batch %lld row %lld pixel %d: %g, want %d\n", (long long)bt->index, (long long)i, j,
                           x[i * 784 + j], d.features[id * 784 + j]);
                    rc = 1;
                    break;
                }
            if (!rc && y[i] != d.labels[id]) {
                printf("FAIL: batch %lld row %lld label %lld, want %d\n", (long long)bt->index, (long long)i,
                       (long long)y[i], d.labels[id]);
                rc = 1;
            }
        }
        batches++;
        kl_loader_release(l, bt);
    }
    if (batches != 3)
        rc = fail("not the 3 batches of 40 samples in 16s");
    if (most) {
        printf("FAIL: train_feed allocated %ld time%s on the step's thread in one call\n", most, most == 1 ? "" : "s");
        rc = 1;
    }
    if (!rc)
        printf("ok: %d batches (the last short, padded) fed as f32 and i64 inputs, value for value; "
               "no allocation in train_feed\n", batches);
    free(x);
    free(y);
    kl_loader_free(l);
    kl_dataset_free(&d);
    kl_exec_free(e);
    kl_session_free(s);
    be->ops->destroy(be);
    return rc;
}
