/* model_io.c — the model's parameters and gradients to and from safetensors files with the
 * CS336 state-dict names (so PyTorch loads tlm's files and tlm loads PyTorch's). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "tlm/safetensors.h"
#include "tlm/util.h"

/* the NaN/Inf elements of x (n): how many, and the index of the first */
static size_t count_nonfinite(const float *x, size_t n, size_t *first) {
    size_t bad = 0;
    for (size_t i = n; i-- > 0;)
        if (!isfinite(x[i])) {
            bad++;
            *first = i;
        }
    return bad;
}

static tlm_status nonfinite(const char *what, const tlm_tensor_info *t, size_t bad, size_t first) {
    return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: tensor '%s' holds %zu NaN/Inf value%s (the first at element %zu)",
                    what, t->name, bad, bad == 1 ? "" : "s", first);
}

tlm_status tlm_model_check_finite(const tlm_model *m, const float *flat, const char *what) {
    size_t max_numel = 0;
    for (int i = 0; i < m->layout.num_tensors; i++)
        if (m->layout.tensors[i].numel > max_numel) max_numel = m->layout.tensors[i].numel;
    float *host = malloc(max_numel * sizeof(float));
    if (!host) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory checking %s", what);
    tlm_status s = TLM_OK;
    for (int i = 0; i < m->layout.num_tensors && s == TLM_OK; i++) {
        const tlm_tensor_info *t = &m->layout.tensors[i];
        size_t first = 0, bad;
        tlm_copy_to_host(m->backend, host, flat + t->offset, t->numel * sizeof(float));
        if ((bad = count_nonfinite(host, t->numel, &first))) s = nonfinite(what, t, bad, first);
    }
    free(host);
    return s;
}

static void format_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

/* ---- the config a file describes ----------------------------------------------------------------- */

/* The metadata keys of the config, in tlm_config order, and how each is read. */
enum { META_INT, META_DOUBLE, META_FLOAT };
static const struct {
    const char *key;
    int kind;
    size_t offset;
} config_keys[] = {
    {"vocab_size", META_INT, offsetof(tlm_config, vocab_size)},
    {"context_length", META_INT, offsetof(tlm_config, context_length)},
    {"d_model", META_INT, offsetof(tlm_config, d_model)},
    {"num_layers", META_INT, offsetof(tlm_config, num_layers)},
    {"num_heads", META_INT, offsetof(tlm_config, num_heads)},
    {"d_ff", META_INT, offsetof(tlm_config, d_ff)},
    {"rope_theta", META_DOUBLE, offsetof(tlm_config, rope_theta)},
    {"rmsnorm_eps", META_FLOAT, offsetof(tlm_config, rmsnorm_eps)},
};
#define NUM_CONFIG_KEYS (int)(sizeof config_keys / sizeof config_keys[0])

/* the file's name for a model tensor: strip_prefix + name */
static const tlm_st_tensor *find_prefixed(const tlm_safetensors *st, const char *strip_prefix, const char *name) {
    if (!strip_prefix || !*strip_prefix) return tlm_safetensors_find(st, name);
    char full[256];
    snprintf(full, sizeof full, "%s%s", strip_prefix, name);
    return tlm_safetensors_find(st, full);
}

static tlm_status config_from_metadata(const tlm_safetensors *st, const char *path, tlm_config *out) {
    tlm_config c = {0};
    for (int i = 0; i < NUM_CONFIG_KEYS; i++) {
        const char *text = tlm_safetensors_meta(st, config_keys[i].key);
        char *end = NULL;
        double v = text ? strtod(text, &end) : NAN;
        int64_t whole = 0;
        if (!text || end == text || *end || !isfinite(v) ||
            (config_keys[i].kind == META_INT && !tlm_double_to_int64(v, 1, 1 << 30, &whole)))
            return tlm_fail(TLM_ERR_FORMAT, "%s: metadata '%s' is %s%s%s: not a model config tlm can use", path,
                            config_keys[i].key, text ? "'" : "missing", text ? text : "", text ? "'" : "");
        char *field = (char *)&c + config_keys[i].offset;
        if (config_keys[i].kind == META_INT) *(int *)field = (int)whole;
        else if (config_keys[i].kind == META_DOUBLE) *(double *)field = v;
        else *(float *)field = (float)v;
    }
    if (tlm_config_validate(&c) != TLM_OK)
        return tlm_fail(TLM_ERR_FORMAT, "%s: the model config in its metadata: %s", path, tlm_last_error());
    *out = c;
    return TLM_OK;
}

