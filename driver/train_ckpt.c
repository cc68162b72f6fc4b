/* Periodic checkpoints: --save-every N writes SAVE.step-N every N steps
 * (besides SAVE itself at each epoch's end and the run's), and --keep K
 * removes all but the newest K of them. A new one is written whole and
 * renamed into place (runtime/outfile.h) before any older one is
 * removed, so a crash at any point leaves at least the previous one. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainer.h"

int train_check_ckpt_flags(const train_options *o)
{
    if (o->save_every && !o->save) {
        kl_error("--save-every needs --save FILE (the periodic checkpoints are FILE.step-N)");
        return -1;
    }
    if (o->keep && !o->save_every) {
        kl_error("--keep needs --save-every (it counts the periodic checkpoints)");
        return -1;
    }
    return 0;
}

char *train_periodic_path(const char *save, int64_t step)
{
    return kl_xasprintf("%s.step-%lld", save, (long long)step);
}

/* The step of a file named BASE.step-DIGITS, or -1. */
static int64_t periodic_step(const char *name, const char *base)
{
    size_t n = strlen(base);
    if (strncmp(name, base, n) || strncmp(name + n, ".step-", 6))
        return -1;
    const char *d = name + n + 6;
    if (!*d || strspn(d, "0123456789") != strlen(d) || strlen(d) > 18)
        return -1;
    return strtoll(d, NULL, 10);
}

typedef struct found {
    int64_t step;
    char *path;
} found;

static int newest_first(const void *a, const void *b)
{
    int64_t x = ((const found *)a)->step, y = ((const found *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

void train_prune_checkpoints(const train_options *o)
{
    if (!o->keep)
        return;
    const char *slash = strrchr(o->save, '/');
    char *dir = slash ? kl_xstrndup(o->save, (size_t)(slash - o->save + (slash == o->save))) : kl_xstrdup(".");
    const char *base = slash ? slash + 1 : o->save;
    DIR *d = opendir(dir);
    if (!d) {
        free(dir);
        return;
    }
    KL_VEC(found) all = {0};
    struct dirent *ent;
    while ((ent = readdir(d))) {
        int64_t step = periodic_step(ent->d_name, base);
        if (step < 0)
            continue;
        char *path = kl_xasprintf("%s/%s", dir, ent->d_name);
        struct stat st;
        /* Only regular files: a link or folder of that name is left. */
        if (lstat(path, &st) || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        found f = {step, path};
        kl_vec_push(all, f);
    }
    closedir(d);
    qsort(all.v, (size_t)all.n, sizeof *all.v, newest_first);
    for (int i = 0; i < all.n; i++) {
        if (i >= o->keep && unlink(all.v[i].path))
            fprintf(stderr, "kiln: warning: cannot remove the old checkpoint %s\n", all.v[i].path);
        free(all.v[i].path);
    }
    kl_vec_free(all);
    free(dir);
}
