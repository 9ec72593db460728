/* main.c — the tlm command: dispatches to the subcommands. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tlm/plot.h"
#include "tlm/tuning.h"

/* the plot kinds of the registry (plot.h), comma-separated, in lines of at most 100 columns indented
 * under the commands' descriptions */
static void list_plot_kinds(char *out, size_t size) {
    size_t used = (size_t)snprintf(out, size, "            "), line = 12;
    for (int i = 0; i < tlm_plot_num_kinds() && used < size; i++) {
        const char *name = tlm_plot_kind_at(i)->name;
        const bool wrap = i > 0 && line + 2 + strlen(name) > 100;
        const int n = snprintf(out + used, size - used, "%s%s", i == 0 ? "" : wrap ? ",\n            " : ", ", name);
        used += (size_t)n;
        line = wrap ? 12 + strlen(name) : line + (size_t)n;
    }
    if (used < size) snprintf(out + used, size - used, "\n");
}

static void usage(FILE *f) {
    char plot_kinds[512];
    list_plot_kinds(plot_kinds, sizeof plot_kinds);
    fprintf(f,
            "tlm %s: Transformer language-model training, benchmarking and profiling (CS336 model)\n"
            "\n"
            "Usage: tlm <command> [options]    (tlm <command> --help for its options and defaults)\n"
            "\n"
            "Commands:\n"
            "  bench     end-to-end benchmark: forward, backward and AdamW step times, tokens/s,\n"
            "            TFLOP/s and peak memory for model sizes x context lengths\n"
            "  train     train the model on a token file (CS336 recipe: AdamW, cosine schedule, clipping),\n"
            "            with validation, checkpoints that resume exactly, and a loss log\n"
            "  step      one forward/backward on given weights and data, writing logits, loss,\n"
            "            gradients (and the weights after N AdamW steps): compare with PyTorch\n"
            "  generate  text from a trained model (a checkpoint or weights file): a KV cache, greedy or\n"
            "            temperature and top-p sampling; prints the text, time to first token and tokens/s\n"
            "  compare   relative error between two .safetensors or .npy files, tensor by tensor\n"
            "  attention the attention benchmark: naive vs FlashAttention-2 forward/backward ms, TFLOP/s,\n"
            "            memory before backward, over batch x heads x seq x d_head (CS336 suites as presets)\n"
            "  allreduce the all-reduce benchmark under mpirun/srun: NCCL on GPUs, MPI on CPUs (nccl-tests' busbw)\n"
            "  profile   where a step's time goes: kernels per phase, layer and op, roofline, findings;\n"
            "            --exec -- CMD profiles another CUDA program (the PyTorch peer) the same way\n"
            "  memory    where every byte goes over a step: peaks by category and phase, the largest\n"
            "            allocations and their lifetimes, a timeline (JSON) and a PyTorch memory_viz snapshot\n"
            "  plot      draws tlm's JSON results as PNG and SVG with gnuplot; its kinds:\n"
            "%s"
            "  precision the mixed-precision experiments: accumulate (0.01 added 1000 times in fp32,\n"
            "            fp16, bf16), autocast (the ToyModel's dtypes), layernorm (LayerNorm in fp16/bf16)\n"
            "  knobs     the TLM_* environment variables tlm reads, their defaults and values now\n"
            "\n"
            "Options:\n"
            "  -h, --help      this text\n"
            "  -V, --version   version and build (CUDA backend built or not)\n"
            "\n"
            "Models (--model): %s (CS336 Assignment 2's sizes).\n"
            "Devices (--device): cpu (always), cuda (when built with nvcc and a GPU is present).\n",
            TLM_VERSION, plot_kinds, tlm_config_preset_names());
}

/* a report on standard output not wholly written (a full disk: "No space left on device") fails the
 * command, naming why, instead of exiting 0 with the report lost */
static int stdout_written(int rc) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
    int err = errno;
    /* stdio keeps no errno of a write that failed earlier: a newline written straight to the descriptor
     * (the output is cut short already) tells a full disk (ENOSPC) from other failures */
    if (!err) err = write(STDOUT_FILENO, "\n", 1) < 0 ? errno : EIO;
    fprintf(stderr, "tlm: writing the standard output: %s\n", strerror(err));
    return rc != TLM_EXIT_OK ? rc : TLM_EXIT_FAILURE;
}

int main(int argc, char **argv) {
#define SUBCOMMAND(name) {#name, cmd_##name},
    static const cli_subcommand commands[] = {CLI_SUBCOMMANDS(SUBCOMMAND)};
#undef SUBCOMMAND
    if (tlm_tuning_init() != TLM_OK) { /* a bad TLM_* value is refused before any work */
        fprintf(stderr, "tlm: %s (tlm knobs lists them)\n", tlm_last_error());
        return TLM_EXIT_USAGE;
    }
    if (argc >= 2 && (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0)) {
#ifdef TLM_HAVE_CUDA
        const char *cuda = "CUDA backend built";
#else
        const char *cuda = "built without CUDA";
#endif
        printf("tlm %s (%s; GPU %s)\n", TLM_VERSION, cuda, tlm_cuda_available() ? "present" : "not found");
        return stdout_written(TLM_EXIT_OK);
    }
    return stdout_written(cli_run_subcommand("tlm", "command", argc, argv, commands,
                                             (int)(sizeof commands / sizeof commands[0]), usage));
}
