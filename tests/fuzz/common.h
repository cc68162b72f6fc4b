/* What both fuzz targets share: diagnostics go to a null stream (a fuzzer
 * feeds mostly bad input, and every error message would be printed), and
 * a broken round trip aborts with both texts so the crash file explains
 * itself. */
#ifndef KILN_FUZZ_COMMON_H
#define KILN_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static void fuzz_quiet(void)
{
    static FILE *null;
    if (!null && !(null = fopen("/dev/null", "w")))
        kl_panic("cannot open /dev/null");
    kl_diag_set_stream(null);
}

/* A source over a copy of the fuzzer's bytes: NUL-terminated, and len
 * counts every byte, so a NUL inside the input is seen as in a file. */
static void fuzz_source(kl_source *src, const char *name, const uint8_t *data, size_t size)
{
    src->name = kl_xstrdup(name);
    src->text = kl_xmalloc(size + 1);
    memcpy(src->text, data, size);
    src->text[size] = 0;
    src->len = size;
}

/* print(parse(text)) must give text back; text is ir_print's output. */
static void fuzz_check_reprint(const char *text, const char *what)
{
    kl_source src;
    kl_source_from_string(&src, "reprint.kir", text);
    kl_diag_set_stream(stderr);
    ir_graph *g = ir_parse(&src);
    if (!g) {
        fprintf(stderr, "---- printed graph ----\n%s", text);
        kl_panic("%s: the printed graph does not parse back", what);
    }
    if (ir_verify(g)) {
        fprintf(stderr, "---- printed graph ----\n%s", text);
        kl_panic("%s: the printed graph parses back but fails the verifier", what);
    }
    char *again = ir_print(g);
    if (strcmp(text, again)) {
        fprintf(stderr, "---- printed ----\n%s---- parsed and printed again ----\n%s", text, again);
        kl_panic("%s: print(parse(print(g))) != print(g)", what);
    }
    fuzz_quiet();
    free(again);
    ir_graph_free(g);
    kl_source_free(&src);
}

#endif
