/* --config FILE: a run's flags as a file, one `key = value` a line (the
 * train block's own syntax, optionally inside `train { ... }`, or the
 * TOML subset of the same lines; `#` starts a comment, a "quoted" value
 * is its text). A key is a train setting (batch, optimizer, data, ...;
 * as --set KEY=VALUE) or a flag's name without its dashes (save,
 * save_every, metrics, progress; `quiet = true` for a flag without a
 * value). Each line is checked alone, so that an unknown key or a bad
 * value is refused naming the file and the line; the flags on the
 * command line then win over the file's. The settings, as read, go into
 * the checkpoints and the metrics file, so that a run reproduces from
 * either. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "trainer.h"

/* Runs parse(o, args) with the diagnostics caught: 0, or -1 with what it
 * said in *msg (caller frees; "kiln: error: " left out). */
static int caught(int (*parse)(train_options *, int, char **, const char *), train_options *o, int n, char **args,
                  const char *model, char **msg)
{
    FILE *saved = kl_diag_stream();
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    kl_diag_set_stream(m ? m : saved);
    int rc = parse(o, n, args, model);
    kl_diag_set_stream(saved);
    if (m)
        fclose(m);
    /* The message alone: after "kiln: error: " or "NAME:1:1: error: ". */
    const char *s = buf ? buf : "";
    const char *e = strstr(s, "error: ");
    if (e && e < s + strcspn(s, "\n"))
        s = e + 7;
    *msg = kl_xstrndup(s, strcspn(s, "\n"));
    free(buf);
    return rc;
}

static int parse_flags(train_options *o, int n, char **args, const char *model)
{
    return train_parse_flags(n, args, o, model);
}

static int check_set(train_options *o, int n, char **args, const char *model)
{
    (void)o, (void)n, (void)model;
    return kl_train_check_set(args[0], args[1]);
}

static void scratch_free(train_options *s)
{
    for (int i = 0; i < s->nowned; i++)
        free(s->owned[i]);
}

/* A string the options keep until the run ends. */
static char *own_config(train_options *o, char *s)
{
    kl_vec_push(o->config_owned, s);
    return s;
}

/* One line's flags into args (2 at most, owned by o); -1 after an error
 * (reported at the line). */
