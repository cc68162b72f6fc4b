/* Unit tests of the IR: the op rows, broadcasting, shape rules, attribute specs, the
 * verifier and compaction (the text form: test_ir_text.c).
 *
 * Every check compares against an exact expected value (a type, a
 * message, a dump), so a change in behaviour fails here. Types and
 * attributes are written as text ("f32[2,3]", "axis=1; shape=[2,-1]") to
 * keep the tables readable. */
#include "ir_fixture.h"

/* ---- NumPy broadcasting ---- */

static void test_broadcast_table(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b, *want; /* want NULL: incompatible */
    } rows[] = {
        {"f32[]", "f32[]", "f32[]"},
        {"f32[3]", "f32[]", "f32[3]"},
        {"f32[]", "f32[2,3]", "f32[2,3]"},
        {"f32[2,3]", "f32[3]", "f32[2,3]"},
        {"f32[3]", "f32[2,3]", "f32[2,3]"},
        {"f32[2,1]", "f32[1,3]", "f32[2,3]"},
        {"f32[1]", "f32[7]", "f32[7]"},
        {"f32[7]", "f32[1]", "f32[7]"},
        {"f32[4,1,5]", "f32[3,1]", "f32[4,3,5]"},
        {"f32[5,1,4]", "f32[2,4]", "f32[5,2,4]"},
        {"f32[8,1,6,1]", "f32[7,1,5]", "f32[8,7,6,5]"},
        {"f32[1,1,1,1,1,1,1,1]", "f32[2]", "f32[1,1,1,1,1,1,1,2]"},
        {"f32[15,3,5]", "f32[15,1,5]", "f32[15,3,5]"},
        {"f32[2,3]", "f32[2]", NULL},
        {"f32[2,3]", "f32[3,3]", NULL},
        {"f32[3]", "f32[4]", NULL},
        {"f32[2,1]", "f32[8,4,3]", NULL},
        {"f32[0]", "f32[2]", NULL},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(rows); i++) {
        ir_type a = type_of(rows[i].a), b = type_of(rows[i].b), out;
        int rc = ir_broadcast_shapes(&a, &b, &out);
        if (!rows[i].want) {
            if (rc != -1)
                fail_msg("%s with %s should not broadcast", rows[i].a, rows[i].b);
            continue;
        }
        assert_int_equal(rc, 0);
        char *s = type_text(&out);
        assert_string_equal(s, rows[i].want);
        free(s);
    }
}

/* ---- shape rules, one family at a time ---- */

typedef struct rule_case {
    ir_op op;
    const char *in[5];
    const char *attrs;
    const char *want;       /* result types joined by ", ", or NULL */
    const char *err;        /* the message, or NULL */
    const char *want_attrs; /* the attributes after the rule, or NULL */
} rule_case;

static void run_rule_case(const rule_case *c)
{
    ir_type in[5];
    int nin = 0;
    while (nin < 5 && c->in[nin]) {
        in[nin] = type_of(c->in[nin]);
        nin++;
    }
    ir_attrs a;
    attrs_from(&a, c->attrs ? c->attrs : "");
    ir_infer inf = {.op = c->op, .nin = nin, .in = in, .attrs = &a};
    int rc = ir_infer_run(&inf);
    if (c->err) {
        if (rc != -1)
            fail_msg("%s %s: expected the error \"%s\"", ir_op_name(c->op), c->attrs ? c->attrs : "", c->err);
        assert_string_equal(inf.err, c->err);
    } else {
        if (rc != 0)
            fail_msg("%s: unexpected error \"%s\"", ir_op_name(c->op), inf.err);
        kl_buf b = {0};
        for (int i = 0; i < ir_ops[c->op].nout; i++) {
            char *s = type_text(&inf.out[i]);
            kl_buf_printf(&b, "%s%s", i ? ", " : "", s);
            free(s);
        }
        assert_string_equal(b.s, c->want);
        kl_buf_free(&b);
        if (c->want_attrs) {
            char *s = attrs_text(&a);
            assert_string_equal(s, c->want_attrs);
            free(s);
        }
    }
    ir_attrs_free(&a);
}

static void run_rule_cases(const rule_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++)
        run_rule_case(&cases[i]);
}

