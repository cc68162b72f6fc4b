/* --resume latest: a job script resubmitted unchanged (after a
 * preemption, a crash, a time limit) continues from the newest complete
 * checkpoint of its --save series, or starts from scratch when there is
 * none. The series is SAVE itself (written at each epoch's end, the
 * run's end and on preemption) and SAVE.step-N (--save-every), ordered
 * by the step each holds: SAVE's own is read from it, a periodic file's
 * is in its name. A temporary (.SAVE.XXXXXX, outfile.h) is never one of
 * them; a file that does not read whole (damaged, truncated by a full
 * disk) is passed over with a note, and the next newest is taken. The
 * one found must be of this run: the same model, precision and lr
 * schedule span, else the run is refused with the reason (a checkpoint
 * records no other setting). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trainer.h"
#include "runtime/ckpt/checkpoint.h"

typedef struct candidate {
    int64_t step;
    char *path;
} candidate;
typedef KL_VEC(candidate) candidates;

static int newest_first(const void *a, const void *b)
{
    int64_t x = ((const candidate *)a)->step, y = ((const candidate *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

static bool regular(const char *path)
{
    struct stat st;
    return !lstat(path, &st) && S_ISREG(st.st_mode);
}

/* Every candidate file of the series; SAVE's step read from it (-1 when
 * it does not read: it is tried last, and noted then). */
static void list_series(const char *save, candidates *all)
{
    const char *slash = strrchr(save, '/');
    char *dir = slash ? kl_xstrndup(save, (size_t)(slash - save + (slash == save))) : kl_xstrdup(".");
    const char *base = slash ? slash + 1 : save;
    DIR *d = opendir(dir);
    struct dirent *ent;
    while (d && (ent = readdir(d))) {
        int64_t step = train_periodic_step(ent->d_name, base);
        if (step < 0)
            continue;
        char *path = kl_xasprintf("%s/%s", dir, ent->d_name);
        if (!regular(path)) {
            free(path);
            continue;
        }
        candidate c = {step, path};
        kl_vec_push(*all, c);
    }
    if (d)
        closedir(d);
    free(dir);
    if (regular(save)) {
        kl_ckpt k;
        candidate c = {-1, kl_xstrdup(save)};
        if (!kl_ckpt_read(&k, save)) {
            c.step = (int64_t)k.rs.step;
            kl_ckpt_free(&k);
        }
        kl_vec_push(*all, c);
    }
}

int train_find_latest(trainer *t)
{
    train_options *o = &t->opt;
    candidates all = {0};
    list_series(o->save, &all);
    if (all.n) /* qsort's array may not be NULL, even for no elements */
        qsort(all.v, (size_t)all.n, sizeof *all.v, newest_first);
    for (int i = 0; i < all.n && !t->latest_path; i++) {
        kl_ckpt k;
        if (kl_ckpt_read(&k, all.v[i].path)) {
            kl_fprintf_escaped(stderr, "kiln: note: --resume latest passes over %s (it does not read whole: above)\n",
                               all.v[i].path);
            continue;
        }
        t->latest_path = all.v[i].path;
        all.v[i].path = NULL;
        t->latest_model = kl_xstrdup(k.model);
        t->latest_precision = kl_xstrdup(k.precision);
        t->latest_span = k.rs.schedule_steps;
        kl_ckpt_free(&k);
    }
    for (int i = 0; i < all.n; i++)
        free(all.v[i].path);
    kl_vec_free(all);
    o->resume = t->latest_path;
    if (!t->latest_path && !o->quiet && t->rank == 0)
        kl_fprintf_escaped(stdout, "--resume latest: no checkpoint of %s yet: starting from scratch\n", o->save);
    return 0;
}

int train_check_latest(const trainer *t, int64_t schedule_span)
{
    const char *path = t->latest_path, *model = t->train->g->name;
    const char *precision = kl_precision_name(t->cfg.precision);
    if (!path)
        return 0;
    if (t->latest_model[0] && strcmp(t->latest_model, model)) {
        kl_error("--resume latest: %s is a checkpoint of model '%s', not of this model '%s'\n"
                 "---> give this run its own --save FILE, or move the other run's files away",
                 path, t->latest_model, model);
        return -1;
    }
    if (t->latest_precision[0] && strcmp(t->latest_precision, precision)) {
        kl_error("--resume latest: %s was saved by a run in %s, this run is %s: it continues its own series only\n"
                 "---> the same command as before, or --resume %s to change precision on purpose",
                 path, t->latest_precision, precision, path);
        return -1;
    }
    if (t->latest_span && t->latest_span != (uint64_t)schedule_span) {
        kl_error("--resume latest: %s is of a run whose lr schedule spans %llu steps, this one %lld "
                 "(--epochs, --steps, --batch or --schedule-steps differ): it continues its own series only\n"
                 "---> the same command as before, or --resume %s to change the run on purpose",
                 path, (unsigned long long)t->latest_span, (long long)schedule_span, path);
        return -1;
    }
    return 0;
}
