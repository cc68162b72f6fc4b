/* The session set-up the C tests share: a model's text compiled, and the
 * CPU backend (one thread, quiet) with a session and the model's exec.
 * Header only: each test is its own executable. */
#ifndef KILN_TESTS_SESSION_FIXTURE_H
#define KILN_TESTS_SESSION_FIXTURE_H

#include "driver/compile.h"
#include "runtime/exec/session.h"

typedef struct fixture_run {
    kl_backend *be;
    kl_session *s;
    kl_exec *e;
} fixture_run;

/* text compiled with cc as the file name (NULL when it does not compile:
 * the error is printed). */
static inline kl_compiled *fixture_compile_text(const char *name, const char *text, const kl_compile_opts *cc)
{
    kl_source src;
    kl_source_from_string(&src, name, text);
    kl_compiled *c = kl_compile_source(&src, cc);
    kl_source_free(&src);
    return c;
}

/* The backend the checks run on: the CPU's, one thread, quiet. */
static inline kl_backend *fixture_cpu_backend(void)
{
    kl_cpu_options co = {.threads = 1, .quiet = true};
    return kl_cpu_backend_new(&co);
}

/* r: a new CPU backend, a session with seed and c's exec in it (r->e is
 * NULL when c cannot run there). */
static inline void fixture_start(fixture_run *r, kl_compiled *c, uint64_t seed)
{
    r->be = fixture_cpu_backend();
    r->s = kl_session_new(r->be, seed);
    r->e = kl_compiled_exec(r->s, c, NULL);
}

static inline void fixture_finish(fixture_run *r)
{
    kl_exec_free(r->e);
    kl_session_free(r->s);
    r->be->ops->destroy(r->be);
}

#endif