static void test_rules_elementwise(void **state)
{
    (void)state;
    static const rule_case cases[] = {
        {IR_OP_ADD, {"f32[2,3]", "f32[3]"}, NULL, "f32[2,3]", NULL, NULL},
        {IR_OP_MUL, {"bf16[4,1]", "bf16[5]"}, NULL, "bf16[4,5]", NULL, NULL},
        {IR_OP_ADD, {"f32[2,3]", "i32[2,3]"}, NULL, NULL,
         "add: dtype mismatch, f32 and i32 (cast one with f32(...) or similar)", NULL},
        {IR_OP_SUB, {"f32[2,3]", "f32[4]"}, NULL, NULL, "sub: shapes f32[2,3] and f32[4] do not broadcast", NULL},
        {IR_OP_POW, {"i32[2]", "i32[2]"}, NULL, NULL,
         "pow needs a floating-point operand, got i32 (cast it with f32(...))", NULL},
        {IR_OP_RELU, {"f16[4]"}, NULL, "f16[4]", NULL, NULL},
        {IR_OP_NEG, {"i32[4]"}, NULL, "i32[4]", NULL, NULL},
        {IR_OP_EXP, {"u8[4]"}, NULL, NULL, "exp needs a floating-point operand, got u8 (cast it with f32(...))", NULL},
        {IR_OP_RELU, {"f32[4]", "f32[4]"}, NULL, NULL, "relu takes 1 operand, got 2", NULL},
        {IR_OP_CAST, {"u8[2,2]"}, "to=bf16", "bf16[2,2]", NULL, "{to = bf16}"},
        {IR_OP_CAST, {"u8[2,2]"}, NULL, NULL, "cast needs argument 'to'", NULL},
        {IR_OP_CAST, {"u8[2,2]"}, "to=f33", NULL,
         "argument 'to' of cast must be a dtype (u8, i32, i64, f16, bf16, f32, f64)", NULL},
        {IR_OP_CONST, {NULL}, "value=1.5; dtype=f16; shape=[2,3]", "f16[2,3]", NULL,
         "{value = 1.5, dtype = f16, shape = [2, 3]}"},
        {IR_OP_CONST, {NULL}, "value=2", "f32[]", NULL, "{value = 2.0, dtype = f32}"},
        {IR_OP_CONST, {NULL}, "value=0; shape=[2,0]", NULL, "const: dimensions must be positive", NULL},
    };
    run_rule_cases(cases, KL_ARRAY_LEN(cases));
}

static void test_rules_gemm_conv(void **state)
{
    (void)state;
    static const rule_case cases[] = {
        {IR_OP_MATMUL, {"f32[2,3]", "f32[3,4]"}, NULL, "f32[2,4]", NULL, "{transpose_a = 0, transpose_b = 0}"},
        {IR_OP_MATMUL, {"f32[5,2,3]", "f32[3,4]"}, NULL, "f32[5,2,4]", NULL, NULL},
        {IR_OP_MATMUL, {"f32[2,3]", "f32[4,3]"}, "transpose_b=1", "f32[2,4]", NULL, NULL},
        {IR_OP_MATMUL, {"f32[3,2]", "f32[3,4]"}, "transpose_a=1", "f32[2,4]", NULL, NULL},
        {IR_OP_MATMUL, {"f32[2,3]", "f32[4,5]"}, NULL, NULL,
         "matmul: inner dimensions differ, f32[2,3] @ f32[4,5] (3 vs 4)", NULL},
        {IR_OP_MATMUL, {"f32[3]", "f32[3,4]"}, NULL, NULL,
         "matmul needs a left operand of rank 2 to 8, got f32[3]", NULL},
        {IR_OP_MATMUL, {"f32[2,2,3]", "f32[3,3,4]"}, NULL, NULL,
         "matmul: batch dimensions of f32[2,2,3] and f32[3,3,4] do not broadcast", NULL},
        {IR_OP_CONV2D, {"f32[1,3,8,8]", "f32[4,3,3,3]"}, "pad=1", "f32[1,4,8,8]", NULL,
         "{stride = [1, 1], pad = [1, 1], dilation = [1, 1], groups = 1}"},
        {IR_OP_CONV2D, {"f32[2,4,9,9]", "f32[8,2,3,3]", "f32[8]"}, "stride=2; groups=2", "f32[2,8,4,4]", NULL, NULL},
        {IR_OP_CONV2D, {"f32[1,4,9,9]", "f32[4,1,3,3]"}, "dilation=4; groups=4", "f32[1,4,1,1]", NULL, NULL},
        {IR_OP_CONV2D, {"f32[1,3,8,8]", "f32[4,1,3,3]"}, NULL, NULL,
         "conv2d: the input has 3 channels but the kernel expects 1", NULL},
        {IR_OP_CONV2D, {"f32[1,4,8,8]", "f32[4,1,3,3]"}, "groups=2", NULL,
         "conv2d: the input has 2 channels per group but the kernel expects 1", NULL},
        {IR_OP_CONV2D, {"f32[1,3,2,2]", "f32[4,3,3,3]"}, NULL, NULL,
         "conv2d: the kernel (3x3) is larger than the padded input (2x2)", NULL},
        {IR_OP_CONV2D, {"f32[1,3,8,8]", "f32[4,3,3,3]", "f32[3]"}, NULL, NULL, "conv2d: the bias must be f32[4]", NULL},
        {IR_OP_CONV2D, {"f32[1,3,8,8]", "f32[4,3,3,3]"}, "dilation=9000000000000000000", NULL,
         "conv2d: the kernel (3x3) is larger than the padded input (8x8)", NULL},
        {IR_OP_CONV2D, {"f32[1,3,8,8]"}, NULL, NULL, "conv2d takes 2 to 3 operands, got 1", NULL},
        {IR_OP_MAXPOOL, {"f32[1,2,8,8]"}, "size=2", "f32[1,2,4,4]", NULL,
         "{size = [2, 2], stride = [2, 2], pad = [0, 0]}"},
        {IR_OP_AVGPOOL, {"f32[1,2,7,7]"}, "size=3; stride=[1,2]; pad=1", "f32[1,2,7,4]", NULL,
         "{size = [3, 3], stride = [1, 2], pad = [1, 1]}"},
        {IR_OP_MAXPOOL, {"f32[1,2,8,8]"}, "size=2; pad=2", NULL,
         "maxpool: pad must be at most half the window size", NULL},
        {IR_OP_MAXPOOL, {"f32[1,2,8,8]"}, "size=[9,1]", NULL,
         "maxpool: the window (9x1) is larger than the input (8x8)", NULL},
        {IR_OP_MAXPOOL, {"i32[1,2,8,8]"}, "size=2", NULL,
         "maxpool needs a floating-point operand, got i32 (cast it with f32(...))", NULL},
    };
    run_rule_cases(cases, KL_ARRAY_LEN(cases));
}

