/* The model language's grammar: a pure parser with locations.
 *
 * Statements need no separator: every statement starts with a keyword or
 * "name =", and no expression can be followed by either, so the grammar is
 * unambiguous without newlines (%expect 0 keeps it that way). The first
 * syntax error stops the parse; %destructor frees what was on the stack. */
%define api.pure full
%define api.prefix {kl_yy}
%define parse.error custom
%define parse.lac full
%locations
%expect 0

%code requires {
#include "ast.h"
#include "parse_state.h"
typedef void *yyscan_t;
}

%param {yyscan_t scanner}
%parse-param {struct parse_state *ps}

%code {
#include <string.h>

/* The parser's stack limit (bison's default), named so that the message
 * for a file nested deeper than that can say so. */
#define YYMAXDEPTH 10000

int kl_yylex(KL_YYSTYPE *lval, KL_YYLTYPE *lloc, yyscan_t scanner);

static kl_loc L(KL_YYLTYPE l)
{
    return (kl_loc){l.first_line, l.first_column};
}

static void kl_yyerror(KL_YYLTYPE *loc, yyscan_t scanner, struct parse_state *ps, const char *msg)
{
    (void)scanner;
    /* Bison's only other message: its stack (YYMAXDEPTH) is full. */
    if (!ps->reported && !strcmp(msg, "memory exhausted"))
        kl_error_at(ps->src, L(*loc), "nested more than %d deep", YYMAXDEPTH);
    else if (!ps->reported)
        kl_error_at(ps->src, L(*loc), "%s", msg);
    ps->reported = true;
}

static ast_expr *binop(int op, ast_expr *a, ast_expr *b, KL_YYLTYPE loc)
{
    ast_expr *e = ast_expr_new(AST_BINOP, L(loc));
    e->op = op;
    e->a = a;
    e->b = b;
    return e;
}

static ast_stmt *stmt_new(ast_stmt_kind kind, KL_YYLTYPE loc)
{
    ast_stmt *s = kl_xcalloc(1, sizeof *s);
    s->kind = kind;
    s->loc = L(loc);
    return s;
}
}

%union {
    char *str;
    struct { bool is_int; long long i; double f; } num;
    ast_expr *expr;
    ast_arg *arg;
    ast_type *type;
    ast_stmt *stmt;
    ast_param *param;
    ast_def *def;
    ast_block *block;
    ast_item *item;
}

%token YYEOF 0 "end of file"
%token <str> IDENT "a name"
%token <str> STRING "a string"
%token <num> NUMBER "a number"
%token DEF "'def'" MODEL "'model'" TRAIN "'train'" PARAM "'param'" INPUT "'input'"
%token RETURN "'return'" REPORT "'report'" INIT "'init'" DECAY "'decay'"
%token LE "'<='" GE "'>='" EQ "'=='" NE "'!='" POW "'**'" ELLIPSIS "'...'"

%type <expr> expr primary
%type <arg> args args_opt arg list_opt list kvs more_opts param_opts param_opt report_opts dims_opt dims_tail
%type <type> type
%type <stmt> stmts stmt
%type <param> params params_opt param
%type <def> def
%type <block> model train
%type <item> items item

%destructor { free($$); } <str>
%destructor { ast_expr_free($$); } <expr>
%destructor { ast_args_free($$); } <arg>
%destructor { ast_type_free($$); } <type>
%destructor { ast_stmts_free($$); } <stmt>
%destructor { ast_params_free($$); } <param>
%destructor { ast_def_free($$); } <def>
%destructor { ast_block_free($$); } <block>
%destructor { ast_items_free($$); } <item>

/* As in Python: comparisons below arithmetic, '**' above unary minus and
 * right-associative (-2**2 is -4, 2**3**2 is 512). Comparisons are left
 * associative here so that lowering can refuse a chain (a < b < c) with
 * a message of its own. */
%left '<' '>' LE GE EQ NE
%left '+' '-'
%left '*' '/' '@'
%precedence NEG
%right POW

%%

program
    : items                     { ps->program->items = $1; }
    ;

items
    : %empty                    { $$ = NULL; }
    | items item                { $$ = ast_item_append($1, $2); }
    ;

item
    : def                       { $$ = kl_xcalloc(1, sizeof *$$); $$->kind = AST_ITEM_DEF; $$->def = $1; }
    | model                     { $$ = kl_xcalloc(1, sizeof *$$); $$->kind = AST_ITEM_MODEL; $$->block = $1; }
    | train                     { $$ = kl_xcalloc(1, sizeof *$$); $$->kind = AST_ITEM_TRAIN; $$->block = $1; }
    ;

