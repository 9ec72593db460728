/* checkpoint.c — training checkpoints (train.h): a directory per save with the weights, AdamW's
 * moments and the run's state, written into a temporary directory, fsync'ed and renamed, and a
 * `latest` pointer replaced after it; and the reading back, every field and tensor checked. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/file.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "io/input.h"
#include "tlm/identity.h"
#include "tlm/output.h"
#include "tlm/train.h"
#include "tlm/util.h"

#define STATE_FORMAT "tlm-checkpoint"
#define STATE_VERSION 2 /* 2: the data files' identity and the step files' digests; 1 is still read */
#define STEP_PREFIX "step-"
#define TMP_PREFIX ".tmp-step-"
#define MAX_COUNT INT64_C(9000000000000000) /* a step or token count: exact in a double */
#define MAX_STATE_BYTES ((size_t)256 << 20) /* a step of the log takes about 220 bytes: over a million steps */

/* ---- files and directories ------------------------------------------------------------------------ */

static char *path_join(const char *a, const char *b) {
    char *p = NULL;
    return asprintf(&p, "%s/%s", a, b) < 0 ? NULL : p;
}

static tlm_status fsync_dir(const char *dir) {
    const int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        const int e = errno;
        if (fd >= 0) close(fd);
        return tlm_fail(TLM_ERR_IO, "%s: cannot fsync the directory: %s", dir, strerror(e));
    }
    close(fd);
    return TLM_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

/* removes a directory and everything in it (not following symbolic links) */
static int rm_rf(const char *path) { return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* step-NNNNNNNN: the step, or -1 for any other name */
static int64_t step_of_name(const char *name) {
    if (strncmp(name, STEP_PREFIX, strlen(STEP_PREFIX)) != 0) return -1;
    const char *d = name + strlen(STEP_PREFIX);
    if (!*d || strlen(d) > 18) return -1;
    for (const char *q = d; *q; q++)
        if (*q < '0' || *q > '9') return -1;
    return strtoll(d, NULL, 10);
}

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Removes the temporary directories of killed saves, and with keep > 0 the step directories older
 * than the newest `keep`, never the step `current` (the one `latest` names). Failures here lose
 * nothing: they are ignored. */
static void tidy_root(const char *root, int keep, int64_t current) {
    DIR *d = opendir(root);
    if (!d) return;
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0) {
            char *p = path_join(root, e->d_name);
            if (p) rm_rf(p);
            free(p);
            continue;
        }
        const int64_t s = step_of_name(e->d_name);
        if (s < 0 || keep <= 0) continue;
        if (n == cap) {
            int64_t *q = realloc(steps, (cap = cap ? 2 * cap : 64) * sizeof *q);
            if (!q) break;
            steps = q;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (keep > 0 && n > (size_t)keep) {
        qsort(steps, n, sizeof *steps, cmp_i64);
        for (size_t i = 0; i + (size_t)keep < n; i++) {
            if (steps[i] == current) continue;
            char name[64], *p;
            snprintf(name, sizeof name, STEP_PREFIX "%08lld", (long long)steps[i]);
            if ((p = path_join(root, name))) rm_rf(p);
            free(p);
        }
    }
    free(steps);
}

/* ---- writing ------------------------------------------------------------------------------------------ */

/* AdamW's moments whole on the host, m then v (2 x flat_numel floats; zeros before the first update): the
 * model's, or under ZeRO-1 gathered from every rank's shard (a collective: every rank calls it; rank 0 gets
 * *mv, the others NULL) */
static tlm_status moments_to_host(const tlm_train *t, float **mv) {
    const tlm_model *m = t->model;
    const size_t n = m->layout.flat_numel;
    const bool sharded = tlm_ddp_shards_optimizer(t->ddp);
    *mv = t->rank == 0 || !sharded ? calloc(2 * n, sizeof(float)) : NULL;
    tlm_status s = *mv || (sharded && t->rank != 0) ? TLM_OK
                   : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the AdamW moments (%zu bytes)",
                              2 * n * sizeof(float));
    if (sharded) s = tlm_ddp_gather_moments(t->ddp, 0, n, *mv, *mv ? *mv + n : NULL); /* every rank fails alike */
    else if (s == TLM_OK && m->optimizer.m) {
        tlm_copy_to_host(m->backend, *mv, m->optimizer.m, n * sizeof(float));
        tlm_copy_to_host(m->backend, *mv + n, m->optimizer.v, n * sizeof(float));
    }
    if (s != TLM_OK) {
        free(*mv);
        *mv = NULL;
    }
    return s;
}

