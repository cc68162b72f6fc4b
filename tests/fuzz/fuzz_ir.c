/* libFuzzer target for the IR text parser: bytes -> ir_parse; whatever the
 * parser accepts must pass the verifier (the parser has to reject anything
 * the verifier would), print, read back and print the same, and survive a
 * clone. Then the train block goes through its checks, as the kiln command
 * does with a dump, and a checked block must still round-trip. */
#include "ir/train_config.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    kl_source src;
    fuzz_source(&src, "fuzz.kir", data, size);
    ir_graph *g = ir_parse(&src);
    if (g) {
        kl_diag_set_stream(stderr);
        if (ir_verify(g))
            kl_panic("fuzz_ir: ir_parse accepted a graph that fails the verifier");
        fuzz_quiet();
        char *text = ir_print(g);
        fuzz_check_reprint(text, "fuzz_ir");
        ir_graph *c = ir_graph_clone(g);
        char *ctext = ir_print(c);
        if (strcmp(text, ctext))
            kl_panic("fuzz_ir: a clone prints differently from its graph");
        free(ctext);
        ir_graph_free(c);
        free(text);
        free(ir_print_dot(g));
        if (!kl_train_check(&g->train, &src)) {
            kl_train_config cfg;
            kl_train_read(&g->train, &cfg);
            kl_train_config_free(&cfg);
            text = ir_print(g);
            fuzz_check_reprint(text, "fuzz_ir (after the train check)");
            free(text);
        }
        ir_graph_free(g);
    }
    kl_source_free(&src);
    return 0;
}