def
    : DEF IDENT '(' params_opt ')' '{' stmts '}'
                                { $$ = kl_xcalloc(1, sizeof *$$); $$->name = $2; $$->params = $4;
                                  $$->body = $7; $$->loc = L(@2); }
    ;

params_opt
    : %empty                    { $$ = NULL; }
    | params                    { $$ = $1; }
    ;

params
    : param                     { $$ = $1; }
    | params ',' param          { $$ = ast_param_append($1, $3); }
    ;

param
    : IDENT                     { $$ = kl_xcalloc(1, sizeof *$$); $$->name = $1; $$->loc = L(@1); }
    | IDENT ':' type            { $$ = kl_xcalloc(1, sizeof *$$); $$->name = $1; $$->type = $3; $$->loc = L(@1); }
    | IDENT '=' expr            { $$ = kl_xcalloc(1, sizeof *$$); $$->name = $1; $$->dflt = $3; $$->loc = L(@1); }
    | IDENT ':' type '=' expr   { $$ = kl_xcalloc(1, sizeof *$$); $$->name = $1; $$->type = $3;
                                  $$->dflt = $5; $$->loc = L(@1); }
    ;

type
    : IDENT '[' dims_opt ']'    { $$ = kl_xcalloc(1, sizeof *$$); $$->dtype = $1; $$->has_dims = true;
                                  $$->dims = $3; $$->loc = L(@1); }
    | '[' dims_opt ']'          { $$ = kl_xcalloc(1, sizeof *$$); $$->has_dims = true; $$->dims = $2; $$->loc = L(@1); }
    | IDENT '[' ELLIPSIS dims_tail ']'
                                { $$ = kl_xcalloc(1, sizeof *$$); $$->dtype = $1; $$->has_dims = true;
                                  $$->any_leading = true; $$->dims = $4; $$->loc = L(@1); }
    | '[' ELLIPSIS dims_tail ']'
                                { $$ = kl_xcalloc(1, sizeof *$$); $$->has_dims = true; $$->any_leading = true;
                                  $$->dims = $3; $$->loc = L(@1); }
    | IDENT                     { $$ = kl_xcalloc(1, sizeof *$$); $$->dtype = $1; $$->loc = L(@1); }
    ;

dims_opt
    : %empty                    { $$ = NULL; }
    | list                      { $$ = $1; }
    ;

dims_tail
    : %empty                    { $$ = NULL; }
    | ',' list                  { $$ = $2; }
    ;

model
    : MODEL IDENT '{' stmts '}' { $$ = kl_xcalloc(1, sizeof *$$); $$->name = $2; $$->body = $4; $$->loc = L(@1); }
    ;

train
    : TRAIN '{' kvs '}'         { $$ = kl_xcalloc(1, sizeof *$$); $$->items = $3; $$->loc = L(@1); }
    ;

kvs
    : %empty                    { $$ = NULL; }
    | kvs IDENT '=' expr        { $$ = ast_arg_append($1, ast_arg_new($2, $4, L(@2))); }
    | kvs ';'                   { $$ = $1; }
    ;

stmts
    : %empty                    { $$ = NULL; }
    | stmts stmt                { $$ = ast_stmt_append($1, $2); }
    | stmts ';'                 { $$ = $1; }
    ;

stmt
    : IDENT '=' expr            { $$ = stmt_new(AST_ASSIGN, @1); $$->name = $1; $$->name_loc = L(@1); $$->value = $3; }
    | PARAM IDENT ':' type param_opts
                                { $$ = stmt_new(AST_PARAM, @1); $$->name = $2; $$->name_loc = L(@2);
                                  $$->type = $4; $$->opts = $5; }
    | INPUT IDENT ':' type      { $$ = stmt_new(AST_INPUT, @1); $$->name = $2; $$->name_loc = L(@2); $$->type = $4; }
    | RETURN expr               { $$ = stmt_new(AST_RETURN, @1); $$->value = $2; }
    /* output NAME = EXPR: output is no keyword (a model may name a value
     * output); lowering refuses any other first name. */
    | IDENT IDENT '=' expr      { $$ = stmt_new(AST_OUTPUT, @1); $$->word = $1; $$->name = $2; $$->name_loc = L(@2);
                                  $$->value = $4; }
    | REPORT expr report_opts   { $$ = stmt_new(AST_REPORT, @1); $$->value = $2; $$->opts = $3; }
    | REPORT IDENT '=' expr report_opts
                                { $$ = stmt_new(AST_REPORT, @1); $$->name = $2; $$->name_loc = L(@2); $$->value = $4;
                                  $$->opts = $5; }
    ;