/* AdamW's moments mv (moments_to_host's) as safetensors: exp_avg.<name>, exp_avg_sq.<name> */
static tlm_status save_optimizer(const tlm_model *m, const float *mv, const char *path) {
    const tlm_param_layout *l = &m->layout;
    const size_t n = l->flat_numel;
    tlm_st_entry *e = calloc(2 * (size_t)l->num_tensors, sizeof *e);
    char (*names)[80] = calloc(2 * (size_t)l->num_tensors, sizeof *names);
    if (!e || !names) {
        free(e);
        free(names);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < l->num_tensors; i++) {
            const tlm_tensor_info *t = &l->tensors[i];
            const int j = k * l->num_tensors + i;
            snprintf(names[j], sizeof names[j], "%s.%s", k ? "exp_avg_sq" : "exp_avg", t->name);
            e[j] = (tlm_st_entry){.name = names[j], .dtype = TLM_DTYPE_F32, .ndim = t->ndim,
                                  .data = mv + (size_t)k * n + t->offset};
            e[j].shape[0] = t->shape[0];
            e[j].shape[1] = t->shape[1];
        }
    char step[32];
    snprintf(step, sizeof step, "%d", m->optimizer.t);
    const tlm_st_meta meta[] = {{"step", step}, {"content", "adamw moments"}, {"producer", "tlm " TLM_VERSION}};
    const tlm_status s = tlm_safetensors_write_meta(path, e, 2 * l->num_tensors, meta, 3);
    free(names);
    free(e);
    return s;
}