static void test_rules_movement(void **state)
{
    (void)state;
    static const rule_case cases[] = {
        {IR_OP_RESHAPE, {"f32[2,3,4]"}, "shape=[-1,6]", "f32[4,6]", NULL, "{shape = [4, 6]}"},
        {IR_OP_RESHAPE, {"f32[2,3,4]"}, "shape=[2,5]", NULL,
         "reshape: cannot reshape f32[2,3,4] (24 elements) to [2, 5]", NULL},
        {IR_OP_RESHAPE, {"f32[2,3,4]"}, "shape=[-1,5]", NULL,
         "reshape: cannot reshape f32[2,3,4] (24 elements) to [-1, 5]: the other sizes do not divide 24", NULL},
        {IR_OP_RESHAPE, {"f32[2,3,4]"}, "shape=[-1,-1]", NULL,
         "reshape: dimensions must be positive (one may be -1)", NULL},
        {IR_OP_RESHAPE, {"f32[2]"}, "shape=[4000000000,4000000000,4000000000]", NULL,
         "reshape: cannot reshape f32[2] (2 elements) to [4000000000, 4000000000, 4000000000]", NULL},
        {IR_OP_FLATTEN, {"f32[2,3,4]"}, NULL, "f32[2,12]", NULL, "{axis = 1}"},
        {IR_OP_FLATTEN, {"f32[2,3,4]"}, "axis=2", "f32[6,4]", NULL, "{axis = 2}"},
        {IR_OP_FLATTEN, {"f32[2,3,4]"}, "axis=3", "f32[24,1]", NULL, "{axis = 3}"},
        {IR_OP_FLATTEN, {"f32[2,3,4]"}, "axis=5", NULL, "flatten: axis out of range for rank 3", NULL},
        {IR_OP_TRANSPOSE, {"f32[5,2,3]"}, NULL, "f32[5,3,2]", NULL, NULL},
        {IR_OP_TRANSPOSE, {"f32[5]"}, NULL, NULL, "transpose needs an operand of rank 2 to 8, got f32[5]", NULL},
        {IR_OP_PERMUTE, {"f32[2,3,4]"}, "perm=[2,0,-2]", "f32[4,2,3]", NULL, "{perm = [2, 0, 1]}"},
        {IR_OP_PERMUTE, {"f32[2,3,4]"}, "perm=[0,0,1]", NULL, "permute: perm must be a permutation of 0..2", NULL},
        {IR_OP_PERMUTE, {"f32[2,3,4]"}, "perm=[0,1]", NULL,
         "permute: perm has 2 entries for an operand of rank 3", NULL},
        {IR_OP_BROADCAST, {"f32[3,1]"}, "shape=[2,3,4]", "f32[2,3,4]", NULL, NULL},
        {IR_OP_BROADCAST, {"f32[3,2]"}, "shape=[3,4]", NULL, "broadcast: f32[3,2] does not broadcast to f32[3,4]",
         NULL},
        {IR_OP_BROADCAST, {"f32[1]"}, "shape=[2000000,2000000,2000000]", NULL,
         "broadcast: the result f32[2000000,2000000,2000000] is out of range (sizes 1 to 2^40, at most 2^50 elements)",
         NULL},
        {IR_OP_CONCAT, {"f32[2,3]", "f32[2,5]", "f32[2,1]"}, "axis=-1", "f32[2,9]", NULL, "{axis = 1}"},
        {IR_OP_CONCAT, {"f32[2,3]", "f32[3,3]"}, "axis=1", NULL,
         "concat: operand 2 is f32[3,3], which does not match f32[2,3] outside axis 1", NULL},
        {IR_OP_CONCAT, {"f32[2,3]", "f16[2,3]"}, NULL, NULL,
         "concat: operand 2 is f16[2,3], which does not match f32[2,3] outside axis 0", NULL},
        {IR_OP_CONCAT, {NULL}, NULL, NULL, "concat takes at least 1 operand, got 0", NULL},
        {IR_OP_SLICE, {"f32[4,10]"}, "axis=1; start=-4; end=100", "f32[4,4]", NULL,
         "{axis = 1, start = 6, end = 10, step = 1}"},
        {IR_OP_SLICE, {"f32[4,10]"}, "axis=1; start=1; end=10; step=9223372036854775807", "f32[4,1]", NULL, NULL},
        {IR_OP_SLICE, {"f32[4,10]"}, "axis=1; start=1; end=8; step=3", "f32[4,3]", NULL, NULL},
        {IR_OP_SLICE, {"f32[4,10]"}, "axis=0; start=3; end=3", NULL,
         "slice: the range [3, 3) of axis 0 (size 4) is empty", NULL},
        {IR_OP_SLICE, {"f32[4,10]"}, "axis=0; start=0", NULL, "slice needs argument 'end'", NULL},
        {IR_OP_EMBEDDING, {"i32[2,7]", "f16[100,16]"}, NULL, "f16[2,7,16]", NULL, NULL},
        {IR_OP_EMBEDDING, {"f32[2,7]", "f32[100,16]"}, NULL, NULL, "embedding needs integer indices, got f32", NULL},
    };
    run_rule_cases(cases, KL_ARRAY_LEN(cases));
}