/* A report's options after commas (better = higher|lower); lowering
 * refuses an unknown one. */
report_opts
    : %empty                    { $$ = NULL; }
    | report_opts ',' IDENT '=' expr
                                { $$ = ast_arg_append($1, ast_arg_new($3, $5, L(@3))); }
    ;

/* A param's options, in any order. The first is a keyword (init or
 * decay): a name there would start the next statement, since statements
 * need no separator. Later options follow a comma, so any name may be
 * written there and lowering refuses an unknown one. */
param_opts
    : %empty                    { $$ = NULL; }
    | param_opt more_opts       { $$ = ast_arg_append($1, $2); }
    ;

param_opt
    : INIT '=' expr             { $$ = ast_arg_new(kl_xstrdup("init"), $3, L(@1)); }
    | DECAY '=' expr            { $$ = ast_arg_new(kl_xstrdup("decay"), $3, L(@1)); }
    ;

more_opts
    : %empty                    { $$ = NULL; }
    | more_opts ',' param_opt   { $$ = ast_arg_append($1, $3); }
    | more_opts ',' IDENT '=' expr
                                { $$ = ast_arg_append($1, ast_arg_new($3, $5, L(@3))); }
    ;

expr
    : expr '+' expr             { $$ = binop('+', $1, $3, @2); }
    | expr '-' expr             { $$ = binop('-', $1, $3, @2); }
    | expr '*' expr             { $$ = binop('*', $1, $3, @2); }
    | expr '/' expr             { $$ = binop('/', $1, $3, @2); }
    | expr '@' expr             { $$ = binop('@', $1, $3, @2); }
    | expr POW expr             { $$ = binop(AST_OP_POW, $1, $3, @2); }
    | expr '<' expr             { $$ = binop('<', $1, $3, @2); }
    | expr '>' expr             { $$ = binop('>', $1, $3, @2); }
    | expr LE expr              { $$ = binop(AST_OP_LE, $1, $3, @2); }
    | expr GE expr              { $$ = binop(AST_OP_GE, $1, $3, @2); }
    | expr EQ expr              { $$ = binop(AST_OP_EQ, $1, $3, @2); }
    | expr NE expr              { $$ = binop(AST_OP_NE, $1, $3, @2); }
    | '-' expr %prec NEG        { $$ = ast_expr_new(AST_NEG, L(@1)); $$->a = $2; }
    | primary                   { $$ = $1; }
    ;

primary
    : NUMBER                    { $$ = ast_expr_new(AST_NUM, L(@1)); $$->is_int = $1.is_int;
                                  $$->ival = $1.i; $$->num = $1.f; }
    | STRING                    { $$ = ast_expr_new(AST_STR, L(@1)); $$->s = $1; }
    | IDENT                     { $$ = ast_expr_new(AST_IDENT, L(@1)); $$->s = $1; }
    | IDENT '(' args_opt ')'    { $$ = ast_expr_new(AST_CALL, L(@1)); $$->s = $1; $$->args = $3; }
    | '(' expr ')'              { $$ = $2; $$->paren = true; }
    /* A group of named values, (metric = accuracy, patience = 3): a
     * call without a name, for the train block (lowering refuses it in
     * the model). */
    | '(' IDENT '=' expr ')'    { $$ = ast_expr_new(AST_CALL, L(@1)); $$->s = kl_xstrdup("");
                                  $$->args = ast_arg_new($2, $4, L(@2)); }
    | '(' IDENT '=' expr ',' args ')'
                                { $$ = ast_expr_new(AST_CALL, L(@1)); $$->s = kl_xstrdup("");
                                  $$->args = ast_arg_append(ast_arg_new($2, $4, L(@2)), $6); }
    | '[' list_opt ']'          { $$ = ast_expr_new(AST_LIST, L(@1)); $$->args = $2; }
    ;

args_opt
    : %empty                    { $$ = NULL; }
    | args                      { $$ = $1; }
    ;

args
    : arg                       { $$ = $1; }
    | args ',' arg              { $$ = ast_arg_append($1, $3); }
    ;

