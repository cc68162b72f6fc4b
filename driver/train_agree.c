/* The ranks' agreement on their settings before the first step.
 *
 * Every rank parses its own command line, so ranks started with other
 * flags would train apart (another --lr or --seed: silently wrong
 * results) or call other collectives (another --shard or
 * --tensor-parallel: a deadlock). Each rank hashes each setting that must
 * match (every train key but the per-rank ones below, the run's own
 * flags that change the loop, and later the training plan and the
 * training set's size); the ranks all-gather the fixed array of 64-bit
 * hashes, and when one differs they all-gather that setting's text, so
 * that the error names the setting, the ranks and both values.
 *
 * Per-rank settings that may differ: threads, memory_limit (a machine's
 * own), tensorboard (rank 0 alone writes), comm_timeout, and the data's
 * paths (path, test, val: a copy of the data on each machine; the
 * training set's size is agreed instead). Files written by rank 0 alone
 * (--save, --metrics, --export, ...) are not settings of the others. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer.h"

/* Keys whose value is a rank's own. */
static bool own_key(const char *key)
{
    static const char *const own[] = {"threads", "memory_limit", "tensorboard", "comm_timeout"};
    for (size_t i = 0; i < KL_ARRAY_LEN(own); i++)
        if (!strcmp(key, own[i]))
            return true;
    return false;
}

/* The data call without its paths. */
static void print_data(kl_buf *b, const ir_attr_val *v)
{
    if (v->kind != IR_ATTR_CALL || !v->args) {
        ir_attr_val_print(b, v);
        return;
    }
    kl_buf_printf(b, "%s(", v->s);
    int n = 0;
    for (int i = 0; i < v->args->n; i++) {
        const ir_attr *a = &v->args->v[i];
        if (!strcmp(a->key, "path") || !strcmp(a->key, "test") || !strcmp(a->key, "val"))
            continue;
        kl_buf_printf(b, "%s%s = ", n++ ? ", " : "", a->key);
        ir_attr_val_print(b, &a->val);
    }
    kl_buf_puts(b, ")");
}

#define AGREE_MAX 64
#define AGREE_TEXT 160

typedef struct agree_list {
    const char *name[AGREE_MAX];
    char *text[AGREE_MAX];
    int n;
} agree_list;

static void add(agree_list *l, const char *name, char *text)
{
    kl_check(l->n < AGREE_MAX);
    l->name[l->n] = name;
    l->text[l->n++] = text;
}

static void list_settings(agree_list *l, const trainer *t, const ir_attrs *train, const char *plan)
{
    for (int i = 0; i < kl_train_key_count(); i++) {
        const char *key = kl_train_key_name(i);
        if (own_key(key))
            continue;
        ir_attr *a = ir_attrs_find(train, key);
        kl_buf b = {0};
        if (!a)
            kl_buf_puts(&b, "(the default)");
        else if (!strcmp(key, "data"))
            print_data(&b, &a->val);
        else
            ir_attr_val_print(&b, &a->val);
        add(l, key, kl_buf_take(&b));
    }
    const train_options *o = &t->opt;
    add(l, "--save-every", kl_xasprintf("%lld", (long long)o->save_every));
    /* --resume latest: which file each rank found (its host's --save
     * folder), so that hosts with other series are named. */
    if (o->resume_latest)
        add(l, "--resume", t->latest_path ? kl_xasprintf("latest: %s", t->latest_path)
                                          : kl_xstrdup("latest: no checkpoint of --save's series found"));
    else
        add(l, "--resume", kl_xstrdup(o->resume ? "given" : "not given"));
    add(l, "--init", kl_xstrdup(o->init ? (o->init_partial ? "given (partial)" : "given") : "not given"));
    if (plan) {
        add(l, "the training plan", kl_xasprintf("hash %016llx", (unsigned long long)kl_hash_bytes(KL_HASH_INIT, plan, strlen(plan))));
        add(l, "the training set's size", kl_xasprintf("%lld samples", (long long)t->train_set.count));
    }
}

