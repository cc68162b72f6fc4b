/* Unit tests of the IR's text form: a graph printed and parsed back
 * unchanged, the parser's refusals, and numbers printed exactly (they
 * read back to the same bits). Expected values are exact. */
#include "ir_fixture.h"

/* ---- the text form ---- */

static ir_attr_val call_val(const char *name, const char *args)
{
    ir_attr_val v = {.kind = IR_ATTR_CALL, .s = kl_xstrdup(name)};
    v.args = kl_xcalloc(1, sizeof *v.args);
    attrs_from(v.args, args);
    return v;
}

static const char round_trip_want[] =
    "graph built {\n"
    "  source \"dir/my \\\"model\\\".kl\"\n"
    "  passes lower\n"
    "  train {\n"
    "    batch = 8\n"
    "    optimizer = adamw(lr = 0.001, weight_decay = 0.0)\n"
    "    data = idx(path = \"/data/a b\")\n"
    "    recompute = [dense, conv]\n"
    "  }\n"
    "  input %image : u8[8,16] @3:3\n"
    "  input %label : i32[8]\n"
    "  param %dense.1.w : f32[16,10] {init = normal(mean = 0.0, std = 0.02), decay = 0} @5:3\n"
    "  state %count : f32[] {init = zeros, note = \"a \\\"quoted\\\"\\nline\\ttab\"}\n"
    "  %t4 : f32[8,16] = cast(%image) {to = f32} @7:8\n"
    "  %t5 : f32[] = const() {value = 1e-310, dtype = f32}\n"
    "  %t6 : f32[8,16] = mul(%t4, %t5)\n"
    "  %t7 : f32[] = const() {value = -inf, dtype = f32}\n"
    "  %t8 : f32[8,16] = maximum(%t6, %t7)\n"
    "  %logits : f32[8,10] = matmul(%t8, %dense.1.w) {transpose_a = 0, transpose_b = 0} @9:12 in dense.1 group 2 single\n"
    "  %drop : f32[8,10], %t11 : u8[8,10] = dropout(%logits) {p = 0.1, seed = 7} in dense.1\n"
    "  %loss : f32[] = cross_entropy(%drop, %label)\n"
    "  backward %t13 : f32[8,10] = neg(%drop) group 0 single\n"
    "  update %t14 : f32[] = sum(%t13) {axis = [0, 1], keepdim = 0}\n"
    "  loss %loss\n"
    "  report accuracy = %t14\n"
    "}\n";

static ir_graph *build_round_trip_graph(void)
{
    ir_graph *g = ir_graph_new("built");
    g->source = kl_xstrdup("dir/my \"model\".kl");
    ir_graph_mark_pass(g, "lower");
    ir_attrs_set_int(&g->train, "batch", 8);
    ir_attrs_set(&g->train, "optimizer", call_val("adamw", "lr=0.001; weight_decay=0.0"));
    ir_attr_val path = ir_attr_val_str("/data/a b");
    ir_attr_val data = {.kind = IR_ATTR_CALL, .s = kl_xstrdup("idx")};
    data.args = kl_xcalloc(1, sizeof *data.args);
    ir_attrs_set(data.args, "path", path);
    ir_attrs_set(&g->train, "data", data);
    ir_attr_val names = {.kind = IR_ATTR_LIST, .nitems = 2};
    names.items = kl_xcalloc(2, sizeof *names.items);
    names.items[0] = ir_attr_val_str("dense");
    names.items[1] = ir_attr_val_str("conv");
    ir_attrs_set(&g->train, "recompute", names);

    ir_type t_image = type_of("u8[8,16]"), t_label = type_of("i32[8]"), t_w = type_of("f32[16,10]");
    ir_type t_scalar = type_of("f32[]");
    int image = ir_declare(g, IR_VAL_INPUT, "image", &t_image, (kl_loc){3, 3});
    int label = ir_declare(g, IR_VAL_INPUT, "label", &t_label, (kl_loc){0, 0});
    int w = ir_declare(g, IR_VAL_PARAM, "dense.1.w", &t_w, (kl_loc){5, 3});
    ir_attrs_set(&ir_val(g, w)->attrs, "init", call_val("normal", "mean=0.0; std=0.02"));
    ir_attrs_set_int(&ir_val(g, w)->attrs, "decay", 0);
    int count = ir_declare(g, IR_VAL_STATE, "count", &t_scalar, (kl_loc){0, 0});
    ir_attrs_set_str(&ir_val(g, count)->attrs, "init", "zeros");
    ir_attrs_set_str(&ir_val(g, count)->attrs, "note", "a \"quoted\"\nline\ttab");

    ir_attrs a = {0};
    ir_attrs_set_str(&a, "to", "f32");
    int xf = ir_emit(g, IR_OP_CAST, &image, 1, &a, NULL);
    ir_attrs_free(&a);
    ir_nd(g, ir_val(g, xf)->def)->loc = (kl_loc){7, 8};
    int tiny = ir_emit_const(g, 1e-310, IR_F32); /* subnormal */
    int scaled = ir_emit2(g, IR_OP_MUL, xf, tiny, NULL);
    int ninf = ir_emit_const(g, -INFINITY, IR_F32);
    int clipped = ir_emit2(g, IR_OP_MAXIMUM, scaled, ninf, NULL);
    int logits = ir_emit2(g, IR_OP_MATMUL, clipped, w, "logits");
    ir_node *mm = ir_nd(g, ir_val(g, logits)->def);
    mm->loc = (kl_loc){9, 12};
    mm->scope = kl_xstrdup("dense.1");
    mm->group = 2;
    ir_attrs_set_float(&a, "p", 0.1);
    ir_attrs_set_int(&a, "seed", 7);
    int drop = ir_emit(g, IR_OP_DROPOUT, &logits, 1, &a, "drop");
    ir_attrs_free(&a);
    ir_nd(g, ir_val(g, drop)->def)->scope = kl_xstrdup("dense.1");
    g->loss = ir_emit2(g, IR_OP_CROSS_ENTROPY, drop, label, "loss");
    int back = ir_emit1(g, IR_OP_NEG, drop, NULL);
    ir_nd(g, ir_val(g, back)->def)->phase = IR_PHASE_BACKWARD;
    ir_nd(g, ir_val(g, back)->def)->group = 0;
    int total = ir_emit1(g, IR_OP_SUM, back, NULL);
    ir_nd(g, ir_val(g, total)->def)->phase = IR_PHASE_UPDATE;
    ir_report r = {kl_xstrdup("accuracy"), total, false};
    kl_vec_push(g->reports, r);
    return g;
}

