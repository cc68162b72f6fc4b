/* kiln ckpt (print a checkpoint's contents) and kiln export (its model
 * values as safetensors). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/safetensors.h"

static const char ckpt_usage[] =
    "usage: kiln ckpt CKPT\n"
    "\n"
    "Checks a checkpoint (its checksum and every field) and prints its\n"
    "contents: the format version, the model, the precision, the step (the\n"
    "data position: a resumed run replays the run's shuffle to that step),\n"
    "the lr schedule's span (version 4), the loss scaler, the optimizer's\n"
    "state per param, and every value with its role, dtype, shape and\n"
    "bytes, then totals by role.\n"
    "Exits 1 with an error naming the file when it is not a whole checkpoint\n"
    "or holds what --resume refuses (after the listing): a value that is\n"
    "not finite, a negative Adam second moment, a loss scale that is not a\n"
    "normal fp32 number; the error names the value and its first bad element.\n";

static const char export_usage[] =
    "usage: kiln export CKPT -o FILE.safetensors [--dtype f32|bf16|f16]\n"
    "\n"
    "Writes the model's values of a checkpoint (its params and the state\n"
    "its forward pass reads, such as batch-norm running statistics; not\n"
    "the optimizer's state) as a safetensors file, under their model-file\n"
    "names, in fp32 or, with --dtype, converted (round to nearest even).\n"
    "Metadata: kiln.model, kiln.step, kiln.version, kiln.precision,\n"
    "kiln.format (\"1\": this layout of model values under model-file\n"
    "names). Needs a version 3 checkpoint (which records each value's\n"
    "role); resume an older one and save it again.\n";

/* Totals by role, in the order first seen. */
typedef struct role_total {
    const char *role;
    int count;
    int64_t values, bytes;
} role_total;

/* The optimizer's state per param: the suffixes of the optimizer_state
 * values after their param's name ("adam_m, adam_v"). */
static void print_optimizer(const kl_ckpt *c)
{
    if (c->version < 3)
        return;
    const char **seen = kl_xcalloc((size_t)c->n + 1, sizeof *seen);
    int nseen = 0;
    for (int i = 0; i < c->n; i++) {
        if (strcmp(c->v[i].role, "optimizer_state"))
            continue;
        const char *name = c->v[i].name, *suffix = NULL;
        for (int p = 0; p < c->n && !suffix; p++) {
            size_t n = strlen(c->v[p].name);
            if (!strcmp(c->v[p].role, "param") && !strncmp(name, c->v[p].name, n) && name[n] == '.')
                suffix = name + n + 1;
        }
        int k = 0;
        while (suffix && k < nseen && strcmp(seen[k], suffix))
            k++;
        if (suffix && k == nseen)
            seen[nseen++] = suffix;
    }
    kl_fprintf_escaped(stdout, "optimizer state per param:");
    for (int k = 0; k < nseen; k++)
        kl_fprintf_escaped(stdout, "%s %s", k ? "," : "", seen[k]);
    kl_fprintf_escaped(stdout, "%s\n", nseen ? "" : " none");
    free(seen);
}