static int line_flags(const kl_source *src, kl_loc loc, const char *key, const char *val, train_options *o,
                      const char *model, char **args, int *nargs)
{
    char *msg = NULL;
    *nargs = 0;
    bool is_bool = !strcmp(val, "true") || !strcmp(val, "false");
    char *flag = kl_xasprintf("--%s", key);
    for (char *c = flag + 2; *c; c++)
        if (*c == '_')
            *c = '-';
    /* A train setting, checked as --set checks it (--batch auto and
     * --threads are flags of their own). */
    const char *kv[2] = {key, val};
    int rc = caught(check_set, o, 2, (char **)kv, model, &msg);
    bool setting = rc == 0 || !strstr(msg, "is not a train setting");
    if (setting && rc == 0 && !(!strcmp(key, "batch") && !strcmp(val, "auto")) && strcmp(key, "threads")) {
        args[(*nargs)++] = own_config(o, kl_xasprintf("--set"));
        args[(*nargs)++] = own_config(o, kl_xasprintf("%s=%s", key, val));
    } else if (setting && rc != 0) {
        kl_error_at(src, loc, "%s", msg);
    } else {
        /* A flag: FLAG VALUE, or FLAG alone for `= true`. */
        free(msg);
        train_options scratch = {.partial = true};
        char *try[3] = {"kiln", flag, (char *)val};
        rc = caught(parse_flags, &scratch, 3, try, model, &msg);
        scratch_free(&scratch);
        if (rc && is_bool) {
            char *m2 = NULL;
            train_options s2 = {.partial = true};
            rc = caught(parse_flags, &s2, 2, try, model, &m2);
            scratch_free(&s2);
            if (!rc) {
                free(msg);
                msg = m2;
                if (!strcmp(val, "true"))
                    args[(*nargs)++] = own_config(o, kl_xstrdup(flag));
            } else {
                free(m2);
            }
        } else if (!rc) {
            args[(*nargs)++] = own_config(o, kl_xstrdup(flag));
            args[(*nargs)++] = own_config(o, kl_xstrdup(val));
        }
        if (rc && !strncmp(msg, "unknown option", 14))
            kl_error_at(src, loc, "unknown key '%s': not a train setting nor a flag's name (see --help: --save-every is "
                                  "save_every)", key);
        else if (rc)
            kl_error_at(src, loc, "%s", msg);
    }
    free(msg);
    free(flag);
    return rc ? -1 : 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

/* The line without its comment (a # outside quotes). */
static void cut_comment(char *s)
{
    bool quoted = false;
    for (; *s; s++) {
        if (*s == '"')
            quoted = !quoted;
        else if (*s == '#' && !quoted) {
            *s = 0;
            return;
        }
    }
}

static int config_load(const char *path, train_options *o, const char *model, char ***args_out, int *nargs_out)
{
    kl_source src;
    if (kl_source_read(&src, path))
        return -1;
    const char *nul = memchr(src.text, 0, src.len);
    if (nul) {
        int at = 1;
        for (const char *q = src.text; q < nul; q++)
            at += *q == '\n';
        kl_error("%s:%d: a NUL byte: a config file is text, one key = value a line", path, at);
        kl_source_free(&src);
        return -1;
    }
    KL_VEC(char *) args = {0};
    /* What checkpoints record: a config file itself, naming its source. */
    kl_buf record = {0};
    kl_buf_printf(&record, "# --config %s\n", path);
    int rc = 0, line = 0;
    bool in_block = false, block_done = false;
    for (char *p = src.text; *p && !rc;) {
        char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char *text = kl_xstrndup(p, len);
        p += len + (nl ? 1 : 0);
        line++;
        cut_comment(text);
        char *s = trim(text);
        kl_loc loc = {line, (int)(s - text) + 1};
        if (!*s) {
            free(text);
            continue;
        }
        if (!strcmp(s, "train {") && !in_block && !block_done && !args.n) {
            in_block = true;
        } else if (!strcmp(s, "}") && in_block) {
            in_block = false;
            block_done = true;
        } else if (block_done) {
            kl_error_at(&src, loc, "a line after the train block's closing brace");
            rc = -1;
        } else {
            char *eq = strchr(s, '=');
            char *key_raw = eq ? kl_xstrndup(s, (size_t)(eq - s)) : NULL;
            char *key = key_raw ? trim(key_raw) : NULL;
            bool ok = key && *key && strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(key);
            char *val = eq ? trim(eq + 1) : NULL;
            size_t vl = val ? strlen(val) : 0;
            if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"' && !memchr(val + 1, '"', vl - 2)) {
                val[vl - 1] = 0;
                val++;
            }
            if (!ok || !val || !*val) {
                kl_error_at(&src, loc, "expected KEY = VALUE (a train setting or a flag's name, e.g. batch = 64, "
                                       "save_every = 100)");
                rc = -1;
            } else if (!strcmp(key, "config") || !strcmp(key, "help")) {
                kl_error_at(&src, loc, "'%s' cannot be set in a config file", key);
                rc = -1;
            } else {
                char *la[2];
                int n;
                rc = line_flags(&src, loc, key, val, o, model, la, &n);
                for (int i = 0; i < n; i++)
                    kl_vec_push(args, la[i]);
                if (!rc)
                    kl_buf_printf(&record, "%s = %s\n", key, val);
            }
            free(key_raw);
        }
        free(text);
    }
    if (!rc && in_block) {
        kl_error_at(&src, (kl_loc){line, 1}, "the train block has no closing brace");
        rc = -1;
    }
    kl_source_free(&src);
    if (!rc && record.len > 65536) {
        kl_error("%s: the settings take %zu bytes; checkpoints hold 65536 at most", path, record.len);
        rc = -1;
    }
    if (rc) {
        free(args.v);
        free(record.s);
        return -1;
    }
    o->config = path;
    o->config_text = own_config(o, kl_buf_take(&record));
    *args_out = args.v;
    *nargs_out = args.n;
    return 0;
}

/* The command line's flags (which win over the file's) as lines of the
 * recorded settings, after the file's: a flag that parses alone is one
 * without a value (`quiet = true`). */