static void test_print_parse_round_trip(void **state)
{
    (void)state;
    ir_graph *g = build_round_trip_graph();
    assert_int_equal(ir_verify(g), 0);
    char *text = ir_print(g);
    assert_string_equal(text, round_trip_want);

    kl_source src;
    kl_source_from_string(&src, "built.kir", text);
    ir_graph *h = ir_parse(&src);
    assert_non_null(h);
    assert_int_equal(ir_verify(h), 0);
    char *again = ir_print(h);
    assert_string_equal(again, text);

    /* The structure came back, not just the text. */
    assert_int_equal(h->values.n, g->values.n);
    assert_int_equal(h->nodes.n, g->nodes.n);
    assert_int_equal(h->decls.n, 4);
    assert_string_equal(ir_val(h, h->loss)->name, "loss");
    assert_int_equal(ir_val(h, ir_find_value(h, "count"))->kind, IR_VAL_STATE);
    const ir_node *mm = ir_nd(h, ir_val(h, ir_find_value(h, "logits"))->def);
    assert_int_equal(mm->op, IR_OP_MATMUL);
    assert_int_equal(mm->group, 2);
    assert_int_equal(mm->loc.line, 9);
    assert_string_equal(mm->scope, "dense.1");
    const ir_node *c = ir_nd(h, ir_val(h, ir_find_value(h, "t5"))->def);
    assert_true(ir_attr_float(&c->attrs, "value", 0) == 1e-310);
    assert_int_equal(ir_val(h, ir_find_value(h, "drop"))->uses.n, 2);
    assert_string_equal(ir_attr_str(&ir_val(h, ir_find_value(h, "count"))->attrs, "note", ""), "a \"quoted\"\nline\ttab");

    free(again);
    ir_graph_free(h);
    kl_source_free(&src);
    free(text);
    ir_graph_free(g);
}

static void test_parse_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want;
    } rows[] = {
        {"graph g {\n  input %x : f32[2]\n  %y : f32[3] = relu(%x)\n}\n",
         "t.kir:3:3: error: '%y' is written f32[3], but relu gives f32[2]\n    %y : f32[3] = relu(%x)\n    ^\n"},
        {"graph g {\n  %y : f32[] = const() {value = 1e999}\n}\n",
         "t.kir:2:33: error: malformed number\n    %y : f32[] = const() {value = 1e999}\n                                  ^\n"},
        {"graph g {\n  input %x : f32[0]\n}\n",
         "t.kir:2:18: error: dimension out of range\n    input %x : f32[0]\n                   ^\n"},
        {"graph g {\n  input %x : f32[2]\n  input %x : f32[2]\n}\n",
         "t.kir:3:9: error: '%x' is defined twice\n    input %x : f32[2]\n          ^\n"},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(rows); i++) {
        kl_source src;
        kl_source_from_string(&src, "t.kir", rows[i].text);
        capture c;
        capture_start(&c);
        ir_graph *g = ir_parse(&src);
        char *out = capture_end(&c);
        assert_null(g);
        assert_string_equal(out, rows[i].want);
        free(out);
        kl_source_free(&src);
    }
}