static void test_rules_reductions_losses(void **state)
{
    (void)state;
    static const rule_case cases[] = {
        {IR_OP_SUM, {"f32[2,3,4]"}, NULL, "f32[]", NULL, "{axis = [0, 1, 2], keepdim = 0}"},
        {IR_OP_MEAN, {"f32[2,3,4]"}, "axis=[-1,0]; keepdim=1", "f32[1,3,1]", NULL, "{axis = [0, 2], keepdim = 1}"},
        {IR_OP_MAX, {"i32[2,3]"}, "axis=1", "i32[2]", NULL, "{axis = [1], keepdim = 0}"},
        {IR_OP_SUM, {"i32[2,3]"}, NULL, NULL, "sum needs a floating-point operand, got i32 (cast it with f32(...))",
         NULL},
        {IR_OP_SUM, {"f32[2,3]"}, "axis=[1,-1]", NULL, "sum: axis 1 given twice", NULL},
        {IR_OP_MEAN, {"f32[2,3]"}, "axis=2", NULL, "mean: axis 2 out of range for rank 2", NULL},
        {IR_OP_SOFTMAX, {"f32[2,3]"}, NULL, "f32[2,3]", NULL, "{axis = 1}"},
        {IR_OP_LOG_SOFTMAX, {"f32[2,3]"}, "axis=-2", "f32[2,3]", NULL, "{axis = 0}"},
        {IR_OP_SOFTMAX, {"f32[2,3]"}, "axis=2", NULL, "softmax: axis out of range for rank 2", NULL},
        {IR_OP_CROSS_ENTROPY, {"bf16[8,10]", "i64[8]"}, NULL, "bf16[]", NULL, NULL},
        {IR_OP_CROSS_ENTROPY, {"f32[8,10]", "i32[7]"}, NULL, NULL, "cross_entropy: 8 rows of logits but 7 labels",
         NULL},
        {IR_OP_CROSS_ENTROPY, {"f32[8,10]", "f32[8]"}, NULL, NULL, "cross_entropy needs integer labels, got f32",
         NULL},
        {IR_OP_ACCURACY, {"f16[8,10]", "u8[8]"}, NULL, "f32[]", NULL, NULL},
        {IR_OP_ACCURACY, {"f32[8]", "i32[8]"}, NULL, NULL, "accuracy needs logits [N, C] of rank 2, got f32[8]", NULL},
    };
    run_rule_cases(cases, KL_ARRAY_LEN(cases));
}

static void test_rules_norm_dropout(void **state)
{
    (void)state;
    static const rule_case cases[] = {
        {IR_OP_BATCHNORM, {"f16[2,4,5,5]", "f32[4]", "f32[4]", "f32[4]", "f32[4]"}, NULL,
         "f16[2,4,5,5], f32[4], f32[4]", NULL, "{eps = 1e-05, momentum = 0.1}"},
        {IR_OP_BATCHNORM, {"f32[2,4]", "f32[4]", "f32[4]", "f32[4]", "f32[4]"}, "momentum=1", "f32[2,4], f32[4], f32[4]",
         NULL, "{eps = 1e-05, momentum = 1.0}"},
        {IR_OP_BATCHNORM, {"f32[2,4,5,5]", "f32[4]", "f32[3]", "f32[4]", "f32[4]"}, NULL, NULL,
         "batchnorm: operand 3 must be a float vector [4] (one value per channel), got f32[3]", NULL},
        {IR_OP_BATCHNORM, {"f32[2,4,5]", "f32[4]", "f32[4]", "f32[4]", "f32[4]"}, NULL, NULL,
         "batchnorm needs an input [N, C] or [N, C, H, W], got f32[2,4,5]", NULL},
        {IR_OP_BATCHNORM, {"f32[2,4]", "f32[4]", "f32[4]", "f32[4]", "f32[4]"}, "eps=0", NULL,
         "batchnorm: eps must be positive and momentum in [0, 1]", NULL},
        {IR_OP_LAYERNORM, {"f32[2,6,16]", "f32[16]", "f32[16]"}, NULL, "f32[2,6,16], f32[2,6], f32[2,6]", NULL,
         "{eps = 1e-05}"},
        {IR_OP_LAYERNORM, {"f32[2,6,16]", "f32[6]", "f32[6]"}, NULL, NULL,
         "layernorm: operand 2 must be a float vector [16] (one value per feature), got f32[6]", NULL},
        {IR_OP_DROPOUT, {"bf16[3,4]"}, "p=0.25", "bf16[3,4], u8[3,4]", NULL, "{p = 0.25, seed = 0}"},
        {IR_OP_DROPOUT, {"f32[3,4]"}, "p=1", NULL, "dropout: p must be in [0, 1), got 1", NULL},
    };
    run_rule_cases(cases, KL_ARRAY_LEN(cases));
}