arg
    : expr                      { $$ = ast_arg_new(NULL, $1, L(@1)); }
    | IDENT '=' expr            { $$ = ast_arg_new($1, $3, L(@1)); }
    ;

list_opt
    : %empty                    { $$ = NULL; }
    | list                      { $$ = $1; }
    ;

list
    : expr                      { $$ = ast_arg_new(NULL, $1, L(@1)); }
    | list ',' expr             { $$ = ast_arg_append($1, ast_arg_new(NULL, $3, L(@3))); }
    ;

%%

/* "found X": the lookahead, shown with its text where that helps. */
static void describe_token(kl_buf *b, const yypcontext_t *ctx, struct parse_state *ps)
{
    yysymbol_kind_t t = yypcontext_token(ctx);
    const KL_YYLTYPE *loc = yypcontext_location(ctx);
    if (t == YYSYMBOL_IDENT || t == YYSYMBOL_NUMBER) {
        /* Copy the token's text from the source line. */
        const char *p = ps->src->text;
        int line = 1;
        while (line < loc->first_line && *p)
            if (*p++ == '\n')
                line++;
        p += loc->first_column - 1;
        int n = loc->last_column - loc->first_column + 1;
        if (n > 0 && n < 40) {
            kl_buf_printf(b, "'%.*s'", n, p);
            return;
        }
    }
    kl_buf_puts(b, yysymbol_name(t));
}

static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner, struct parse_state *ps)
{
    (void)scanner;
    if (ps->reported)
        return 0;
    yysymbol_kind_t exp[YYNTOKENS];
    int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
    /* Collapse the tokens that start an expression into one phrase, and
     * the binary operators that may continue one into another. */
    bool has_expr = false, has_binop = false, has_close = false;
    int count = 0;
    for (int i = 0; i < n; i++) {
        has_expr |= exp[i] == YYSYMBOL_NUMBER;
        has_binop |= !strcmp(yysymbol_name(exp[i]), "'@'");
        has_close |= !strcmp(yysymbol_name(exp[i]), "'}'");
    }
    const char *names[YYNTOKENS];
    if (has_expr)
        names[count++] = "an expression";
    if (has_binop)
        names[count++] = "an operator";
    for (int i = 0; i < n; i++) {
        yysymbol_kind_t k = exp[i];
        const char *name = yysymbol_name(k);
        if (has_expr && (k == YYSYMBOL_NUMBER || k == YYSYMBOL_STRING || k == YYSYMBOL_IDENT || !strcmp(name, "'-'") ||
                         !strcmp(name, "'('") || !strcmp(name, "'['")))
            continue;
        if (has_binop && (k == YYSYMBOL_LE || k == YYSYMBOL_GE || k == YYSYMBOL_EQ || k == YYSYMBOL_NE ||
                          k == YYSYMBOL_POW || (strchr("+-*/@<>", name[1]) && name[0] == '\'' && name[2] == '\'')))
            continue;
        names[count++] = name;
    }
    /* A block left open shows up as the end of the file or the next
     * block's keyword where a statement was expected: the only way on is a
     * '}', so say that, and where the block began. */
    yysymbol_kind_t t = yypcontext_token(ctx);
    bool unclosed = has_close && ps->brace_depth > 0 &&
                    (t == YYSYMBOL_YYEOF || t == YYSYMBOL_DEF || t == YYSYMBOL_MODEL || t == YYSYMBOL_TRAIN);
    if (unclosed) {
        names[0] = "'}'";
        count = 1;
    }
    kl_buf msg = {0};
    kl_buf_puts(&msg, "unexpected ");
    describe_token(&msg, ctx, ps);
    if (count > 0 && count <= 5) {
        kl_buf_puts(&msg, ", expected ");
        for (int i = 0; i < count; i++)
            kl_buf_printf(&msg, "%s%s", i == 0 ? "" : i == count - 1 ? " or " : ", ", names[i]);
    }
    const KL_YYLTYPE *loc = yypcontext_location(ctx);
    kl_error_at(ps->src, L(*loc), "%s", msg.s);
    kl_buf_free(&msg);
    if (unclosed) {
        int d = ps->brace_depth < (int)KL_ARRAY_LEN(ps->open_brace) ? ps->brace_depth : (int)KL_ARRAY_LEN(ps->open_brace);
        kl_note_at(ps->src, ps->open_brace[d - 1], "this '{' has no matching '}'");
    }
    ps->reported = true;
    return 0;
}