/* a double that JSON can hold: finite as a number, else "inf", "-inf" or "nan" */
static cJSON *json_num(double v) {
    if (isfinite(v)) return cJSON_CreateNumber(v);
    return cJSON_CreateString(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

static cJSON *json_source(const char *path, const tlm_tokens *d, const tlm_file_identity *id) {
    if (!path || !d) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddNumberToObject(o, "tokens", (double)d->n);
    if (id) { /* identity.h: the size, whole or sampled, the hash */
        cJSON *i = cJSON_AddObjectToObject(o, "identity");
        cJSON_AddNumberToObject(i, "bytes", (double)id->bytes);
        cJSON_AddBoolToObject(i, "sampled", id->sampled);
        cJSON_AddStringToObject(i, "xxh3_128", id->hash);
    }
    return o;
}

/* the files of a step directory whose digests state.json records (XXH3-128 of their bytes as written) */
static const char *const step_files[2] = {"weights.safetensors", "optimizer.safetensors"};
typedef struct {
    char hex[2][33];
    uint64_t bytes[2];
} step_digests;

static char *state_json(const tlm_train *t, const tlm_train_sources *src, const step_digests *dg) {
    const tlm_model *m = t->model;
    const tlm_train_config *c = &t->config;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", STATE_FORMAT);
    cJSON_AddNumberToObject(root, "version", STATE_VERSION);
    cJSON_AddStringToObject(root, "producer", "tlm " TLM_VERSION);
    cJSON_AddNumberToObject(root, "step", (double)t->step);
    cJSON_AddNumberToObject(root, "tokens", (double)t->tokens);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
    cJSON *r = cJSON_AddObjectToObject(root, "recipe");
    cJSON_AddNumberToObject(r, "batch_size", c->batch_size);
    cJSON_AddNumberToObject(r, "grad_accum_steps", c->grad_accum_steps);
    cJSON_AddNumberToObject(r, "context_length", c->context_length);
    cJSON_AddNumberToObject(r, "steps", (double)c->steps);
    cJSON_AddStringToObject(r, "seed", seed); /* a string: JSON numbers hold 53 bits */
    cJSON_AddNumberToObject(r, "lr_max", c->lr_max);
    cJSON_AddNumberToObject(r, "lr_min", c->lr_min);
    cJSON_AddNumberToObject(r, "warmup_iters", (double)c->warmup_iters);
    cJSON_AddNumberToObject(r, "cosine_cycle_iters", (double)c->cosine_cycle_iters);
    cJSON_AddNumberToObject(r, "beta1", c->adamw.beta1);
    cJSON_AddNumberToObject(r, "beta2", c->adamw.beta2);
    cJSON_AddNumberToObject(r, "eps", c->adamw.eps);
    cJSON_AddNumberToObject(r, "weight_decay", c->adamw.weight_decay);
    cJSON_AddNumberToObject(r, "max_grad_norm", c->max_grad_norm);
    cJSON_AddNumberToObject(r, "eval_every", (double)c->eval_every);
    cJSON_AddNumberToObject(r, "eval_batches", c->eval_batches);
    cJSON_AddStringToObject(r, "precision", tlm_precision_name(m->run.precision));
    cJSON_AddStringToObject(r, "attention", tlm_attention_name(m->run.attention));
    cJSON_AddNumberToObject(r, "world_size", t->world_size);
    cJSON_AddItemToObject(r, "train_data", json_source(src->train_data_path, t->train_data, t->train_data_id));
    cJSON_AddItemToObject(r, "val_data", json_source(src->val_data_path, t->val_data, t->val_data_id));
    if (src->model_name) cJSON_AddStringToObject(r, "model", src->model_name);
    cJSON_AddNumberToObject(r, "save_every", (double)src->save_every);
    cJSON *files = cJSON_AddObjectToObject(root, "files");
    for (int i = 0; i < 2 && files; i++) {
        cJSON *f = cJSON_AddObjectToObject(files, step_files[i]);
        cJSON_AddNumberToObject(f, "bytes", (double)dg->bytes[i]);
        cJSON_AddStringToObject(f, "xxh3_128", dg->hex[i]);
    }
    cJSON *d = cJSON_AddObjectToObject(root, "data");
    cJSON_AddStringToObject(d, "seed", seed);
    cJSON_AddNumberToObject(d, "next_draw", (double)t->step);
    cJSON *o = cJSON_AddObjectToObject(root, "optimizer");
    cJSON_AddNumberToObject(o, "step", m->optimizer.t);
    cJSON *ls = cJSON_AddObjectToObject(root, "loss_scaler");
    cJSON_AddNumberToObject(ls, "scale", m->scaler.scale);
    cJSON_AddNumberToObject(ls, "growth_tracker", m->scaler.growth_tracker);
    cJSON_AddNumberToObject(ls, "skipped_steps", (double)m->scaler.skipped_steps);
    cJSON *log = cJSON_AddArrayToObject(root, "log");
    for (int64_t i = 0; i < t->log_len && log; i++) {
        const tlm_train_record *e = &t->log[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "step", (double)e->step);
        cJSON_AddNumberToObject(x, "tokens", (double)e->tokens);
        cJSON_AddItemToObject(x, "loss", json_num(e->loss));
        cJSON_AddItemToObject(x, "lr", json_num(e->lr));
        cJSON_AddItemToObject(x, "grad_norm", json_num(e->grad_norm));
        cJSON_AddBoolToObject(x, "clipped", e->clipped);
        cJSON_AddBoolToObject(x, "skipped", e->skipped);
        cJSON_AddNumberToObject(x, "loss_scale", e->loss_scale);
        cJSON_AddItemToObject(x, "val_loss", isnan(e->val_loss) ? cJSON_CreateNull() : json_num(e->val_loss));
        cJSON_AddItemToArray(log, x);
    }
    char *text = cJSON_Print(root); /* NULL when any allocation above failed */
    cJSON_Delete(root);
    return text;
}

/* the step directory's files and `latest`, under ROOT's lock (rank 0) */
static tlm_status save_files(const tlm_train *t, const tlm_train_sources *src, const float *mv, const char *root,
                             int keep, char **written) {
    if (mkdir(root, 0777) != 0 && errno != EEXIST)
        return tlm_fail(TLM_ERR_IO, "checkpoint directory %s: cannot create it: %s", root, strerror(errno));
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
        return tlm_fail(TLM_ERR_IO, "checkpoint directory %s: not a directory", root);
    /* one save at a time in ROOT (another run saving there waits): the temporaries tidied below are
     * then never a live save's; the lock goes with the process, killed or not */
    char *lock_path = path_join(root, ".lock");
    const int lock = lock_path ? open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666) : -1;
    free(lock_path);
    if (lock < 0 || flock(lock, LOCK_EX) != 0) {
        const int e = errno;
        if (lock >= 0) close(lock);
        return tlm_fail(TLM_ERR_IO, "checkpoint directory %s: cannot lock %s/.lock: %s", root, root, strerror(e));
    }
    tidy_root(root, 0, -1); /* temporaries of killed saves */
    char name[64];
    snprintf(name, sizeof name, STEP_PREFIX "%08lld", (long long)t->step);
    char *tmpl = path_join(root, TMP_PREFIX "XXXXXX"), *final = path_join(root, name), *old = NULL;
    char *weights = NULL, *optim = NULL, *state = NULL, *text = NULL;
    tlm_status s = TLM_OK;
    if (!tmpl || !final) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    else if (!mkdtemp(tmpl)) s = tlm_fail(TLM_ERR_IO, "%s: cannot create a temporary directory: %s", root, strerror(errno));
    bool made = s == TLM_OK;
    if (made) { /* mkdtemp made it 0700; a step directory gets the usual mode, as mkdir gives ROOT */
        const mode_t mask = umask(0);
        umask(mask);
        if (chmod(tmpl, 0777 & ~mask) != 0)
            s = tlm_fail(TLM_ERR_IO, "%s: cannot set its mode: %s", tmpl, strerror(errno));
    }
    if (s == TLM_OK) {
        weights = path_join(tmpl, "weights.safetensors");
        optim = path_join(tmpl, "optimizer.safetensors");
        state = path_join(tmpl, "state.json");
        if (!weights || !optim || !state) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    if (s == TLM_OK) s = tlm_model_save(t->model, weights);
    if (s == TLM_OK) s = save_optimizer(t->model, mv, optim);
    step_digests dg; /* a second pass over the files as written (from the page cache) */
    if (s == TLM_OK) s = tlm_file_digest(weights, dg.hex[0], &dg.bytes[0]);
    if (s == TLM_OK) s = tlm_file_digest(optim, dg.hex[1], &dg.bytes[1]);
    if (s == TLM_OK && !(text = state_json(t, src, &dg))) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    if (s == TLM_OK) s = tlm_output_write_file(state, text, strlen(text));
    if (s == TLM_OK) s = fsync_dir(tmpl);
    /* a step directory of this name from an earlier run (one resumed from before it) is replaced */
    if (s == TLM_OK && lstat(final, &st) == 0) {
        if (!(old = path_join(root, TMP_PREFIX "old-XXXXXX")) || !mkdtemp(old) || rename(final, old) != 0)
            s = tlm_fail(TLM_ERR_IO, "%s: cannot move the existing checkpoint aside: %s", final, strerror(errno));
    }
    if (s == TLM_OK && rename(tmpl, final) != 0)
        s = tlm_fail(TLM_ERR_IO, "%s: cannot rename %s to it: %s", final, tmpl, strerror(errno));
    if (s == TLM_OK) made = false; /* it is the checkpoint now */
    if (s == TLM_OK) s = fsync_dir(root);
    char *latest = s == TLM_OK ? path_join(root, "latest") : NULL;
    if (s == TLM_OK) {
        char line[80];
        const int len = snprintf(line, sizeof line, "%s\n", name);
        s = latest ? tlm_output_write_file(latest, line, (size_t)len) : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (made) rm_rf(tmpl);
    if (old) rm_rf(old);
    if (s == TLM_OK) tidy_root(root, keep, t->step);
    if (s == TLM_OK && written) {
        *written = final;
        final = NULL;
    }
    free(latest);
    free(tmpl);
    free(final);
    free(old);
    free(weights);
    free(optim);
    free(state);
    cJSON_free(text);
    close(lock);
    return s;
}

tlm_status tlm_checkpoint_save(const tlm_train *t, const tlm_train_sources *src, const char *root, int keep,
                               char **written) {
    if (written) *written = NULL;
    float *mv = NULL; /* first: under ZeRO-1 every rank gives its shard, and only rank 0 goes on */
    TLM_TRY(moments_to_host(t, &mv));
    if (!mv) return TLM_OK;
    const tlm_status s = save_files(t, src, mv, root, keep, written);
    free(mv);
    return s;
}

/* ---- reading ------------------------------------------------------------------------------------------ */

/* a whole text file of at most max bytes: a regular file only, so a FIFO is refused, not waited on */
static tlm_status read_text(const char *path, size_t max, char **out, size_t *n) {
    return tlm_input_read_text(path, max, out, n);
}

/* field readers: FORMAT naming the file and the field when it is missing or of the wrong kind */
typedef struct {
    const char *path;
    tlm_status s;
} reader;

static const cJSON *field(reader *rd, const cJSON *obj, const char *key, bool (*is)(const cJSON *), const char *kind) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (rd->s == TLM_OK && (!v || !is(v)))
        rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: field '%s' is %s, not %s: not a tlm checkpoint state (or damaged)",
                         rd->path, key, v ? "of another kind" : "missing", kind);
    return rd->s == TLM_OK ? v : NULL;
}

static bool is_string(const cJSON *v) { return cJSON_IsString(v) != 0; }
static bool is_object(const cJSON *v) { return cJSON_IsObject(v) != 0; }
static bool is_array(const cJSON *v) { return cJSON_IsArray(v) != 0; }
static bool is_bool(const cJSON *v) { return cJSON_IsBool(v) != 0; }
static bool is_numeric(const cJSON *v) { /* a number, or "inf", "-inf", "nan" */
    return cJSON_IsNumber(v) || (cJSON_IsString(v) && (!strcmp(v->valuestring, "inf") ||
                                                      !strcmp(v->valuestring, "-inf") || !strcmp(v->valuestring, "nan")));
}

static double num(reader *rd, const cJSON *obj, const char *key) {
    const cJSON *v = field(rd, obj, key, is_numeric, "a number");
    if (!v) return 0;
    if (cJSON_IsNumber(v)) return v->valuedouble;
    return !strcmp(v->valuestring, "nan") ? NAN : v->valuestring[0] == '-' ? -INFINITY : INFINITY;
}

/* an integer in [lo, hi] */
static int64_t integer(reader *rd, const cJSON *obj, const char *key, int64_t lo, int64_t hi) {
    const double v = num(rd, obj, key);
    int64_t i = 0;
    if (rd->s == TLM_OK && !tlm_double_to_int64(v, lo, hi, &i))
        rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: field '%s' = %.15g is not an integer in [%lld, %lld]", rd->path, key, v,
                         (long long)lo, (long long)hi);
    return rd->s == TLM_OK ? i : 0;
}

