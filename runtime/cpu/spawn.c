/* Running programs with an argument vector (posix_spawnp), never a shell. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "spawn.h"

extern char **environ;

void kl_argv_add(kl_argv *a, const char *arg)
{
    kl_vec_push(*a, kl_xstrdup(arg));
}

void kl_argv_add_words(kl_argv *a, const char *words)
{
    const char *s = words;
    while (*s) {
        while (*s == ' ' || *s == '\t')
            s++;
        size_t n = strcspn(s, " \t");
        if (n)
            kl_vec_push(*a, kl_xstrndup(s, n));
        s += n;
    }
}

char *const *kl_argv_end(kl_argv *a)
{
    kl_vec_push(*a, NULL);
    a->n--; /* the NULL stays after the last argument */
    return a->v;
}

void kl_argv_free(kl_argv *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    kl_vec_free(*a);
}

char *kl_argv_str(const kl_argv *a)
{
    kl_buf b = {0};
    for (int i = 0; i < a->n; i++) {
        const char *s = a->v[i];
        if (i)
            kl_buf_putc(&b, ' ');
        if (*s && !s[strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=,:+@%")]) {
            kl_buf_puts(&b, s);
            continue;
        }
        kl_buf_putc(&b, '\'');
        for (; *s; s++)
            if (*s == '\'')
                kl_buf_puts(&b, "'\\''");
            else
                kl_buf_putc(&b, *s);
        kl_buf_putc(&b, '\'');
    }
    if (!b.s)
        kl_buf_puts(&b, "");
    return kl_buf_take(&b);
}

int kl_spawn(char *const *argv, const char *log, char *why, size_t why_len)
{
    return kl_spawn_input(argv, NULL, log, why, why_len);
}

int kl_spawn_input(char *const *argv, const char *in, const char *log, char *why, size_t why_len)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in)
        posix_spawn_file_actions_addopen(&fa, 0, in, O_RDONLY | O_NOFOLLOW, 0);
    const char *out = log ? log : "/dev/null";
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (err) {
        if (err == ENOENT)
            snprintf(why, why_len, "%s: not found", argv[0]);
        else
            snprintf(why, why_len, "%s: %s", argv[0], strerror(err));
        return -1;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            snprintf(why, why_len, "%s: %s", argv[0], strerror(errno));
            return -1;
        }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    if (WIFEXITED(st))
        snprintf(why, why_len, "%s: exit status %d", argv[0], WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(why, why_len, "%s: killed by signal %d", argv[0], WTERMSIG(st));
    else
        snprintf(why, why_len, "%s: stopped", argv[0]);
    return -1;
}
