/* cli_weights.c — the model a weights file holds (cli.h, cli_weights_config): its config from the file,
 * the flags and --model checked against it by name; shared by tlm step --weights and tlm train
 * --init-weights. */
#include <math.h>

#include "cli/cli.h"

bool cli_weights_option(cli_weights_file *w, int opt, const char *arg) {
    if (opt == CLI_OPT_WEIGHTS) w->path = arg;
    else if (opt == CLI_OPT_STRIP_PREFIX) w->strip_prefix = arg;
    else return false;
    return true;
}

bool cli_weights_config(const char *cmd, const cli_args *a, const cli_weights_file *w, const tlm_safetensors *st,
                        tlm_config *cfg) {
    const char *path = w->path;
    const char *model = a->num_models ? a->models[0] : "small";
    tlm_config preset;
    const bool have_preset = a->num_models && tlm_config_preset(model, &preset) == TLM_OK;
    bool from_meta;
    if (tlm_weights_config(st, path, w->strip_prefix, 0, cfg, &from_meta) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        return false;
    }
    if (!have_preset) preset = *cfg;
    /* every size given, by a flag or by --model, must be the file's (num_heads: only where the file
     * records it) */
    cli_size sizes[CLI_NUM_SIZES];
    cli_sizes(a, &preset, cfg, sizes);
    if (!from_meta) sizes[CLI_SIZE_NUM_HEADS].model = 0;
    for (int i = 0; i < CLI_NUM_SIZES; i++) {
        const cli_size *s = &sizes[i];
        const char *name = s->flag + 2; /* "d-model" */
        if (!s->model) continue;
        if (s->given != CLI_NOT_GIVEN && s->given != s->model) {
            cli_error(cmd, "%s %ld contradicts %s, whose model has %s %d", s->flag, s->given, path, name,
                      s->model);
            return false;
        }
        if (have_preset && s->given == CLI_NOT_GIVEN && s->preset != s->model) { /* a flag overrides --model */
            cli_error(cmd, "--model %s (%s %d) contradicts %s, whose model has %s %d: leave --model out to run the "
                           "file's model", model, name, s->preset, path, name, s->model);
            return false;
        }
    }
    if (!from_meta) { /* a PyTorch state dict: num_heads from the flag, or from the --model that matched */
        cfg->num_heads = a->shape.num_heads != CLI_NOT_GIVEN ? (int)a->shape.num_heads
                         : have_preset                       ? preset.num_heads
                                                             : 0;
        if (!cfg->num_heads) {
            cli_error(cmd, "%s has no model config in its metadata (a PyTorch state dict?): give --num-heads (or the "
                           "--model it is); the other sizes are read from its shapes", path);
            return false;
        }
    }
    if (!isnan(a->shape.rope_theta)) {
        if (from_meta && a->shape.rope_theta != cfg->rope_theta) {
            cli_error(cmd, "--rope-theta %g contradicts %s, whose model has rope_theta %g", a->shape.rope_theta,
                      path, cfg->rope_theta);
            return false;
        }
        cfg->rope_theta = a->shape.rope_theta;
    }
    /* the RoPE table's length is not a weight: the flag sets it */
    if (a->shape.max_context != CLI_NOT_GIVEN) cfg->context_length = (int)a->shape.max_context;
    if (tlm_config_validate(cfg) != TLM_OK) {
        cli_error(cmd, "%s: the model it holds%s: %s", path, from_meta ? "" : " with these flags",
                  tlm_last_error());
        return false;
    }
    return true;
}

bool cli_weights_open(const char *cmd, const cli_args *a, const cli_weights_file *w, tlm_safetensors *st,
                      tlm_config *cfg, char *display, size_t display_n) {
    if (tlm_safetensors_read(w->path, st) != TLM_OK) {
        cli_error(cmd, "%s", tlm_last_error());
        return false;
    }
    if (!cli_weights_config(cmd, a, w, st, cfg)) {
        tlm_safetensors_free(st);
        return false;
    }
    if (display) tlm_config_name(cfg, display, display_n);
    return true;
}
