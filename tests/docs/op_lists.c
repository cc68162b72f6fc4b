/* The lists of ops outside the op table name every op of it:
 *
 *   docs/language.md       the language's op table (rows "| `op` | ..."
 *                          between <!-- ops --> and <!-- /ops -->) names
 *                          every user op (IR_F_USER) and nothing else
 *   tests/fuzz/model.dict  a token "name" for every user op
 *   tests/fuzz/ir.dict     a token "name" for every op (the IR text form
 *                          spells any op)
 *
 * Usage: op_lists docs/language.md model.dict ir.dict. Prints one line per
 * missing or unknown name, "kiln: FILE: ...", and exits 1 when there is
 * any. The op names come from ir_ops[], not from parsing ops.def. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static int problems;

static void problem(const char *file, const char *what, const char *name)
{
    fprintf(stderr, "kiln: %s: %s '%s'\n", file, what, name);
    problems++;
}

/* True when the dictionary has a line that is exactly "name" (quoted). */
static bool dict_has(const kl_source *dict, const char *name)
{
    char want[96];
    snprintf(want, sizeof want, "\"%s\"", name);
    size_t len = strlen(want);
    for (const char *line = dict->text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (!strncmp(line, want, len) && (line[len] == '\n' || line[len] == '\r' || line[len] == 0))
            return true;
    return false;
}

/* The language reference's op table: between the lines "<!-- ops -->"
 * and "<!-- /ops -->", the first `...` span of every table row ("| `op`
 * | ..."), joined by spaces. Returns a copy, or NULL when there is no
 * table. */
static char *doc_op_list(const kl_source *doc)
{
    const char *open = strstr(doc->text, "<!-- ops -->");
    const char *close = open ? strstr(open, "<!-- /ops -->") : NULL;
    if (!close)
        return NULL;
    char *list = kl_xmalloc((size_t)(close - open) + 1);
    size_t n = 0;
    for (const char *line = strchr(open, '\n'); line && line < close; line = strchr(line + 1, '\n')) {
        if (strncmp(line, "\n| `", 4))
            continue;
        const char *name = line + 4, *end = strchr(name, '`');
        if (!end || end > close)
            break;
        if (n)
            list[n++] = ' ';
        memcpy(list + n, name, (size_t)(end - name));
        n += (size_t)(end - name);
    }
    list[n] = 0;
    return list;
}

static bool list_has(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += len) {
        bool starts = p == list || strchr(" \n", p[-1]);
        bool ends = p[len] == 0 || strchr(" \n", p[len]);
        if (starts && ends)
            return true;
    }
    return false;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: op_lists docs/language.md model.dict ir.dict\n");
        return 2;
    }
    kl_source doc, model_dict, ir_dict;
    if (kl_source_read(&doc, argv[1]) || kl_source_read(&model_dict, argv[2]) || kl_source_read(&ir_dict, argv[3]))
        return 2;
    char *list = doc_op_list(&doc);
    if (!list) {
        fprintf(stderr, "kiln: %s: no op table (rows \"| `op` | ...\" between <!-- ops --> and <!-- /ops -->)\n", argv[1]);
        return 1;
    }
    for (int op = 0; op < IR_NOPS; op++) {
        const char *name = ir_op_name((ir_op)op);
        if (!dict_has(&ir_dict, name))
            problem(argv[3], "has no token for the op", name);
        if (!(ir_ops[op].flags & IR_F_USER))
            continue;
        if (!dict_has(&model_dict, name))
            problem(argv[2], "has no token for the user op", name);
        if (!list_has(list, name))
            problem(argv[1], "the op list lacks the user op", name);
    }
    /* And the table names no op that a model file cannot call. */
    for (char *save = NULL, *w = strtok_r(list, " \n", &save); w; w = strtok_r(NULL, " \n", &save)) {
        int op = ir_op_from_name(w);
        if (op < 0 || !(ir_ops[op].flags & IR_F_USER))
            problem(argv[1], "the op list names something that is not a user op,", w);
    }
    free(list);
    kl_source_free(&doc);
    kl_source_free(&model_dict);
    kl_source_free(&ir_dict);
    if (problems)
        fprintf(stderr, "kiln: %d op list problem%s (the op table is ir/ops.def)\n", problems, problems == 1 ? "" : "s");
    return problems ? 1 : 0;
}