static void record_command_line(train_options *o, int argc, char **argv, int at, const char *model)
{
    kl_buf b = {0};
    kl_buf_puts(&b, o->config_text);
    bool head = false;
    for (int i = 1; i < argc; i++) {
        if (i == at || i == at + 1 || strncmp(argv[i], "--", 2))
            continue;
        if (!head)
            kl_buf_puts(&b, "# on the command line\n");
        head = true;
        char *key = kl_xstrdup(argv[i] + 2);
        for (char *c = key; *c; c++)
            if (*c == '-')
                *c = '_';
        const char *eq = i + 1 < argc ? strchr(argv[i + 1], '=') : NULL;
        if (!strcmp(key, "set") && eq) {
            kl_buf_printf(&b, "%.*s = %s\n", (int)(eq - argv[i + 1]), argv[i + 1], eq + 1);
            i++;
        } else {
            char *msg = NULL, *alone[2] = {argv[0], argv[i]};
            train_options scratch = {.partial = true};
            int rc = caught(parse_flags, &scratch, 2, alone, model, &msg);
            scratch_free(&scratch);
            free(msg);
            if (!rc || i + 1 >= argc)
                kl_buf_printf(&b, "%s = true\n", key);
            else
                kl_buf_printf(&b, "%s = %s\n", key, argv[++i]);
        }
        free(key);
    }
    o->config_text = own_config(o, kl_buf_take(&b));
}

int train_config_expand(int *argc, char ***argv, train_options *o, const char *model)
{
    int at = -1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp((*argv)[i], "--config"))
            continue;
        if (i + 1 >= *argc) {
            kl_error("--config needs a file");
            return -1;
        }
        if (at >= 0) {
            kl_error("--config is given twice ('%s' and '%s')", (*argv)[at + 1], (*argv)[i + 1]);
            return -1;
        }
        at = i++;
    }
    if (at < 0)
        return 0;
    char **file_args;
    int n;
    if (config_load((*argv)[at + 1], o, model, &file_args, &n))
        return -1;
    /* The program, the file's flags, then the command line's (which win). */
    char **all = kl_xmalloc(sizeof *all * (size_t)(*argc + n + 1));
    int k = 0;
    all[k++] = (*argv)[0];
    for (int i = 0; i < n; i++)
        all[k++] = file_args[i];
    for (int i = 1; i < *argc; i++)
        if (i != at && i != at + 1)
            all[k++] = (*argv)[i];
    all[k] = NULL;
    free(file_args);
    own_config(o, (char *)all);
    record_command_line(o, *argc, *argv, at, model);
    *argc = k;
    *argv = all;
    return 0;
}

char *train_config_json(const train_options *o)
{
    kl_buf b = {0};
    kl_buf_puts(&b, "{\"type\": \"config\", \"file\": ");
    kl_buf_put_json_str(&b, o->config);
    /* text: the settings as a config file (the file's lines, then the
     * command line's); settings: each key's value in effect (the last). */
    kl_buf_puts(&b, ", \"text\": ");
    kl_buf_put_json_str(&b, o->config_text);
    kl_buf_puts(&b, ", \"settings\": {");
    KL_VEC(char *) keys = {0}, vals = {0};
    for (const char *p = o->config_text; *p;) {
        size_t len = strcspn(p, "\n");
        char *line = kl_xstrndup(p, len);
        char *eq = strstr(line, " = ");
        if (eq && line[0] != '#') {
            *eq = 0;
            kl_vec_push(keys, line);
            kl_vec_push(vals, eq + 3);
        } else {
            free(line);
        }
        p += len + (p[len] == '\n');
    }
    int n = 0;
    for (int i = 0; i < keys.n; i++) {
        bool later = false;
        for (int j = i + 1; j < keys.n && !later; j++)
            later = !strcmp(keys.v[i], keys.v[j]);
        if (later)
            continue;
        kl_buf_puts(&b, n++ ? ", " : "");
        kl_buf_put_json_str(&b, keys.v[i]);
        kl_buf_puts(&b, ": ");
        kl_buf_put_json_str(&b, vals.v[i]);
    }
    for (int i = 0; i < keys.n; i++)
        free(keys.v[i]);
    kl_vec_free(keys);
    kl_vec_free(vals);
    kl_buf_puts(&b, "}}");
    return kl_buf_take(&b);
}