static int cmd_ckpt(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(ckpt_usage, stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            kl_error("kiln ckpt: unknown option %s (see kiln ckpt --help)", argv[i]);
            return 1;
        } else if (path) {
            kl_error("kiln ckpt: more than one checkpoint");
            return 1;
        }
        path = argv[i];
    }
    if (!path) {
        kl_error("kiln ckpt: no checkpoint (see kiln ckpt --help)");
        return 1;
    }
    kl_ckpt c;
    if (kl_ckpt_read(&c, path))
        return 1;
    const kl_run_state *rs = &c.rs;
    kl_fprintf_escaped(stdout, "%s: kiln checkpoint, format version %u, %zu bytes, checksum ok\n", path, c.version,
                       c.file.len);
    if (c.version >= 3)
        kl_fprintf_escaped(stdout, "model: %s\nprecision: %s\nwritten by: kiln %s\n", c.model[0] ? c.model : "(none)",
                           c.precision[0] ? c.precision : "(none)", c.kiln_version);
    else
        kl_fprintf_escaped(stdout, "model, precision, roles: not recorded (version %u)\n", c.version);
    if (c.config[0]) {
        /* The settings as a config file reads them (comments included):
         * --config of a file with these lines reproduces the run. */
        kl_fprintf_escaped(stdout, "config:\n");
        for (const char *p = c.config; *p;) {
            size_t len = strcspn(p, "\n");
            kl_fprintf_escaped(stdout, "  %.*s\n", (int)len, p);
            p += len + (p[len] == '\n');
        }
    } else {
        kl_fprintf_escaped(stdout, "config: %s\n", c.version >= 5 ? "none (no --config)" : "not recorded (before version 5)");
    }
    kl_fprintf_escaped(stdout, "step: %llu (data position: the run's shuffled order, replayed to step %llu)\n",
                       (unsigned long long)rs->step, (unsigned long long)rs->step);
    if (c.version >= 4 && rs->schedule_steps)
        kl_fprintf_escaped(
            stdout, "lr schedule: spans %llu steps (a resumed run with another span changes the lr from here on)\n",
            (unsigned long long)rs->schedule_steps);
    else
        kl_fprintf_escaped(stdout, "lr schedule: span not recorded (version %u)\n", c.version);
    if (c.version >= 6)
        printf("evaluations: %lld at epochs' ends; the first metric's best %.4f (epoch %lld); the watched metric's "
               "best %.4f (epoch %lld, step %lld), %lld since without improvement\n",
               (long long)rs->evals, rs->best, (long long)rs->best_epoch, rs->watch_best, (long long)rs->watch_epoch,
               (long long)rs->watch_step, (long long)rs->watch_bad);
    else
        printf("evaluations: not recorded (before version 6)\n");
    if (c.version >= 2)
        kl_fprintf_escaped(
            stdout,
            "loss scaler: scale %g, %lld clean steps since its last change, %lld steps skipped (%lld in a row)\n",
            rs->loss_scale, (long long)rs->clean_steps, (long long)rs->skipped, (long long)rs->skipped_in_row);
    else
        kl_fprintf_escaped(stdout, "loss scaler: not recorded (version 1)\n");
    print_optimizer(&c);
    role_total *tot = kl_xcalloc((size_t)c.n + 1, sizeof *tot);
    int nt = 0;
    size_t w = 4;
    for (int i = 0; i < c.n; i++)
        if (strlen(c.v[i].name) > w)
            w = strlen(c.v[i].name);
    kl_fprintf_escaped(stdout, "values: %d\n  %-*s  %-15s  %-5s  %-18s  %s\n", c.n, (int)w, "name", "role", "dtype",
                       "shape", "bytes");
    for (int i = 0; i < c.n; i++) {
        const kl_ckpt_entry *e = &c.v[i];
        const char *role = e->role[0] ? e->role : "-";
        kl_buf shape = {0};
        kl_buf_putc(&shape, '[');
        for (int d = 0; d < e->type.rank; d++)
            kl_buf_printf(&shape, "%s%lld", d ? "," : "", (long long)e->type.dim[d]);
        kl_buf_putc(&shape, ']');
        kl_fprintf_escaped(stdout, "  %-*s  %-15s  %-5s  %-18s  %llu\n", (int)w, e->name, role,
                           ir_dtype_name(e->type.dtype), shape.s, (unsigned long long)e->bytes);
        kl_buf_free(&shape);
        int k = 0;
        while (k < nt && strcmp(tot[k].role, role))
            k++;
        if (k == nt)
            tot[nt++].role = role;
        tot[k].count++;
        tot[k].values += ir_type_numel(&e->type);
        tot[k].bytes += (int64_t)e->bytes;
    }
    kl_fprintf_escaped(stdout, "by role:\n");
    for (int k = 0; k < nt; k++)
        kl_fprintf_escaped(stdout, "  %-15s  %3d values  %10lld elements  %10lld bytes\n", tot[k].role, tot[k].count,
                           (long long)tot[k].values, (long long)tot[k].bytes);
    free(tot);
    /* After the listing (it helps to see what a bad file holds), the
     * checks --resume makes: the same file is refused by both. */
    int rc = kl_ckpt_validate(&c, NULL) ? 1 : 0;
    kl_ckpt_free(&c);
    return rc;
}

static int cmd_export(int argc, char **argv)
{
    const char *path = NULL, *out = NULL, *dtype = "f32";
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(export_usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            dtype = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            kl_error("kiln export: unknown option or missing value: %s (see kiln export --help)", argv[i]);
            return 1;
        } else if (path) {
            kl_error("kiln export: more than one checkpoint");
            return 1;
        } else {
            path = argv[i];
        }
    }
    if (!path || !out) {
        kl_error("kiln export: needs CKPT and -o FILE.safetensors (see kiln export --help)");
        return 1;
    }
    int dt = ir_dtype_from_name(dtype);
    if (dt != IR_F32 && dt != IR_BF16 && dt != IR_F16) {
        kl_error("kiln export: --dtype must be f32, bf16 or f16, got '%s'", dtype);
        return 1;
    }
    kl_ckpt c;
    if (kl_ckpt_read(&c, path))
        return 1;
    int rc = 1;
    if (c.version < 3) {
        kl_error("%s: a version %u checkpoint does not record which values are params; resume it with --steps at "
                 "its step and --save a new one, then export that", path, c.version);
        goto done;
    }
    rc = kl_ckpt_validate(&c, NULL) || kl_ckpt_export(&c, out, (ir_dtype)dt) ? 1 : 0;
done:
    kl_ckpt_free(&c);
    return rc;
}

int kl_ckpt_tool_main(const char *cmd, int argc, char **argv)
{
    return !strcmp(cmd, "ckpt") ? cmd_ckpt(argc, argv) : cmd_export(argc, argv);
}
