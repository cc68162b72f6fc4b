/* The model language's syntax tree, as the parser builds it.
 *
 * Nodes are malloc'd and owned by their parent; the parser's %destructor
 * frees the pieces it drops on a syntax error, and ast_program_free frees a
 * whole tree. Lists are singly linked in source order. */
#ifndef KILN_AST_H
#define KILN_AST_H

#include <stdbool.h>
#include <stdint.h>

#include "base/support.h"

typedef struct ast_expr ast_expr;
typedef struct ast_arg ast_arg;

typedef enum ast_expr_kind {
    AST_NUM,
    AST_STR,
    AST_IDENT,
    AST_BINOP, /* op is '+', '-', '*', '/', '@', '<', '>' or an ast_op */
    AST_NEG,
    AST_CALL,  /* name(args) */
    AST_LIST,  /* [args] (positional only) */
} ast_expr_kind;

/* The binary operators spelt with two characters (BINOP's op). */
enum ast_op { AST_OP_LE = 256, AST_OP_GE, AST_OP_EQ, AST_OP_NE, AST_OP_POW };

struct ast_expr {
    ast_expr_kind kind;
    kl_loc loc;
    bool is_int;  /* NUM written without '.' or exponent */
    int64_t ival; /* NUM when is_int */
    double num;   /* NUM */
    char *s;      /* STR contents, IDENT and CALL names */
    int op;       /* BINOP */
    bool paren;   /* written in parentheses (a comparison's operand may not be an unparenthesized comparison) */
    ast_expr *a, *b;
    ast_arg *args; /* CALL and LIST */
};

/* A call argument or a key = value pair (name NULL when positional). */
struct ast_arg {
    char *name;
    ast_expr *value;
    kl_loc loc;
    ast_arg *next;
};

typedef struct ast_type {
    char *dtype;      /* NULL when left out */
    bool has_dims;
    bool any_leading; /* [..., k]: dims match the trailing dimensions of any rank */
    ast_arg *dims;    /* positional args holding the dimension expressions */
    kl_loc loc;
} ast_type;

typedef enum ast_stmt_kind {
    AST_ASSIGN, /* name = value */
    AST_PARAM,  /* param name : type [init = expr, key = expr ...] */
    AST_INPUT,  /* input name : type */
    AST_RETURN, /* return value */
    AST_REPORT, /* report [name =] value */
    AST_OUTPUT, /* output name = value (word: the first name, "output") */
} ast_stmt_kind;

typedef struct ast_stmt {
    ast_stmt_kind kind;
    kl_loc loc;
    char *name;       /* NULL for return and unnamed reports */
    kl_loc name_loc;
    ast_type *type;
    ast_expr *value;
    ast_arg *opts;    /* param and report options */
    char *word;       /* AST_OUTPUT: the statement's first name, as written */
    struct ast_stmt *next;
    struct ast_stmt *last; /* on a list's first statement: where ast_stmt_append starts looking for the end */
} ast_stmt;

typedef struct ast_param {
    char *name;
    ast_type *type; /* NULL when not annotated */
    ast_expr *dflt; /* NULL when required */
    kl_loc loc;
    struct ast_param *next;
} ast_param;

typedef struct ast_def {
    char *name;
    ast_param *params;
    ast_stmt *body;
    kl_loc loc;
    struct ast_def *next;
} ast_def;

typedef struct ast_block {
    char *name;     /* model name; NULL for train */
    ast_stmt *body; /* model */
    ast_arg *items; /* train */
    kl_loc loc;
} ast_block;

typedef enum ast_item_kind { AST_ITEM_DEF, AST_ITEM_MODEL, AST_ITEM_TRAIN } ast_item_kind;

typedef struct ast_item {
    ast_item_kind kind;
    ast_def *def;
    ast_block *block;
    struct ast_item *next;
} ast_item;

typedef struct ast_program {
    ast_item *items;
} ast_program;

ast_expr *ast_expr_new(ast_expr_kind kind, kl_loc loc);
ast_arg *ast_arg_new(char *name, ast_expr *value, kl_loc loc);
/* Appends b to list a (either may be NULL); returns the head. */
ast_arg *ast_arg_append(ast_arg *a, ast_arg *b);
ast_stmt *ast_stmt_append(ast_stmt *a, ast_stmt *b);
ast_param *ast_param_append(ast_param *a, ast_param *b);
ast_item *ast_item_append(ast_item *a, ast_item *b);

void ast_expr_free(ast_expr *e);
void ast_args_free(ast_arg *a);
void ast_type_free(ast_type *t);
void ast_stmts_free(ast_stmt *s);
void ast_params_free(ast_param *p);
void ast_def_free(ast_def *d);
void ast_block_free(ast_block *b);
void ast_items_free(ast_item *i);
void ast_program_free(ast_program *p);

/* Parses a model file. Returns 0, or -1 after reporting the first error
 * (file:line:col, the line and a caret). */
int ast_parse(const kl_source *src, ast_program *out);

#endif