static uint64_t seed_of(reader *rd, const cJSON *obj, const char *key) {
    const cJSON *v = field(rd, obj, key, is_string, "a string of decimal digits");
    if (!v) return 0;
    char *end = NULL;
    errno = 0;
    const unsigned long long x = strtoull(v->valuestring, &end, 10);
    if (!v->valuestring[0] || *end || errno || v->valuestring[0] == '-')
        rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: field '%s' = '%s' is not a 64-bit seed", rd->path, key, v->valuestring);
    return x;
}

/* a hash: 32 lowercase hex digits */
static const cJSON *hash_field(reader *rd, const cJSON *obj, const char *key) {
    const cJSON *h = field(rd, obj, key, is_string, "a string");
    if (h && (strlen(h->valuestring) != 32 || strspn(h->valuestring, "0123456789abcdef") != 32)) {
        rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: field '%s' is not 32 hex digits", rd->path, key);
        return NULL;
    }
    return h;
}

static void source(reader *rd, const cJSON *recipe, const char *key, char **path, int64_t *tokens, bool *have_id,
                   tlm_file_identity *id) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(recipe, key);
    if (rd->s != TLM_OK || cJSON_IsNull(v)) return;
    if (!(v = field(rd, recipe, key, is_object, "an object or null"))) return;
    const cJSON *p = field(rd, v, "path", is_string, "a string");
    *tokens = integer(rd, v, "tokens", 1, MAX_COUNT);
    if (p && !(*path = strdup(p->valuestring))) rd->s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(v, "identity"); /* version 2 */
    if (rd->s != TLM_OK || !i || !(i = field(rd, v, "identity", is_object, "an object"))) return;
    id->bytes = (uint64_t)integer(rd, i, "bytes", 0, MAX_COUNT);
    const cJSON *sampled = field(rd, i, "sampled", is_bool, "true or false"), *h = hash_field(rd, i, "xxh3_128");
    id->sampled = sampled && cJSON_IsTrue(sampled);
    if (h) snprintf(id->hash, sizeof id->hash, "%s", h->valuestring);
    *have_id = rd->s == TLM_OK;
}