/* ---- numbers in the text form ---- */

static double from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static uint64_t to_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static char *double_text(double x)
{
    kl_buf b = {0};
    kl_buf_put_double(&b, x);
    return kl_buf_take(&b);
}

static void test_put_double(void **state)
{
    (void)state;
    static const struct {
        double x;
        const char *want;
    } rows[] = {
        {0.0, "0.0"},
        {-0.0, "-0.0"},
        {1.0, "1.0"},
        {-2.0, "-2.0"},
        {100.0, "100.0"},
        {0.1, "0.1"},
        {0.1 + 0.2, "0.30000000000000004"},
        {1.0 / 3.0, "0.3333333333333333"},
        {1e-5, "1e-05"},
        {1e16, "1e+16"},
        {123456789.0, "123456789.0"},
        {9007199254740993.0, "9007199254740992.0"}, /* 2^53 + 1 is not a double */
        {1.4142135623730951, "1.4142135623730951"},
        {5e-324, "4.94066e-324"},
        {2.2250738585072014e-308, "2.2250738585072014e-308"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {1.0 / 0.0, "inf"},
        {-1.0 / 0.0, "-inf"},
    };
    for (size_t i = 0; i < KL_ARRAY_LEN(rows); i++) {
        char *s = double_text(rows[i].x);
        assert_string_equal(s, rows[i].want);
        free(s);
    }
    char *s = double_text(NAN);
    assert_string_equal(s, "nan");
    free(s);

    /* Awkward values read back bit for bit and stay recognisably floats:
     * neighbours of powers of ten and two, subnormals, and a fixed
     * pseudo-random sweep over every exponent. */
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 20000; i++) {
        double x;
        if (i < 600) {
            double base = i % 3 == 0 ? pow(10, i / 3 - 100) : ldexp(1.0, i / 3 - 100);
            x = i % 3 == 2 ? nextafter(base, 0) : nextafter(base, INFINITY);
        } else if (i < 700) {
            x = from_bits((uint64_t)(i - 600) * 0x0000123456789abcull % 0x000fffffffffffffull + 1); /* subnormal */
        } else {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            x = from_bits(seed);
            if (!isfinite(x))
                continue;
        }
        s = double_text(x);
        if (to_bits(strtod(s, NULL)) != to_bits(x))
            fail_msg("%.17g printed as %s, which reads back as %.17g", x, s, strtod(s, NULL));
        if (!strpbrk(s, ".en"))
            fail_msg("%s does not read back as a float", s);
        free(s);
    }
}

/* A number written by the printer also parses back through the IR reader
 * to the same bits, subnormals included (strtod flags them ERANGE). */
static void test_put_double_through_parser(void **state)
{
    (void)state;
    const double xs[] = {5e-324, 1e-310, 2.2250738585072009e-308, 1e-300, 0.1, 6.02214076e23, -1.5e-320};
    for (size_t i = 0; i < KL_ARRAY_LEN(xs); i++) {
        char *num = double_text(xs[i]);
        char *text = kl_xasprintf("graph g {\n  %%c : f32[] = const() {value = %s}\n}\n", num);
        kl_source src;
        kl_source_from_string(&src, "n.kir", text);
        ir_graph *g = ir_parse(&src);
        if (!g)
            fail_msg("%s does not parse back", num);
        double back = ir_attr_float(&ir_nd(g, 0)->attrs, "value", 0);
        assert_true(to_bits(back) == to_bits(xs[i]));
        ir_graph_free(g);
        kl_source_free(&src);
        free(text);
        free(num);
    }
}

/* One JSON string writer for every JSON output (manifests, safetensors
 * headers, config records, doctor, plan, bench): quotes and backslashes
 * escaped, every control byte as \\u00XX, bytes >= 0x80 as they are. */
static void test_put_json_str(void **state)
{
    (void)state;
    static const struct {
        const char *s, *want;
    } rows[] = {
        {"", "\"\""},
        {NULL, "\"\""},
        {"plain name", "\"plain name\""},
        {"a\"b\\c", "\"a\\\"b\\\\c\""},
        {"\x1b[31mred\n\t", "\"\\u001b[31mred\\u000a\\u0009\""},
        {"\x7f\xc3\xa9", "\"\x7f\xc3\xa9\""},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        kl_buf b = {0};
        kl_buf_put_json_str(&b, rows[i].s);
        assert_string_equal(b.s, rows[i].want);
        kl_buf_free(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_print_parse_round_trip),
        cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_put_double),
        cmocka_unit_test(test_put_double_through_parser),
        cmocka_unit_test(test_put_json_str),
    };
    return cmocka_run_group_tests_name("ir_text", tests, NULL, NULL);
}
