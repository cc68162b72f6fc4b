/* State shared by the reentrant lexer and the pure parser of one file. */
#ifndef KILN_PARSE_STATE_H
#define KILN_PARSE_STATE_H

#include <stdbool.h>

#include "ast.h"

struct parse_state {
    const kl_source *src;
    int line, col;       /* the lexer's position */
    bool reported;       /* an error was already printed */
    /* Braces still open, so a syntax error at the end of a block can point
     * at the '{' that lacks its '}'. Only the outermost few are kept. */
    kl_loc open_brace[16];
    int brace_depth;
    ast_program *program;
};

#endif
