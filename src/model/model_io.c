/* model_io.c — the model's parameters and gradients to and from safetensors files with the
 * CS336 state-dict names (so PyTorch loads tlm's files and tlm loads PyTorch's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "tlm/safetensors.h"

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

tlm_status tlm_model_load(tlm_model *m, const char *path) {
    tlm_safetensors st;
    TLM_TRY(tlm_safetensors_read(path, &st));
    tlm_status s = TLM_OK;
    /* every file tensor must be one of the model's */
    for (int i = 0; i < st.num_tensors && s == TLM_OK; i++)
        if (tlm_model_find_tensor(m, st.tensors[i].name) < 0)
            s = tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                         "%s: unexpected tensor '%s': not a parameter of this model "
                         "(%d layers; names follow the CS336 state dict)",
                         path, st.tensors[i].name, m->config.num_layers);
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
            const tlm_st_tensor *ft = tlm_safetensors_find(&st, t->name);
            if (!ft) {
                s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s: missing tensor '%s'", path, t->name);
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
    tlm_safetensors_free(&st);
    m->params_lp_stale = true;
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
    if (s == TLM_OK) s = tlm_safetensors_write(path, entries, m->layout.num_tensors);
    free(entries);
    free(host);
    return s;
}

tlm_status tlm_model_save(const tlm_model *m, const char *path) {
    return save_flat(m, m->params, 1.0f, path, "parameters");
}

tlm_status tlm_model_save_grads(const tlm_model *m, const char *path) {
    return save_flat(m, m->grads, m->grads_scale, path, "gradients");
}