/* ---- attribute specs ---- */

static void test_attrs_normalize(void **state)
{
    (void)state;
    static const struct {
        ir_op op;
        const char *in, *want, *err;
    } rows[] = {
        /* defaults, in the spec's order */
        {IR_OP_CONV2D, "", "{stride = [1, 1], pad = [0, 0], dilation = [1, 1], groups = 1}", NULL},
        /* given out of order: put back in order; a scalar pair doubled */
        {IR_OP_CONV2D, "groups=2; pad=1", "{stride = [1, 1], pad = [1, 1], dilation = [1, 1], groups = 2}", NULL},
        {IR_OP_CONV2D, "dilation=[2,3]; stride=[1,2]",
         "{stride = [1, 2], pad = [0, 0], dilation = [2, 3], groups = 1}", NULL},
        /* an integer where a float is wanted becomes a float */
        {IR_OP_BATCHNORM, "momentum=0", "{eps = 1e-05, momentum = 0.0}", NULL},
        /* an optional entry ("=?") stays absent */
        {IR_OP_SUM, "", "{keepdim = 0}", NULL},
        {IR_OP_SUM, "axis=1", "{axis = [1], keepdim = 0}", NULL},
        /* positional entries take the spec's names in order */
        {IR_OP_SLICE, "=1; =0; =2", "{axis = 1, start = 0, end = 2, step = 1}", NULL},
        {IR_OP_SLICE, "=1; end=2; start=0", "{axis = 1, start = 0, end = 2, step = 1}", NULL},
        {IR_OP_RELU, "", "", NULL},
        /* errors */
        {IR_OP_CONV2D, "strides=1", NULL, "conv2d has no argument 'strides' (its arguments: stride, pad, dilation, groups, out)"},
        {IR_OP_RELU, "axis=1", NULL, "relu has no argument 'axis' (it takes none)"},
        {IR_OP_MATMUL, "transpose_a=1.5", NULL, "argument 'transpose_a' of matmul must be an integer"},
        {IR_OP_MAXPOOL, "size=[1,2,3]", NULL, "argument 'size' of maxpool must be an integer or a pair of integers"},
        {IR_OP_RESHAPE, "shape=big", NULL, "argument 'shape' of reshape must be an integer or a list of integers"},
        {IR_OP_DROPOUT, "p=half", NULL, "argument 'p' of dropout must be a number"},
        {IR_OP_SLICE, "axis=0", NULL, "slice needs argument 'start'"},
        {IR_OP_SOFTMAX, "=1; =2", NULL, "softmax takes 1 tensor operand, then at most 1 argument; the call gives 2 more"},
        {IR_OP_SOFTMAX, "=1; axis=0", NULL, "softmax: argument 'axis' given twice"},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(rows); i++) {
        ir_attrs a;
        attrs_from(&a, rows[i].in);
        char err[256] = "";
        int rc = ir_attrs_normalize(rows[i].op, &a, err, sizeof err);
        if (rows[i].err) {
            assert_int_equal(rc, -1);
            assert_string_equal(err, rows[i].err);
        } else {
            if (rc)
                fail_msg("%s {%s}: %s", ir_op_name(rows[i].op), rows[i].in, err);
            char *s = attrs_text(&a);
            assert_string_equal(s, rows[i].want);
            free(s);
            /* Normalizing again changes nothing. */
            assert_int_equal(ir_attrs_normalize(rows[i].op, &a, err, sizeof err), 0);
            s = attrs_text(&a);
            assert_string_equal(s, rows[i].want);
            free(s);
        }
        ir_attrs_free(&a);
    }
}

static void test_spec_normalize(void **state)
{
    (void)state;
    const char *spec = "lr:float=0.01 momentum:float=0 nesterov:int=0 name:str=?";
    ir_attrs a;
    attrs_from(&a, "=0.5; nesterov=1");
    char err[256] = "";
    assert_int_equal(ir_spec_normalize(spec, "sgd", &a, err, sizeof err), 0);
    char *s = attrs_text(&a);
    assert_string_equal(s, "{lr = 0.5, momentum = 0.0, nesterov = 1}");
    free(s);
    ir_attrs_free(&a);

    attrs_from(&a, "name=7");
    assert_int_equal(ir_spec_normalize(spec, "sgd", &a, err, sizeof err), -1);
    assert_string_equal(err, "argument 'name' of sgd must be a name");
    ir_attrs_free(&a);

    ir_attr_spec e[8];
    assert_int_equal(ir_spec_parse(spec, e, 8), 4);
    assert_string_equal(e[0].name, "lr");
    assert_string_equal(e[0].type, "float");
    assert_string_equal(e[0].dflt, "0.01");
    assert_string_equal(e[3].name, "name");
    assert_string_equal(e[3].dflt, "?");
}