/* The first argument in which two calls' texts differ ("lr = 0.01" of
 * "adamw(lr = 0.01, beta1 = 0.9)"), into a and b; false when the texts
 * are not two calls of the same name. */
static bool differing_arg(const char *x, const char *y, char *a, char *b, size_t n)
{
    const char *px = strchr(x, '('), *py = strchr(y, '(');
    if (!px || !py || px - x != py - y || strncmp(x, y, (size_t)(px - x)))
        return false;
    for (px++, py++;;) {
        size_t lx = strcspn(px, ",)"), ly = strcspn(py, ",)");
        if (lx != ly || strncmp(px, py, lx)) {
            snprintf(a, n, "%.*s", (int)lx, px);
            snprintf(b, n, "%.*s", (int)ly, py);
            return true;
        }
        if (!px[lx] || !py[ly] || px[lx] == ')' || py[ly] == ')')
            return false;
        px += lx + 1 + (px[lx + 1] == ' ');
        py += ly + 1 + (py[ly + 1] == ' ');
    }
}

/* After rank 0 has reported why the ranks stop: every rank waits for it
 * here, so that no rank ends the job (its MPI_Abort at exit) while rank
 * 0's report is still unwritten (the report would be lost with rank 0). */
static void reported(kl_comm *comm)
{
    unsigned char me = 1, *all = kl_xmalloc((size_t)kl_comm_world(comm));
    kl_comm_gather_startup(comm, &me, 1, all, "the end of rank 0's report");
    free(all);
}

int train_agree_settings(trainer *t, kl_comm *comm, const ir_attrs *train, const char *plan)
{
    int world = kl_comm_world(comm), rank = kl_comm_rank(comm);
    if (world < 2)
        return 0;
    agree_list l = {0};
    list_settings(&l, t, train, plan);
    uint64_t mine[AGREE_MAX + 1];
    mine[0] = (uint64_t)l.n;
    for (int i = 0; i < l.n; i++)
        mine[i + 1] = kl_hash_bytes(KL_HASH_INIT, l.text[i], strlen(l.text[i]));
    for (int i = l.n; i < AGREE_MAX; i++)
        mine[i + 1] = 0;
    uint64_t *all = kl_xmalloc((size_t)world * sizeof mine);
    kl_comm_gather_startup(comm, mine, sizeof mine, all, "the ranks' settings");
    int bad = -1, first = -1;
    for (int i = 0; i <= AGREE_MAX && bad < 0; i++)
        for (int r = 1; r < world; r++)
            if (all[(size_t)r * (AGREE_MAX + 1) + (size_t)i] != all[i]) {
                bad = i;
                first = r;
                break;
            }
    int rc = 0;
    if (bad == 0) {
        if (rank == 0)
            kl_error("rank %d has %llu settings to agree, rank 0 has %llu: the ranks run different builds of Kiln\n"
                     "---> start every rank with the same executable",
                     first, (unsigned long long)all[(size_t)first * (AGREE_MAX + 1)], (unsigned long long)all[0]);
        rc = -1;
    } else if (bad > 0) {
        /* The setting's text on every rank, for the error. */
        int i = bad - 1;
        char text[AGREE_TEXT] = {0};
        snprintf(text, sizeof text, "%s", l.text[i]);
        char *texts = kl_xmalloc((size_t)world * AGREE_TEXT);
        kl_comm_gather_startup(comm, text, sizeof text, texts, "the differing setting");
        if (rank == 0) {
            kl_buf others = {0};
            int n = 0;
            for (int r = 1; r < world; r++)
                if (all[(size_t)r * (AGREE_MAX + 1) + (size_t)bad] != all[bad])
                    kl_buf_printf(&others, "%s%d", n++ ? ", " : "", r);
            kl_buf also = {0};
            for (int j = bad + 1; j <= l.n; j++)
                for (int r = 1; r < world; r++)
                    if (all[(size_t)r * (AGREE_MAX + 1) + (size_t)j] != all[j]) {
                        kl_buf_printf(&also, "%s%s", also.s ? ", " : "", l.name[j - 1]);
                        break;
                    }
            const char *theirs = texts + (size_t)first * AGREE_TEXT;
            char a[AGREE_TEXT], b[AGREE_TEXT], what[AGREE_TEXT * 2 + 64];
            if (differing_arg(theirs, texts, a, b, sizeof a))
                snprintf(what, sizeof what, "rank %d has %s's %s, rank 0 has %s (%s = %s on rank 0)", first, l.name[i], a,
                         b, l.name[i], texts);
            else
                snprintf(what, sizeof what, "rank %d has %s = %s, rank 0 has %s = %s", first, l.name[i], theirs,
                         l.name[i], texts);
            kl_error("the ranks' settings differ: %s (rank%s %s differ%s from rank 0 in %s%s%s)\n"
                     "---> start every rank with the same model, flags and data",
                     what, n == 1 ? "" : "s", others.s, n == 1 ? "s" : "", l.name[i], also.s ? "; also in: " : "",
                     also.s ? also.s : "");
            kl_buf_free(&others);
            kl_buf_free(&also);
        }
        free(texts);
        rc = -1;
    }
    if (rc)
        reported(comm);
    free(all);
    for (int i = 0; i < l.n; i++)
        free(l.text[i]);
    return rc;
}