/* version 2: the digests of the step directory's files, then checked against the files */
static void read_digests(reader *rd, const cJSON *root, tlm_checkpoint *ck) {
    const cJSON *files = field(rd, root, "files", is_object, "an object");
    for (int i = 0; i < 2 && files && rd->s == TLM_OK; i++) {
        const cJSON *f = field(rd, files, step_files[i], is_object, "an object");
        if (!f) break;
        ck->file_bytes[i] = (uint64_t)integer(rd, f, "bytes", 0, MAX_COUNT);
        const cJSON *h = hash_field(rd, f, "xxh3_128");
        if (h) snprintf(ck->file_digest[i], sizeof ck->file_digest[i], "%s", h->valuestring);
    }
}

/* The step directory's files are those its state.json recorded: another step's weights copied in, a
 * file cut short or edited is refused, naming the file. Sizes: checked when the checkpoint is opened
 * (a stat each); content: XXH3-128 of the bytes the reader already holds whole, where each file is read
 * (weights at open, the moments at restore: a command that reads only the weights never hashes the
 * moments). Version 1 recorded no digests: nothing checked. */
static tlm_status check_size(const tlm_checkpoint *ck, int i, const char *path, uint64_t bytes) {
    if (ck->version < 2 || bytes == ck->file_bytes[i]) return TLM_OK;
    return tlm_fail(TLM_ERR_FORMAT, "%s: %llu bytes, but state.json recorded %llu: not the file this checkpoint "
                    "saved (cut short, extended or another step's)", path, (unsigned long long)bytes,
                    (unsigned long long)ck->file_bytes[i]);
}

static tlm_status check_sizes(const tlm_checkpoint *ck) {
    for (int i = 0; ck->version >= 2 && i < 2; i++) {
        char *path = path_join(ck->dir, step_files[i]);
        struct stat st;
        tlm_status s = !path ? tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory")
                       : stat(path, &st) != 0 ? tlm_fail(TLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno))
                                              : check_size(ck, i, path, (uint64_t)st.st_size);
        free(path);
        TLM_TRY(s);
    }
    return TLM_OK;
}

static tlm_status check_digest(const tlm_checkpoint *ck, int i, const char *path, const tlm_safetensors *st) {
    if (ck->version < 2) return TLM_OK;
    TLM_TRY(check_size(ck, i, path, st->buffer_size));
    char hex[33];
    tlm_bytes_digest(st->buffer, st->buffer_size, hex);
    if (strcmp(hex, ck->file_digest[i]) == 0) return TLM_OK;
    return tlm_fail(TLM_ERR_FORMAT, "%s: its content differs from the digest state.json recorded (XXH3-128 %s, "
                    "recorded %s): not the file this checkpoint saved (edited or another step's)", path, hex,
                    ck->file_digest[i]);
}