tlm_status tlm_weights_config(const tlm_safetensors *st, const char *path, const char *strip_prefix, int num_heads,
                              tlm_config *out, bool *from_metadata) {
    *from_metadata = tlm_safetensors_meta(st, "d_model") != NULL;
    if (*from_metadata) return config_from_metadata(st, path, out);
    /* a state dict without tlm's metadata (PyTorch's): the shapes say all but num_heads */
    const tlm_st_tensor *emb = find_prefixed(st, strip_prefix, "token_embeddings.weight");
    const tlm_st_tensor *w1 = find_prefixed(st, strip_prefix, "layers.0.ffn.w1.weight");
    if (!emb && !strip_prefix && tlm_safetensors_find(st, "_orig_mod.token_embeddings.weight"))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: its tensor names carry torch.compile's prefix: load it with "
                                                  "--strip-prefix _orig_mod.", path);
    if (!emb || emb->ndim != 2 || !w1 || w1->ndim != 2)
        return tlm_fail(TLM_ERR_FORMAT, "%s: no model config in its metadata, and no 2-d %s to read the shapes "
                                        "from (CS336 state-dict names%s%s)", path,
                        !emb || emb->ndim != 2 ? "token_embeddings.weight" : "layers.0.ffn.w1.weight",
                        strip_prefix ? " after the prefix " : "", strip_prefix ? strip_prefix : "");
    int layers = 0;
    const size_t plen = strip_prefix ? strlen(strip_prefix) : 0;
    for (int i = 0; i < st->num_tensors; i++) {
        const char *name = st->tensors[i].name;
        if (plen && strncmp(name, strip_prefix, plen) == 0) name += plen;
        int l;
        if (sscanf(name, "layers.%d.", &l) == 1 && l >= 0 && l < 1 << 20 && l + 1 > layers) layers = l + 1;
    }
    if (emb->shape[0] > 1 << 30 || emb->shape[1] > 1 << 30 || w1->shape[0] > 1 << 30)
        return tlm_fail(TLM_ERR_FORMAT, "%s: tensor shapes too large for a model (vocab %lld, d_model %lld, d_ff %lld)",
                        path, (long long)emb->shape[0], (long long)emb->shape[1], (long long)w1->shape[0]);
    tlm_config c;
    TLM_TRY(tlm_config_preset("small", &c)); /* CS336's defaults for what the shapes do not say */
    c.vocab_size = (int)emb->shape[0];
    c.d_model = (int)emb->shape[1];
    c.d_ff = (int)w1->shape[0];
    c.num_layers = layers;
    c.num_heads = num_heads;
    *out = c;
    if (num_heads <= 0) return TLM_OK; /* the caller supplies it and validates */
    if (tlm_config_validate(&c) != TLM_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", tlm_last_error());
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: the model its shapes describe (vocab %d, d_model %d, d_ff %d, "
                                                  "%d layers) with %d heads: %s", path, c.vocab_size, c.d_model,
                        c.d_ff, layers, num_heads, why);
    }
    return TLM_OK;
}

/* ---- loading ------------------------------------------------------------------------------------------ */

tlm_status tlm_model_load_from(tlm_model *m, const tlm_safetensors *st, const char *path, const char *strip_prefix,
                               tlm_dtype *converted) {
    tlm_status s = TLM_OK;
    if (converted) *converted = TLM_DTYPE_F32;
    const size_t plen = strip_prefix ? strlen(strip_prefix) : 0;
    /* every file tensor must be one of the model's */
    for (int i = 0; i < st->num_tensors && s == TLM_OK; i++) {
        const char *name = st->tensors[i].name;
        if (plen && strncmp(name, strip_prefix, plen) == 0) name += plen;
        if (tlm_model_find_tensor(m, name) >= 0) continue;
        if (!plen && strncmp(name, "_orig_mod.", 10) == 0 && tlm_model_find_tensor(m, name + 10) >= 0)
            s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: tensor '%s' carries torch.compile's prefix: load it with "
                                                   "--strip-prefix _orig_mod.", path, st->tensors[i].name);
        else
            s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: unexpected tensor '%s': not a parameter of this model "
                                                   "(%d layers; names follow the CS336 state dict)",
                         path, st->tensors[i].name, m->config.num_layers);
    }
    size_t max_numel = 0;
    for (int i = 0; i < m->layout.num_tensors; i++)
        if (m->layout.tensors[i].numel > max_numel) max_numel = m->layout.tensors[i].numel;
    float *staging = s == TLM_OK ? malloc(max_numel * sizeof(float)) : NULL;
    if (s == TLM_OK && !staging) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory loading %s", path);
    /* two passes: every tensor checked (present, shaped, convertible, finite) before any is copied,
     * so that a refused file leaves the model as it was */
    for (int pass = 0; pass < 2 && s == TLM_OK; pass++)
        for (int i = 0; i < m->layout.num_tensors && s == TLM_OK; i++) {
            const tlm_tensor_info *t = &m->layout.tensors[i];
            const tlm_st_tensor *ft = find_prefixed(st, strip_prefix, t->name);
            if (!ft) {
                s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: missing tensor '%s%s'", path, plen ? strip_prefix : "",
                             t->name);
                break;
            }
            int same = ft->ndim == t->ndim;
            for (int d = 0; same && d < t->ndim; d++) same = ft->shape[d] == t->shape[d];
            if (!same) {
                char want[64], got[64];
                format_shape(want, sizeof want, t->ndim, t->shape);
                format_shape(got, sizeof got, ft->ndim, ft->shape);
                s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: tensor '%s' has shape %s but the model expects %s", path,
                             t->name, got, want);
                break;
            }
            if (converted && *converted == TLM_DTYPE_F32 && ft->dtype != TLM_DTYPE_F32) *converted = ft->dtype;
            s = tlm_st_tensor_to_f32(ft, staging);
            if (s != TLM_OK) {
                tlm_fail(s, "%s: tensor '%s': %s", path, t->name, tlm_last_error());
                break;
            }
            size_t first = 0, bad = pass == 0 ? count_nonfinite(staging, t->numel, &first) : 0;
            if (bad) s = nonfinite(path, t, bad, first);
            else if (pass == 1) tlm_copy_to_backend(m->backend, m->params + t->offset, staging, t->numel * sizeof(float));
        }
    free(staging);
    if (s == TLM_OK) m->step->params_lp_stale = true;
    return s;
}

