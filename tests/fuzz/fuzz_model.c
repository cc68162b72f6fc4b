/* libFuzzer target for the model language: bytes -> parse -> lower ->
 * verify -> print, and the printed graph must read back and print the
 * same. kl_load_source aborts by itself when a lowered graph fails the
 * verifier. Input that starts with "graph" takes the IR dump path, as the
 * kiln command would. */
#include "frontend/lower.h"
#include "ir/train_config.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    kl_source src;
    fuzz_source(&src, "fuzz.kl", data, size);
    ir_graph *g = kl_load_source(&src, NULL);
    if (g) {
        kl_train_config cfg;
        kl_train_read(&g->train, &cfg);
        kl_train_config_free(&cfg);
        char *text = ir_print(g);
        fuzz_check_reprint(text, "fuzz_model");
        free(text);
        free(ir_print_dot(g));
        ir_graph_free(g);
    }
    kl_source_free(&src);
    return 0;
}