static void read_state(reader *rd, const cJSON *root, tlm_checkpoint *ck) {
    const cJSON *fmt = field(rd, root, "format", is_string, "a string");
    if (fmt && strcmp(fmt->valuestring, STATE_FORMAT) != 0)
        rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: format '%s' is not '%s'", rd->path, fmt->valuestring, STATE_FORMAT);
    const int64_t version = integer(rd, root, "version", 1, 1000000000);
    if (rd->s == TLM_OK && version > STATE_VERSION)
        rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: version %lld; this tlm reads versions 1 to %d", rd->path,
                         (long long)version, STATE_VERSION);
    ck->version = (int)version;
    ck->step = integer(rd, root, "step", 0, MAX_COUNT);
    ck->tokens = integer(rd, root, "tokens", 0, MAX_COUNT);
    const cJSON *r = field(rd, root, "recipe", is_object, "an object");
    tlm_train_config *c = &ck->config;
    if (r) {
        c->batch_size = (int)integer(rd, r, "batch_size", 1, 1 << 20);
        c->grad_accum_steps = 1; /* optional: not in checkpoints from before accumulation */
        if (cJSON_GetObjectItemCaseSensitive(r, "grad_accum_steps"))
            c->grad_accum_steps = (int)integer(rd, r, "grad_accum_steps", 1, 1 << 20);
        c->context_length = (int)integer(rd, r, "context_length", 1, 1 << 24);
        c->steps = integer(rd, r, "steps", 1, MAX_COUNT);
        c->seed = seed_of(rd, r, "seed");
        c->lr_max = num(rd, r, "lr_max");
        c->lr_min = num(rd, r, "lr_min");
        c->warmup_iters = integer(rd, r, "warmup_iters", 0, MAX_COUNT);
        c->cosine_cycle_iters = integer(rd, r, "cosine_cycle_iters", 0, MAX_COUNT);
        c->adamw.lr = 1e-3f;
        c->adamw.beta1 = (float)num(rd, r, "beta1");
        c->adamw.beta2 = (float)num(rd, r, "beta2");
        c->adamw.eps = (float)num(rd, r, "eps");
        c->adamw.weight_decay = (float)num(rd, r, "weight_decay");
        c->max_grad_norm = num(rd, r, "max_grad_norm");
        c->eval_every = integer(rd, r, "eval_every", 0, MAX_COUNT);
        c->eval_batches = (int)integer(rd, r, "eval_batches", 1, 1 << 20);
        const cJSON *p = field(rd, r, "precision", is_string, "a string");
        if (p && !tlm_precision_parse(p->valuestring, &ck->precision))
            rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: precision '%s' is not a precision mode", rd->path, p->valuestring);
        const cJSON *a = field(rd, r, "attention", is_string, "a string");
        if (a && !tlm_attention_parse(a->valuestring, &ck->attention))
            rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: attention '%s' is not naive or flash", rd->path, a->valuestring);
        ck->world_size = (int)integer(rd, r, "world_size", 1, 1 << 20);
        source(rd, r, "train_data", &ck->train_data_path, &ck->train_data_tokens, &ck->have_train_id,
               &ck->train_data_id);
        if (rd->s == TLM_OK && !ck->train_data_path)
            rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: field 'train_data' is null", rd->path);
        source(rd, r, "val_data", &ck->val_data_path, &ck->val_data_tokens, &ck->have_val_id, &ck->val_data_id);
        if (cJSON_GetObjectItemCaseSensitive(r, "save_every")) /* optional: not in older ones */
            ck->save_every = integer(rd, r, "save_every", 0, 9e15);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(r, "model"); /* optional: not in older ones */
        if (rd->s == TLM_OK && cJSON_IsString(name) && !(ck->model_name = strdup(name->valuestring)))
            rd->s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", rd->path);
        if (rd->s == TLM_OK && tlm_train_config_check(c) != TLM_OK)
            rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: %s", rd->path, tlm_last_error());
    }
    const cJSON *o = field(rd, root, "optimizer", is_object, "an object");
    if (o) ck->adamw_t = (int)integer(rd, o, "step", 0, INT_MAX);
    const cJSON *ls = field(rd, root, "loss_scaler", is_object, "an object");
    if (ls) {
        ck->scaler.scale = (float)num(rd, ls, "scale");
        ck->scaler.growth_tracker = (int)integer(rd, ls, "growth_tracker", 0, INT_MAX);
        ck->scaler.skipped_steps = integer(rd, ls, "skipped_steps", 0, MAX_COUNT);
        if (rd->s == TLM_OK && !(ck->scaler.scale > 0 && isfinite(ck->scaler.scale)))
            rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: loss scale %g is not a positive number", rd->path,
                             (double)ck->scaler.scale);
    }
    const cJSON *log = field(rd, root, "log", is_array, "an array");
    const int n = log ? cJSON_GetArraySize(log) : 0;
    if (rd->s == TLM_OK && n != ck->step)
        rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: the log holds %d steps, the checkpoint is at step %lld", rd->path, n,
                         (long long)ck->step);
    if (rd->s == TLM_OK && n > 0 && !(ck->log = calloc((size_t)n, sizeof *ck->log)))
        rd->s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the loss log");
    int i = 0;
    for (const cJSON *x = log ? log->child : NULL; x && rd->s == TLM_OK; x = x->next, i++) {
        tlm_train_record *e = &ck->log[i];
        if (!cJSON_IsObject(x)) {
            rd->s = tlm_fail(TLM_ERR_FORMAT, "%s: log entry %d is not an object", rd->path, i);
            break;
        }
        e->step = integer(rd, x, "step", i + 1, i + 1); /* every step, in order */
        e->tokens = integer(rd, x, "tokens", 0, MAX_COUNT);
        e->loss = (float)num(rd, x, "loss");
        e->lr = num(rd, x, "lr");
        e->grad_norm = num(rd, x, "grad_norm");
        const cJSON *b1 = field(rd, x, "clipped", is_bool, "true or false");
        const cJSON *b2 = field(rd, x, "skipped", is_bool, "true or false");
        e->clipped = b1 && cJSON_IsTrue(b1);
        e->skipped = b2 && cJSON_IsTrue(b2);
        e->loss_scale = (float)num(rd, x, "loss_scale");
        const cJSON *vl = cJSON_GetObjectItemCaseSensitive(x, "val_loss");
        e->val_loss = cJSON_IsNull(vl) ? NAN : num(rd, x, "val_loss");
    }
    ck->log_len = i;
}

