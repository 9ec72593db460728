/* fuzz_plot.c — libFuzzer harness of the readers of `tlm plot`: every kind of the registry
 * (plot.h), its JSON input read, checked and described (tlm_plot_describe: the data blocks and
 * gnuplot commands; gnuplot is not run). The input's first byte chooses the kind (byte % kinds)
 * and whether the kind gets the file twice (bit 4, for the kinds that merge several files, as
 * the all-reduce and data-parallel pictures do); the rest is the JSON file. On success the
 * description must be text with at least one command; on failure a message naming the file. */
#include "fuzz_common.h"
#include "tlm/plot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const tlm_plot_kind *k = tlm_plot_kind_at(data[0] % tlm_plot_num_kinds());
    fuzz_require(k != NULL);
    const char *path = fuzz_write_input(data + 1, size - 1, ".json");
    int n = (data[0] & 16) && k->max_inputs >= 2 ? 2 : 1;
    if (n < k->min_inputs) n = k->min_inputs;
    const char *inputs[2] = {path, path};
    char *script = NULL;
    if (tlm_plot_describe(k, inputs, n, &script) != TLM_OK) {
        fuzz_require_message(path);
        fuzz_require(script == NULL);
        return 0;
    }
    fuzz_require(script != NULL && strlen(script) > 0);
    free(script);
    return 0;
}