/* ---- the verifier ---- */

typedef struct small_graph {
    ir_graph *g;
    int x, a, b; /* x -> relu -> a -> tanh -> b */
} small_graph;

static small_graph small_graph_new(void)
{
    small_graph s;
    s.g = ir_graph_new("v");
    ir_type t = type_of("f32[2,4]");
    s.x = ir_declare(s.g, IR_VAL_INPUT, "x", &t, (kl_loc){1, 1});
    s.a = ir_emit1(s.g, IR_OP_RELU, s.x, "a");
    s.b = ir_emit1(s.g, IR_OP_TANH, s.a, "b");
    return s;
}

/* Runs the verifier; returns what it printed (caller frees). */
static char *verify_output(const ir_graph *g, int want_rc)
{
    capture c;
    capture_start(&c);
    int rc = ir_verify(g);
    char *out = capture_end(&c);
    if (rc != want_rc)
        fail_msg("ir_verify returned %d, expected %d; it printed:\n%s", rc, want_rc, out);
    return out;
}

static void test_verify_clean(void **state)
{
    (void)state;
    small_graph s = small_graph_new();
    char *out = verify_output(s.g, 0);
    assert_string_equal(out, "");
    free(out);
    ir_graph_free(s.g);
}

static void test_verify_use_before_def(void **state)
{
    (void)state;
    small_graph s = small_graph_new();
    /* relu now reads tanh's result, which is defined after it. */
    ir_set_operand(s.g, ir_nd(s.g, 0), 0, s.b);
    char *out = verify_output(s.g, -1);
    assert_string_equal(out, "kiln: verifier: graph v: node 0 (relu) reads %b before it is defined\n");
    free(out);
    ir_graph_free(s.g);
}

static void test_verify_wrong_type(void **state)
{
    (void)state;
    small_graph s = small_graph_new();
    ir_val(s.g, s.a)->type = type_of("f32[2,5]");
    char *out = verify_output(s.g, -1);
    assert_string_equal(out, "kiln: verifier: graph v: node 0 (relu): %a is f32[2,5] but the rule gives f32[2,4]\n"
                             "kiln: verifier: graph v: node 1 (tanh): %b is f32[2,4] but the rule gives f32[2,5]\n");
    free(out);
    ir_graph_free(s.g);
}

static void test_verify_rule_error(void **state)
{
    (void)state;
    small_graph s = small_graph_new();
    ir_val(s.g, s.x)->type = type_of("i32[2,4]");
    ir_val(s.g, s.a)->type = type_of("i32[2,4]");
    char *out = verify_output(s.g, -1);
    assert_string_equal(out, "kiln: verifier: graph v: node 0 (relu): relu needs a floating-point operand, got i32 "
                             "(cast it with f32(...))\n"
                             "kiln: verifier: graph v: node 1 (tanh): tanh needs a floating-point operand, got i32 "
                             "(cast it with f32(...))\n");
    free(out);
    ir_graph_free(s.g);
}

static void test_verify_stale_use(void **state)
{
    (void)state;
    small_graph s = small_graph_new();
    /* x claims node 1 reads it, but node 1 reads a. */
    ir_use u = {1, 0};
    kl_vec_push(ir_val(s.g, s.x)->uses, u);
    char *out = verify_output(s.g, -1);
    assert_string_equal(out, "kiln: verifier: graph v: %x has a stale use (node 1, operand 0)\n");
    free(out);
    ir_graph_free(s.g);
}

static void test_verify_missing_use(void **state)
{
    (void)state;
    small_graph s = small_graph_new();
    ir_val(s.g, s.a)->uses.n = 0;
    char *out = verify_output(s.g, -1);
    assert_string_equal(out, "kiln: verifier: graph v: node 1 (tanh): %a misses the use of operand 0\n");
    free(out);
    ir_graph_free(s.g);
}

static void test_verify_mutated_temporary(void **state)
{
    (void)state;
    ir_graph *g = ir_graph_new("bn");
    ir_type x4 = type_of("f32[2,4]"), c4 = type_of("f32[4]");
    int x = ir_declare(g, IR_VAL_INPUT, "x", &x4, (kl_loc){0, 0});
    int gamma = ir_declare(g, IR_VAL_PARAM, "gamma", &c4, (kl_loc){0, 0});
    int beta = ir_declare(g, IR_VAL_PARAM, "beta", &c4, (kl_loc){0, 0});
    int var = ir_declare(g, IR_VAL_STATE, "var", &c4, (kl_loc){0, 0});
    /* The running mean is computed, so batchnorm would update a temporary. */
    int mean = ir_emit1(g, IR_OP_RELU, beta, "mean");
    int in[5] = {x, gamma, beta, mean, var};
    ir_emit(g, IR_OP_BATCHNORM, in, 5, NULL, "y");
    char *out = verify_output(g, -1);
    assert_string_equal(out, "kiln: verifier: graph bn: node 1 (batchnorm) writes %mean in place, which is not persistent\n");
    free(out);
    /* With a declared running mean the same graph is fine. */
    int state_mean = ir_declare(g, IR_VAL_STATE, "running_mean", &c4, (kl_loc){0, 0});
    ir_set_operand(g, ir_nd(g, 1), 3, state_mean);
    out = verify_output(g, 0);
    assert_string_equal(out, "");
    free(out);
    ir_graph_free(g);
}