/* the step directory of `path`: ROOT/<latest> or path itself */
static tlm_status resolve_dir(const char *path, char **dir) {
    char *latest = path_join(path, "latest"), *state = path_join(path, "state.json");
    tlm_status s = TLM_OK;
    struct stat st;
    if (!latest || !state) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    else if (stat(latest, &st) == 0) {
        char *text = NULL;
        size_t n = 0;
        s = read_text(latest, 256, &text, &n);
        while (s == TLM_OK && n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ')) text[--n] = '\0';
        if (s == TLM_OK && strlen(text) != n) /* a NUL inside would name another directory than the bytes */
            s = tlm_fail(TLM_ERR_FORMAT, "%s: holds a NUL byte: not a step directory's name", latest);
        if (s == TLM_OK && step_of_name(text) < 0)
            s = tlm_fail(TLM_ERR_FORMAT, "%s: '%s' does not name a step directory (step-NNNNNNNN)", latest, text);
        if (s == TLM_OK && !(*dir = path_join(path, text))) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
        free(text);
    } else if (stat(state, &st) == 0) {
        if (!(*dir = strdup(path))) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    } else {
        s = tlm_fail(TLM_ERR_IO, "%s: not a tlm checkpoint: it holds neither a 'latest' file nor a state.json", path);
    }
    free(latest);
    free(state);
    return s;
}

tlm_status tlm_checkpoint_open(const char *path, tlm_checkpoint *ck) {
    memset(ck, 0, sizeof *ck);
    TLM_TRY(resolve_dir(path, &ck->dir));
    char *state = path_join(ck->dir, "state.json"), *weights = path_join(ck->dir, "weights.safetensors");
    char *text = NULL;
    size_t n = 0;
    tlm_status s = state && weights ? read_text(state, MAX_STATE_BYTES, &text, &n)
                                    : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    if (s == TLM_OK) {
        cJSON *root = cJSON_ParseWithLength(text, n);
        reader rd = {state, TLM_OK};
        if (!root) rd.s = tlm_fail(TLM_ERR_FORMAT, "%s: not valid JSON (near byte %td)", state,
                                   cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : (ptrdiff_t)0);
        else read_state(&rd, root, ck);
        if (rd.s == TLM_OK && ck->version >= 2) read_digests(&rd, root, ck);
        cJSON_Delete(root);
        s = rd.s;
        if (s == TLM_OK) s = check_sizes(ck);
        if (s == TLM_OK && ck->version < 2)
            snprintf(ck->warning, sizeof ck->warning, "%s is version %d: it recorded neither the data files' "
                     "identity nor its files' digests; they are not checked", state, ck->version);
    }
    bool have_weights = false;
    if (s == TLM_OK) have_weights = (s = tlm_safetensors_read(weights, &ck->weights)) == TLM_OK;
    if (s == TLM_OK) s = check_digest(ck, 0, weights, &ck->weights);
    if (s == TLM_OK) {
        bool from_meta = false;
        s = tlm_weights_config(&ck->weights, weights, NULL, 0, &ck->model, &from_meta);
        if (s == TLM_OK && !from_meta)
            s = tlm_fail(TLM_ERR_FORMAT, "%s: no model config in its metadata: not written by tlm train", weights);
        if (s == TLM_OK && ck->config.context_length > ck->model.context_length)
            s = tlm_fail(TLM_ERR_FORMAT, "%s: the recipe's context length %d exceeds the model's %d", state,
                         ck->config.context_length, ck->model.context_length);
        if (s == TLM_OK && !ck->model_name) { /* an older checkpoint: named from its sizes */
            char name[64];
            tlm_config_name(&ck->model, name, sizeof name);
            if (!(ck->model_name = strdup(name))) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "%s: out of memory", state);
        }
    }
    free(text);
    free(state);
    free(weights);
    if (s != TLM_OK) {
        if (!have_weights) memset(&ck->weights, 0, sizeof ck->weights);
        tlm_checkpoint_close(ck);
    }
    return s;
}

void tlm_checkpoint_close(tlm_checkpoint *ck) {
    if (ck->weights.buffer || ck->weights.tensors) tlm_safetensors_free(&ck->weights);
    void *owned[] = {ck->dir, ck->train_data_path, ck->val_data_path, ck->model_name, ck->log};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
    memset(ck, 0, sizeof *ck);
}

/* The moments of every parameter: present, float32, the parameter's shape, finite (v >= 0); nothing
 * else in the file; its step the state's. */
