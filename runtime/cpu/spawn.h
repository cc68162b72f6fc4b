/* Running the host compiler (and other programs) without a shell.
 *
 * Every command is an argument vector: a path, a model name or a flag is
 * one element, never text pasted into a shell command line, so quotes,
 * spaces and semicolons in user input reach the program unchanged. */
#ifndef KILN_SPAWN_H
#define KILN_SPAWN_H

#include <stdbool.h>
#include <stddef.h>

#include "base/support.h"

/* An argument vector under construction; NULL-terminated by kl_argv_end. */
typedef KL_VEC(char *) kl_argv;

/* Appends a copy of one argument. */
void kl_argv_add(kl_argv *a, const char *arg);
/* Appends each blank-separated word of words (no quoting: for compiler
 * names such as "ccache gcc" and flag lists such as kl_cc_flags()). */
void kl_argv_add_words(kl_argv *a, const char *words);
/* The vector, NULL-terminated, for kl_spawn (still owned by a). */
char *const *kl_argv_end(kl_argv *a);
void kl_argv_free(kl_argv *a);
/* The command as one line for messages and --verbose, each argument
 * quoted for a POSIX shell where it needs it (caller frees). */
char *kl_argv_str(const kl_argv *a);

/* Runs argv (argv[0] looked up on PATH) and waits for it. Its standard
 * output and error go to the file log (created or truncated), or to
 * /dev/null when log is NULL. Returns 0 when it exited with status 0;
 * else -1 with what went wrong in why: "cc: not found", "exit status 1",
 * "killed by signal 9". */
int kl_spawn(char *const *argv, const char *log, char *why, size_t why_len);
/* The same with standard input read from the file in (NULL: inherited). */
int kl_spawn_input(char *const *argv, const char *in, const char *log, char *why, size_t why_len);

/* Appends the C compiler's words (kl_cc()) and kl_cc_flags() to a
 * (runtime/cpu/cc.c). */
void kl_argv_add_cc(kl_argv *a);

#endif