static void test_verify_duplicate_name_and_dead_def(void **state)
{
    (void)state;
    small_graph s = small_graph_new();
    free(ir_val(s.g, s.b)->name);
    ir_val(s.g, s.b)->name = kl_xstrdup("a");
    ir_nd(s.g, 0)->dead = true; /* a's definition is gone, its reader is not */
    char *out = verify_output(s.g, -1);
    assert_string_equal(out, "kiln: verifier: graph v: %x has a stale use (node 0, operand 0)\n"
                             "kiln: verifier: graph v: %a: its defining node 0 does not list it\n"
                             "kiln: verifier: graph v: two values are named %a, or the name index misses it\n"
                             "kiln: verifier: graph v: node 1 (tanh) reads %a before it is defined\n");
    free(out);
    ir_graph_free(s.g);
}

/* ---- compaction ---- */

static void test_compact(void **state)
{
    (void)state;
    ir_graph *g = ir_graph_new("c");
    ir_type t = type_of("f32[2,3]"), tp = type_of("f32[3]");
    int x = ir_declare(g, IR_VAL_INPUT, "x", &t, (kl_loc){0, 0});
    int p = ir_declare(g, IR_VAL_PARAM, "p", &tp, (kl_loc){0, 0});
    int a = ir_emit1(g, IR_OP_RELU, x, "a");
    int b = ir_emit1(g, IR_OP_TANH, a, "b");
    int c = ir_emit1(g, IR_OP_EXP, x, "c");
    int d = ir_emit2(g, IR_OP_ADD, c, p, "d");
    int e = ir_emit1(g, IR_OP_SUM, d, "e");
    int unused = ir_declare(g, IR_VAL_STATE, "unused", &tp, (kl_loc){0, 0});
    g->loss = e;
    ir_report r = {kl_xstrdup("total"), d, false};
    kl_vec_push(g->reports, r);
    assert_int_equal(ir_verify(g), 0);

    /* Kill tanh, then relu (whose only reader was tanh). */
    ir_kill_node(g, ir_nd(g, ir_val(g, b)->def));
    assert_int_equal(ir_val(g, a)->uses.n, 0);
    ir_kill_node(g, ir_nd(g, ir_val(g, a)->def));
    assert_int_equal(ir_val(g, x)->uses.n, 1);
    ir_kill_node(g, ir_nd(g, ir_val(g, a)->def)); /* killing twice is harmless */
    /* The results of killed nodes linger until compaction, and the
     * verifier says so: passes compact before it runs. */
    char *out = verify_output(g, -1);
    assert_string_equal(out, "kiln: verifier: graph c: %a: its defining node 0 does not list it\n"
                             "kiln: verifier: graph c: %b: its defining node 1 does not list it\n");
    free(out);
    ir_compact(g);
    assert_int_equal(ir_verify(g), 0);

    assert_int_equal(g->nodes.n, 3);
    assert_int_equal(g->values.n, 6);
    static const char *const names[] = {"x", "p", "c", "d", "e", "unused"};
    for (int i = 0; i < g->values.n; i++) {
        assert_int_equal(ir_val(g, i)->id, i);
        assert_string_equal(ir_val(g, i)->name, names[i]);
    }
    static const ir_op ops[] = {IR_OP_EXP, IR_OP_ADD, IR_OP_SUM};
    for (int i = 0; i < g->nodes.n; i++) {
        assert_int_equal(ir_nd(g, i)->id, i);
        assert_int_equal(ir_nd(g, i)->op, ops[i]);
        assert_false(ir_nd(g, i)->dead);
    }
    assert_int_equal(g->decls.n, 3);
    assert_int_equal(g->decls.v[0], 0);
    assert_int_equal(g->decls.v[1], 1);
    assert_int_equal(g->decls.v[2], 5);
    assert_int_equal(g->loss, 4);
    assert_int_equal(g->reports.v[0].value, 3);
    assert_int_equal(ir_val(g, 2)->def, 0); /* c is made by node 0 now */
    assert_int_equal(ir_val(g, 4)->def, 2);
    /* Use lists point at the new node numbers. */
    assert_int_equal(ir_val(g, 0)->uses.n, 1);
    assert_int_equal(ir_val(g, 0)->uses.v[0].node, 0);
    assert_int_equal(ir_val(g, 1)->uses.n, 1);
    assert_int_equal(ir_val(g, 1)->uses.v[0].node, 1);
    assert_int_equal(ir_val(g, 1)->uses.v[0].operand, 1);
    assert_int_equal(ir_val(g, 3)->uses.v[0].node, 2);
    (void)unused;

    char *text = ir_print(g);
    assert_string_equal(text, "graph c {\n"
                              "  input %x : f32[2,3]\n"
                              "  param %p : f32[3]\n"
                              "  state %unused : f32[3]\n"
                              "  %c : f32[2,3] = exp(%x)\n"
                              "  %d : f32[2,3] = add(%c, %p)\n"
                              "  %e : f32[] = sum(%d) {axis = [0, 1], keepdim = 0}\n"
                              "  loss %e\n"
                              "  report total = %d\n"
                              "}\n");
    free(text);

    /* A compacted graph keeps growing normally. */
    int f = ir_emit1(g, IR_OP_NEG, g->loss, NULL); /* e is value 4 now */
    assert_int_equal(f, 6);
    assert_string_equal(ir_val(g, f)->name, "t6");
    assert_int_equal(ir_verify(g), 0);
    ir_graph_free(g);
}