static tlm_status check_optimizer(const tlm_model *m, const tlm_safetensors *st, const char *path, int t) {
    const char *step = tlm_safetensors_meta(st, "step");
    char want[32];
    snprintf(want, sizeof want, "%d", t);
    if (!step || strcmp(step, want) != 0)
        return tlm_fail(TLM_ERR_FORMAT, "%s: metadata step is %s%s%s, state.json says AdamW took %d steps", path,
                        step ? "'" : "missing", step ? step : "", step ? "'" : "", t);
    if (st->num_tensors != 2 * m->layout.num_tensors)
        return tlm_fail(TLM_ERR_FORMAT, "%s: %d tensors; this model's AdamW state has %d (exp_avg and exp_avg_sq of "
                                        "each of %d parameters)", path, st->num_tensors, 2 * m->layout.num_tensors,
                        m->layout.num_tensors);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < m->layout.num_tensors; i++) {
            const tlm_tensor_info *p = &m->layout.tensors[i];
            char name[80];
            snprintf(name, sizeof name, "%s.%s", k ? "exp_avg_sq" : "exp_avg", p->name);
            const tlm_st_tensor *x = tlm_safetensors_find(st, name);
            if (!x) return tlm_fail(TLM_ERR_FORMAT, "%s: missing tensor '%s'", path, name);
            bool same = x->dtype == TLM_DTYPE_F32 && x->ndim == p->ndim;
            for (int d = 0; same && d < p->ndim; d++) same = x->shape[d] == p->shape[d];
            if (!same)
                return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s' is not float32 of the parameter's shape", path, name);
            const unsigned char *b = x->data;
            for (int64_t j = 0; j < x->numel; j++) {
                float v;
                memcpy(&v, b + 4 * j, 4);
                if (!isfinite(v) || (k && v < 0))
                    return tlm_fail(TLM_ERR_FORMAT, "%s: tensor '%s' element %lld is %g: not a moment AdamW keeps",
                                    path, name, (long long)j, (double)v);
            }
        }
    return TLM_OK;
}

/* the moments of st (checked) into t's optimizer: the model's, or under ZeRO-1 this rank's shard */
static tlm_status place_moments(tlm_train *t, const tlm_checkpoint *ck, const tlm_safetensors *st) {
    tlm_model *m = t->model;
    const bool sharded = tlm_ddp_shards_optimizer(t->ddp);
    if (ck->adamw_t > 0 && !sharded && !m->optimizer.m) TLM_TRY(tlm_adamw_begin_step(&m->optimizer)); /* allocates */
    for (int i = 0; ck->adamw_t > 0 && i < m->layout.num_tensors; i++) {
        const tlm_tensor_info *p = &m->layout.tensors[i];
        char name[2][80];
        snprintf(name[0], sizeof name[0], "exp_avg.%s", p->name);
        snprintf(name[1], sizeof name[1], "exp_avg_sq.%s", p->name);
        const tlm_st_tensor *xm = tlm_safetensors_find(st, name[0]), *xv = tlm_safetensors_find(st, name[1]);
        if (sharded) {
            TLM_TRY(tlm_ddp_scatter_moments(t->ddp, p->offset, p->numel, xm->data, xv->data));
            continue;
        }
        tlm_copy_to_backend(m->backend, m->optimizer.m + p->offset, xm->data, p->numel * sizeof(float));
        tlm_copy_to_backend(m->backend, m->optimizer.v + p->offset, xv->data, p->numel * sizeof(float));
    }
    tlm_model_restore_optimizer_state(m, ck->adamw_t, &ck->scaler);
    return TLM_OK;
}

tlm_status tlm_checkpoint_restore_moments(tlm_train *t, const tlm_checkpoint *ck) {
    char *optim = path_join(ck->dir, "optimizer.safetensors");
    tlm_safetensors st;
    bool have = false;
    tlm_status s = optim ? TLM_OK : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    if (s == TLM_OK) have = (s = tlm_safetensors_read(optim, &st)) == TLM_OK;
    if (s == TLM_OK) s = check_digest(ck, 1, optim, &st);
    if (s == TLM_OK) s = check_optimizer(t->model, &st, optim, ck->adamw_t);
    if (s == TLM_OK) s = place_moments(t, ck, &st);
    if (have) tlm_safetensors_free(&st);
    free(optim);
    return s;
}

tlm_status tlm_checkpoint_restore(tlm_train *t, const tlm_checkpoint *ck) {
    tlm_model *m = t->model;
    char *weights = path_join(ck->dir, "weights.safetensors");
    tlm_status s = weights ? TLM_OK : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    tlm_train_record *log = NULL;
    if (s == TLM_OK && ck->log_len > 0 && !(log = malloc((size_t)ck->log_len * sizeof *log)))
        s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the loss log");
    /* one rank: the moments now (their file checked before anything changes); several: once the reducer
     * says where they live (tlm_train_session_join) */
    if (s == TLM_OK && t->world_size == 1) s = tlm_checkpoint_restore_moments(t, ck);
    if (s == TLM_OK) s = tlm_model_load_from(m, &ck->weights, weights, NULL, NULL); /* checks, then copies */
    if (s == TLM_OK) {
        tlm_model_restore_optimizer_state(m, ck->adamw_t, &ck->scaler);
        t->step = ck->step;
        t->tokens = ck->tokens;
        free(t->log);
        if (ck->log_len > 0) memcpy(log, ck->log, (size_t)ck->log_len * sizeof *log);
        t->log = log;
        t->log_len = t->log_cap = ck->log_len;
        log = NULL;
    }
    free(log);
    free(weights);
    return s;
}
