/* fuzz_checkpoint.c — libFuzzer harness of tlm_checkpoint_open (train.h): the reading of a checkpoint
 * directory's `latest` pointer and its step directory's state.json. At start-up the harness trains a
 * tiny model two steps on the CPU and saves a real checkpoint, ROOT/step-00000002 (weights, AdamW's
 * moments, state.json version 2 with the data files' identities and the files' digests) and ROOT/latest,
 * under $TMPDIR (else /tmp)/tlm-fuzz-ck-<pid>. The input's first byte chooses what the rest is (bit 0):
 *   0: a state.json, written into ROOT/fuzz/ beside hard links to the saved weights and moments (so that
 *      the seeds' digests match: the start-up run is the same bits every time); opens ROOT/fuzz;
 *   1: ROOT/latest (the saved step directory stays valid); opens ROOT.
 * On success the fields must hold what the reader promises (step and log, recipe, model; a warning
 * exactly for version 1); on failure
 * a message naming the file. FUZZ_WRITE_SEEDS=DIR: write the saved state.json and latest as seeds
 * (with their first byte) into DIR and exit (make_corpus.py uses it). */
#include <limits.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "tlm/model.h"
#include "tlm/rng.h"
#include "tlm/train.h"

static char root[512], fuzz_dir[600], fuzz_state[640], latest[600];

static void die(const char *what) {
    fprintf(stderr, "fuzz_checkpoint: %s: %s\n", what, tlm_last_error());
    abort();
}

static void remove_root(void) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_checkpoint: cannot remove %s\n", root);
}

/* the tiny model trained two steps and saved into ROOT */
static void save_checkpoint(void) {
    tlm_backend *be = NULL;
    tlm_config cfg;
    tlm_model *m = NULL;
    tlm_backends_register_builtin();
    if (tlm_backend_create(&be, "cpu", 0, 1) != TLM_OK || tlm_config_preset("tiny", &cfg) != TLM_OK) die("backend");
    const tlm_run_config run = {.precision = TLM_PRECISION_FP32, .attention = TLM_ATTENTION_NAIVE};
    if (tlm_model_create(&m, &cfg, &run, be) != TLM_OK || tlm_model_init_random(m, 7) != TLM_OK) die("model");
    enum { N = 4096 };
    tlm_tokens data = {malloc(N * sizeof(int32_t)), N};
    uint64_t r = 1;
    for (int i = 0; i < N; i++) data.ids[i] = (int32_t)tlm_rng_below(&r, 256);
    tlm_train_config c = tlm_train_defaults(4);
    c.batch_size = 2;
    c.context_length = 8;
    c.eval_every = 2;
    c.eval_batches = 1;
    tlm_train t;
    if (tlm_train_init(&t, m, &c, &data, &data, 0, 1) != TLM_OK) die("train init");
    /* the identities a run records (identity.h), made up: the reader parses them, nothing compares them here */
    static const tlm_file_identity train_id = {16384, false, "0123456789abcdef0123456789abcdef"},
                                   val_id = {1 << 30, true, "fedcba9876543210fedcba9876543210"};
    t.train_data_id = &train_id;
    t.val_data_id = &val_id;
    for (int i = 0; i < 2; i++)
        if (tlm_train_step(&t, NULL) != TLM_OK) die("train step");
    double v;
    if (tlm_train_eval(&t, &v) != TLM_OK) die("eval");
    const tlm_train_sources src = {"train.bin", "val.bin", "tiny", 2};
    if (tlm_checkpoint_save(&t, &src, root, 0, NULL) != TLM_OK) die("save");
    tlm_train_free(&t);
    tlm_model_free(m);
    free(data.ids);
    tlm_backend_destroy(be);
}

static void copy_file(const char *from, const char *to, int mode) {
    FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
    if (!f || !g) abort();
    fputc(mode, g);
    for (int ch; (ch = fgetc(f)) != EOF;) fputc(ch, g);
    fclose(f);
    fclose(g);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(root, sizeof root, "%s/tlm-fuzz-ck-%d", fuzz_tmpdir(), (int)getpid());
    save_checkpoint();
    atexit(remove_root);
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/fuzz", root);
    snprintf(fuzz_state, sizeof fuzz_state, "%s/state.json", fuzz_dir);
    snprintf(latest, sizeof latest, "%s/latest", root);
    if (mkdir(fuzz_dir, 0700) != 0) die("the fuzzed step directory");
    static const char *const step_files[] = {"weights.safetensors", "optimizer.safetensors"};
    for (int i = 0; i < 2; i++) {
        char saved[700], link_to[700];
        snprintf(saved, sizeof saved, "%s/step-00000002/%s", root, step_files[i]);
        snprintf(link_to, sizeof link_to, "%s/%s", fuzz_dir, step_files[i]);
        if (link(saved, link_to) != 0) die("the fuzzed step directory");
    }
    const char *seeds = fuzz_seed_dir();
    if (seeds) {
        char state[700], out[700];
        snprintf(state, sizeof state, "%s/step-00000002/state.json", root);
        snprintf(out, sizeof out, "%s/state_step2.json", seeds);
        copy_file(state, out, 0);
        snprintf(out, sizeof out, "%s/latest_step2", seeds);
        copy_file(latest, out, 1);
        exit(0);
    }
    return 0;
}

static void write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const bool state_mode = !(data[0] & 1);
    const char *file = state_mode ? fuzz_state : latest, *dir = state_mode ? fuzz_dir : root;
    write_file(file, data + 1, size - 1);
    tlm_checkpoint ck;
    if (tlm_checkpoint_open(dir, &ck) != TLM_OK) {
        /* the message names the file it is about: the input, the step directory it names, or ROOT */
        fuzz_require_message(root);
        fuzz_require(ck.dir == NULL && ck.log == NULL && ck.weights.tensors == NULL);
        return 0;
    }
    fuzz_require(ck.dir != NULL && ck.step >= 0 && ck.log_len == ck.step && (ck.step == 0 || ck.log != NULL));
    for (int64_t i = 0; i < ck.log_len; i++) fuzz_require(ck.log[i].step == i + 1);
    fuzz_require(tlm_train_config_check(&ck.config) == TLM_OK);
    fuzz_require(ck.config.context_length <= ck.model.context_length && ck.model_name != NULL);
    fuzz_require(ck.train_data_path != NULL && ck.train_data_tokens >= 1);
    fuzz_require(ck.scaler.scale > 0 && ck.world_size >= 1 && ck.adamw_t >= 0);
    fuzz_require((ck.version == 1) == (ck.warning[0] != '\0') && ck.version >= 1 && ck.version <= 2);
    tlm_checkpoint_close(&ck);
    fuzz_require(ck.dir == NULL);
    return 0;
}
