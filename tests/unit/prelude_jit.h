/* For the unit tests that check the kernels' prelude helpers as the
 * kernels run them: a checker's source compiled after the prelude by the
 * CPU backend's compiler with the kernels' flags (kl_cpu_jit). Include
 * after cmocka.h, codegen/kir.h and runtime/exec/backend.h. */
#ifndef KILN_TESTS_PRELUDE_JIT_H
#define KILN_TESTS_PRELUDE_JIT_H

#include <dlfcn.h>

/* The function called name in the compiled checker (the test fails when
 * it does not compile or has no such symbol). */
static void *prelude_jit_symbol(const char *checker, const char *name)
{
    kl_buf src = {0};
    kl_buf_puts(&src, kir_c_prelude());
    kl_buf_puts(&src, checker);
    void *lib = kl_cpu_jit(src.s, NULL, true, NULL);
    kl_buf_free(&src);
    assert_non_null(lib);
    void *fn = dlsym(lib, name);
    assert_non_null(fn);
    return fn;
}

#endif
