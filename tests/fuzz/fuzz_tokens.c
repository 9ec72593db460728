/* fuzz_tokens.c — libFuzzer harness of tlm_tokens_load. The input's first byte chooses the file's
 * kind (bit 0: a raw uint16 ".bin", else ".npy") and vocab_size (bits 1..: 1, 2, 256, 50257 or
 * INT_MAX); the rest is the file. On success every id must lie in [0, vocab_size), the count must
 * fit the file, and get_batch must draw from it. On failure: a message naming the file. */
#include <limits.h>

#include "fuzz_common.h"
#include "tlm/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const int vocabs[] = {1, 2, 256, 50257, INT_MAX};
    const int vocab = vocabs[(data[0] >> 1) % 5];
    const char *path = fuzz_write_input(data + 1, size - 1, data[0] & 1 ? ".bin" : ".npy");
    tlm_tokens t;
    if (tlm_tokens_load(path, vocab, &t) != TLM_OK) {
        fuzz_require_message(path);
        fuzz_require(t.ids == NULL && t.n == 0);
        return 0;
    }
    fuzz_require(t.n >= 0 && (uint64_t)t.n <= size - 1 && t.ids != NULL);
    for (int64_t i = 0; i < t.n; i++) fuzz_require(t.ids[i] >= 0 && t.ids[i] < vocab);
    enum { B = 2, T = 4 };
    int32_t in[B * T], tg[B * T];
    const tlm_status s = tlm_tokens_get_batch(&t, B, T, (tlm_batch_draw){size, 0, 0, 1}, in, tg);
    fuzz_require(t.n >= T + 1 ? s == TLM_OK : s == TLM_ERR_INVALID_ARGUMENT);
    if (s == TLM_OK)
        for (int i = 0; i < B * T; i++) fuzz_require(in[i] >= 0 && in[i] < vocab && tg[i] >= 0 && tg[i] < vocab);
    tlm_tokens_free(&t);
    return 0;
}
