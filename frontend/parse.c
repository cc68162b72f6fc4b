/* Runs the reentrant lexer and the pure parser over one source. */
#include <string.h>

#include "parse_state.h"
#include "parser.h"
#define YYSTYPE KL_YYSTYPE
#define YYLTYPE KL_YYLTYPE
#include "lexer.h"

int ast_parse(const kl_source *src, ast_program *out)
{
    memset(out, 0, sizeof *out);
    if (src->len > ((size_t)1 << 28)) {
        kl_error("%s: file too large for a model (%zu bytes)", src->name, src->len);
        return -1;
    }
    struct parse_state ps = {.src = src, .line = 1, .col = 1, .program = out};
    yyscan_t scanner;
    if (kl_yylex_init_extra(&ps, &scanner))
        kl_panic("cannot create the lexer");
    YY_BUFFER_STATE buf = kl_yy_scan_bytes(src->text, (int)src->len, scanner);
    int rc = kl_yyparse(scanner, &ps);
    kl_yy_delete_buffer(buf, scanner);
    kl_yylex_destroy(scanner);
    if (rc != 0) {
        if (!ps.reported)
            kl_error_at(src, (kl_loc){ps.line, ps.col}, "cannot parse this file");
        ast_program_free(out);
        return -1;
    }
    return 0;
}