/* What a rank resumed from, for train_agree_resume. */
typedef struct resumed {
    uint64_t ok, step, checksum;
    char host[64];
} resumed;

int train_agree_resume(trainer *t, int loaded, uint64_t step, uint64_t checksum)
{
    kl_comm *comm = kl_comm_whole(t->comm);
    int world = kl_comm_world(comm), rank = kl_comm_rank(comm);
    if (world < 2)
        return loaded ? -1 : 0;
    resumed mine = {.ok = loaded == 0, .step = loaded ? 0 : step, .checksum = loaded ? 0 : checksum};
    if (gethostname(mine.host, sizeof mine.host - 1))
        snprintf(mine.host, sizeof mine.host, "(unknown)");
    mine.host[sizeof mine.host - 1] = 0;
    resumed *all = kl_xmalloc((size_t)world * sizeof *all);
    kl_comm_gather_startup(comm, &mine, sizeof mine, all, "the checkpoints the ranks resumed from");
    int rc = loaded ? -1 : 0, missing = -1, other = -1, nmissing = 0, nother = 0;
    for (int r = 1; r < world; r++) {
        if (!all[r].ok) {
            missing = missing < 0 ? r : missing;
            nmissing++;
        } else if (all[0].ok && (all[r].step != all[0].step || all[r].checksum != all[0].checksum)) {
            other = other < 0 ? r : other;
            nother++;
        }
    }
    if (missing >= 0 || other >= 0 || !all[0].ok)
        rc = -1;
    const char *path = t->opt.resume;
    char more[64] = "";
    if (nmissing > 1)
        snprintf(more, sizeof more, ", nor could %d other ranks", nmissing - 1);
    if (rank == 0 && missing >= 0)
        kl_error("rank %d (on host %s) could not read its --resume %s (its error above)%s\n"
                 "---> every host needs the checkpoint at the same path: a shared folder, or a copy on each",
                 missing, all[missing].host, path, more);
    more[0] = 0;
    if (nother > 1)
        snprintf(more, sizeof more, "; %d other ranks differ too", nother - 1);
    if (rank == 0 && other >= 0)
        kl_error("the ranks resumed from different checkpoints at %s: rank %d (on host %s) read step %llu "
                 "(checksum %016llx), rank 0 (on host %s) step %llu (checksum %016llx)%s\n"
                 "---> give every host the same copy of the file (a shared folder, or copy it again after it is written)",
                 path, other, all[other].host, (unsigned long long)all[other].step, (unsigned long long)all[other].checksum,
                 all[0].host, (unsigned long long)all[0].step, (unsigned long long)all[0].checksum, more);
    if (rc && (missing >= 0 || other >= 0))
        reported(comm);
    free(all);
    return rc;
}
