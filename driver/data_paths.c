/* Where a train block's data is, for the training executable and for
 * kiln build (which sizes the evaluation kernels it precompiles by the
 * test split). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"
#include "base/support.h"
#include "runtime/data/data.h"

char *kl_train_data_path(const char *model, const char *path, const char *const *kv, int nkv)
{
    bool from_flag = false;
    for (int i = 0; i + 1 < nkv; i += 2)
        from_flag |= !strcmp(kv[i], "data");
    const char *slash = strrchr(model, '/');
    if (from_flag || path[0] == '/' || !slash)
        return kl_xstrdup(path);
    return kl_xasprintf("%.*s/%s", (int)(slash - model), model, path);
}

int64_t kl_train_test_count(const char *model, const kl_train_config *c, const char *const *kv, int nkv)
{
    if (!strcmp(c->data_format, "synthetic"))
        return c->synthetic_samples / 6 + 1;
    bool idx = !strcmp(c->data_format, "idx");
    if (!idx && !(!strcmp(c->data_format, "shards") && c->data_test))
        return -1;
    char *path = kl_train_data_path(model, idx ? c->data_path : c->data_test, kv, nkv);
    kl_dataset d;
    /* Quietly: a data set that is not there yet is the run's to report. */
    FILE *null = fopen("/dev/null", "w");
    kl_diag_set_stream(null);
    kl_shards_opts o = {.pattern = path, .workers = 1, .prefetch = 1};
    int rc = idx ? kl_idx_load(path, "t10k", &d) : kl_shards_load(&o, &d);
    kl_diag_set_stream(NULL);
    if (null)
        fclose(null);
    free(path);
    if (rc)
        return -1;
    int64_t n = d.count;
    kl_dataset_free(&d);
    return n;
}
