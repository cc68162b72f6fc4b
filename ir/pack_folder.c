/* --data DIR on a folder that kiln pack wrote: its manifest.json names
 * the shards of each split (or the token files), so the folder becomes
 * the data call that reads them instead of being taken for IDX files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train_config.h"

/* The string value of "key": "..." after at and before end (kiln pack
 * writes its manifest with names and patterns that need no escapes). */
static char *json_str_after(const char *at, const char *end, const char *key)
{
    char *k = kl_xasprintf("\"%s\": \"", key);
    const char *p = strstr(at, k);
    size_t kl = strlen(k);
    free(k);
    if (!p || (end && p > end))
        return NULL;
    p += kl;
    const char *q = strchr(p, '"');
    return q && (!end || q < end) ? kl_xstrndup(p, (size_t)(q - p)) : NULL;
}

/* The "splits" object's entry for split, from its opening brace to its
 * closing one (the entries hold no nested objects before their end). */
static const char *split_entry(const char *text, const char *split, const char **end)
{
    const char *splits = strstr(text, "\"splits\": {");
    if (!splits)
        return NULL;
    char *k = kl_xasprintf("\"%s\": {", split);
    const char *p = strstr(splits, k);
    free(k);
    if (!p)
        return NULL;
    *end = strchr(p, '}');
    return *end ? p : NULL;
}

static char *split_file(const char *dir, const char *text, const char *split, const char *key)
{
    const char *end = NULL, *e = split_entry(text, split, &end);
    char *name = e ? json_str_after(e, end, key) : NULL;
    /* "pk/" and "pk" give "pk/train-000000.tar". */
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    char *path = name ? kl_xasprintf("%.*s%s%s", (int)n, dir, n && dir[n - 1] == '/' ? "" : "/", name) : NULL;
    free(name);
    return path;
}

int kl_pack_folder_data(const char *dir, const char *flag, ir_attr_val *call)
{
    char *mpath = kl_xasprintf("%s/manifest.json", dir);
    struct stat st;
    if (stat(mpath, &st) && (errno == ENOENT || errno == ENOTDIR)) {
        free(mpath);
        return 1;
    }
    kl_source m;
    if (kl_source_read(&m, mpath)) {
        free(mpath);
        return -1;
    }
    int rc = -1;
    const char *t = m.text;
    if (!strstr(t, "\"format\": \"kiln-pack 1\"")) {
        kl_error("%s %s: %s is not a kiln pack manifest (no \"format\": \"kiln-pack 1\")", flag, dir, mpath);
        goto done;
    }
    bool tokens = strstr(t, "\"layout\": \"tokens\"") != NULL;
    char *train = split_file(dir, t, "train", tokens ? "file" : "shards");
    char *test = tokens ? split_file(dir, t, "val", "file") : split_file(dir, t, "test", "shards");
    if (!test && !tokens)
        test = split_file(dir, t, "val", "shards");
    if (!train) {
        kl_error("%s %s: %s names no train split", flag, dir, mpath);
    } else if (tokens) {
        /* A token file's windows need the model's context, which a
         * folder cannot say. */
        kl_error("%s %s: a kiln pack folder of token files; tokens(...) needs the model's context\n"
                 "---> --set 'data=tokens(\"%s\"%s%s%s, context = N)'",
                 flag, dir, train, test ? ", val = \"" : "", test ? test : "", test ? "\"" : "");
    } else {
        *call = (ir_attr_val){.kind = IR_ATTR_CALL, .s = kl_xstrdup("shards")};
        call->args = kl_xcalloc(1, sizeof *call->args);
        ir_attrs_set(call->args, "path", ir_attr_val_str(train));
        if (test)
            ir_attrs_set(call->args, "test", ir_attr_val_str(test));
        rc = 0;
    }
    free(train);
    free(test);
done:
    kl_source_free(&m);
    free(mpath);
    return rc;
}