tlm_status tlm_model_load(tlm_model *m, const char *path) {
    tlm_safetensors st;
    TLM_TRY(tlm_safetensors_read(path, &st));
    const tlm_status s = tlm_model_load_from(m, &st, path, NULL, NULL);
    tlm_safetensors_free(&st);
    return s;
}

/* Writes one flat buffer (params or grads) with the state-dict names, float32. */
static tlm_status save_flat(const tlm_model *m, const float *flat, float divide_by, const char *path,
                            const char *what) {
    if (!flat) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "no %s to save (run a backward pass first)", what);
    float *host = malloc(m->layout.flat_numel * sizeof(float));
    tlm_st_entry *entries = calloc((size_t)m->layout.num_tensors, sizeof *entries);
    if (!host || !entries) {
        free(host);
        free(entries);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory saving %s", path);
    }
    tlm_copy_to_host(m->backend, host, flat, m->layout.flat_numel * sizeof(float));
    if (divide_by != 1.0f)
        for (size_t i = 0; i < m->layout.flat_numel; i++) host[i] /= divide_by;
    tlm_status s = TLM_OK;
    for (int i = 0; i < m->layout.num_tensors && s == TLM_OK; i++) {
        const tlm_tensor_info *t = &m->layout.tensors[i];
        size_t first = 0, bad = count_nonfinite(host + t->offset, t->numel, &first);
        if (bad) s = nonfinite(what, t, bad, first); /* nothing is written */
        entries[i] = (tlm_st_entry){.name = t->name, .dtype = TLM_DTYPE_F32, .ndim = t->ndim,
                                    .data = host + t->offset};
        entries[i].shape[0] = t->shape[0];
        entries[i].shape[1] = t->shape[1];
    }
    /* the config, so the file says what model it is */
    char values[NUM_CONFIG_KEYS][32];
    tlm_st_meta meta[NUM_CONFIG_KEYS + 2];
    for (int i = 0; i < NUM_CONFIG_KEYS; i++) {
        const char *field = (const char *)&m->config + config_keys[i].offset;
        if (config_keys[i].kind == META_INT) snprintf(values[i], sizeof values[i], "%d", *(const int *)field);
        else if (config_keys[i].kind == META_DOUBLE) snprintf(values[i], sizeof values[i], "%.17g", *(const double *)field);
        else snprintf(values[i], sizeof values[i], "%.9g", (double)*(const float *)field);
        meta[i] = (tlm_st_meta){config_keys[i].key, values[i]};
    }
    meta[NUM_CONFIG_KEYS] = (tlm_st_meta){"content", what};
    meta[NUM_CONFIG_KEYS + 1] = (tlm_st_meta){"producer", "tlm " TLM_VERSION};
    if (s == TLM_OK) s = tlm_safetensors_write_meta(path, entries, m->layout.num_tensors, meta, NUM_CONFIG_KEYS + 2);
    free(entries);
    free(host);
    return s;
}

tlm_status tlm_model_save(const tlm_model *m, const char *path) {
    return save_flat(m, m->params, 1.0f, path, "parameters");
}

tlm_status tlm_model_save_grads(const tlm_model *m, const char *path) {
    return save_flat(m, m->grads, m->step->grads_scale / m->step->grads_clip, path, "gradients");
}