/* ---- the op row ---- */

/* What the rows say about views, pointwise ops, written operands, bodies
 * and gradient rules: known values, and the rules every row keeps. */
static void test_op_rows(void **state)
{
    (void)state;
    assert_true(ir_op_is_view(IR_OP_RESHAPE) && ir_op_is_view(IR_OP_FLATTEN));
    assert_false(ir_op_is_view(IR_OP_BROADCAST) || ir_op_is_view(IR_OP_TRANSPOSE) || ir_op_is_view(IR_OP_ADD));
    assert_true(ir_op_is_pointwise(IR_OP_BROADCAST) && ir_op_is_pointwise(IR_OP_DROPOUT) &&
                ir_op_is_pointwise(IR_OP_RELU_GRAD) && ir_op_is_pointwise(IR_OP_CAST));
    assert_false(ir_op_is_pointwise(IR_OP_CONST) || ir_op_is_pointwise(IR_OP_SUM) || ir_op_is_pointwise(IR_OP_RESHAPE));
    static const struct {
        ir_op op;
        unsigned writes; /* operands 0..7 */
    } writes[] = {
        {IR_OP_BATCHNORM, 0x18},    {IR_OP_SGD_UPDATE, 0x31}, {IR_OP_ADAM_UPDATE, 0x71},
        {IR_OP_GRAD_ACCUMULATE, 0x1}, {IR_OP_ADD, 0},         {IR_OP_BATCHNORM_INFER, 0},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(writes); i++)
        for (int k = 0; k < 8; k++)
            assert_int_equal(ir_op_mutates(writes[i].op, k), (writes[i].writes >> k) & 1);
    assert_false(ir_op_mutates(IR_OP_SGD_UPDATE, 40));
    assert_non_null(ir_grad_rule(IR_OP_ADD));
    assert_null(ir_grad_rule(IR_OP_GE));
    assert_ptr_equal(ir_grad_rule(IR_OP_RESHAPE), ir_grad_rule(IR_OP_FLATTEN));
    for (int op = 0; op < IR_NOPS; op++) {
        const ir_op_info *r = &ir_ops[op];
        /* Every elementwise op is pointwise; a body exactly for the
         * pointwise ops and the folded constant. */
        if (r->kclass == IR_KC_ELEMWISE)
            assert_true(ir_op_is_pointwise(op));
        assert_int_equal(cg_has_body(op), ir_op_is_pointwise(op) || r->kclass == IR_KC_SOURCE);
        /* A view has one operand and one result, and writes nothing. */
        if (ir_op_is_view(op))
            assert_true(r->min_in == 1 && r->max_in == 1 && r->nout == 1 && !r->writes && !ir_op_is_pointwise(op));
        /* Written operands exist, and their op has no result to put in one. */
        if (r->writes) {
            assert_true(r->max_in > 0 && r->writes < (1u << r->max_in));
            assert_false(r->flags & IR_F_INPLACE);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broadcast_table),
        cmocka_unit_test(test_rules_elementwise),
        cmocka_unit_test(test_rules_gemm_conv),
        cmocka_unit_test(test_rules_movement),
        cmocka_unit_test(test_rules_reductions_losses),
        cmocka_unit_test(test_rules_norm_dropout),
        cmocka_unit_test(test_attrs_normalize),
        cmocka_unit_test(test_spec_normalize),
        cmocka_unit_test(test_verify_clean),
        cmocka_unit_test(test_verify_use_before_def),
        cmocka_unit_test(test_verify_wrong_type),
        cmocka_unit_test(test_verify_rule_error),
        cmocka_unit_test(test_verify_stale_use),
        cmocka_unit_test(test_verify_missing_use),
        cmocka_unit_test(test_verify_mutated_temporary),
        cmocka_unit_test(test_verify_duplicate_name_and_dead_def),
        cmocka_unit_test(test_compact),
        cmocka_unit_test(test_op_rows),
    };
    return cmocka_run_group_tests_name("ir", tests, NULL, NULL);
}
