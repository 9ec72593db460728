/* load.c — the model to generate with (generate.h): from a tlm train checkpoint (its reader,
 * train.h's tlm_checkpoint_open) or a weights file (model.h's tlm_weights_config and
 * tlm_model_load_from, as tlm step reads one). */
#include <stdio.h>
#include <stdlib.h>

#include "tlm/generate.h"
#include "tlm/train.h"

/* the config of a weights file: its metadata's, or its shapes' with the caller's num_heads */
static tlm_status weights_config(const tlm_generate_source *src, const tlm_safetensors *st, tlm_config *cfg) {
    bool from_meta = false;
    TLM_TRY(tlm_weights_config(st, src->weights, src->strip_prefix, src->num_heads, cfg, &from_meta));
    if (from_meta && src->num_heads && src->num_heads != cfg->num_heads)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "num_heads %d contradicts %s, whose model has num_heads %d",
                        src->num_heads, src->weights, cfg->num_heads);
    if (!cfg->num_heads)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "%s has no model config in its metadata (a PyTorch state dict?): give its num_heads "
                        "(--num-heads); the other sizes are read from its shapes", src->weights);
    return TLM_OK;
}

/* creates the model of cfg (the RoPE table's length overridden when asked) and loads st into it */
static tlm_status create_and_load(tlm_config *cfg, const tlm_generate_source *src, const tlm_run_config *run,
                                  tlm_backend *be, const tlm_safetensors *st, const char *path,
                                  const char *strip_prefix, tlm_model **out) {
    if (src->context_length > 0) cfg->context_length = src->context_length;
    TLM_TRY(tlm_config_validate(cfg));
    tlm_run_config r = *run;
    r.forward_only = true;
    r.cuda_graphs = false;
    tlm_model *m = NULL;
    tlm_status s = tlm_model_create(&m, cfg, &r, be);
    if (s == TLM_OK) s = tlm_model_load_from(m, st, path, strip_prefix, NULL);
    if (s != TLM_OK) {
        tlm_model_free(m);
        return s;
    }
    *out = m;
    return TLM_OK;
}

tlm_status tlm_generate_load(const tlm_generate_source *src, const tlm_run_config *run, tlm_backend *be,
                             tlm_model **out, tlm_config *cfg) {
    *out = NULL;
    if (!src->checkpoint == !src->weights)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "give the model: a checkpoint directory or a weights file (one)");
    if (src->checkpoint) {
        tlm_checkpoint ck;
        TLM_TRY(tlm_checkpoint_open(src->checkpoint, &ck));
        if (ck.warning[0]) fprintf(stderr, "tlm: warning: %s\n", ck.warning); /* one process: said here */
        *cfg = ck.model;
        char path[4200];
        snprintf(path, sizeof path, "%s/weights.safetensors", ck.dir);
        tlm_status s = create_and_load(cfg, src, run, be, &ck.weights, path, NULL, out);
        tlm_checkpoint_close(&ck);
        return s;
    }
    tlm_safetensors st;
    TLM_TRY(tlm_safetensors_read(src->weights, &st));
    tlm_status s = weights_config(src, &st, cfg);
    if (s == TLM_OK) s = create_and_load(cfg, src, run, be, &st, src->weights, src->strip_prefix, out);
    tlm_safetensors_free(&st);
    return s;
}
