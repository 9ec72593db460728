/* session.c — a training run's pieces (train.h, tlm_train_session): its token files, its model and
 * training state (restored from a checkpoint when resuming) and, with several ranks, the check that
 * every rank runs the same and the gradient reducer. */
#include <stdio.h>
#include <string.h>

#include "tlm/train.h"

/* one token file, named `what` in the messages, and its identity; with a checkpoint `ck`: its token count
 * (expect) and identity (want, NULL: none recorded) must be the file's, unless `allow` (then the difference
 * is said in change[0..n)) */
static tlm_status load_tokens(const char *path, const char *what, int vocab, int64_t expect,
                              const tlm_file_identity *want, const tlm_checkpoint *ck, bool allow, tlm_tokens *t,
                              tlm_file_identity *id, char *change, size_t n) {
    tlm_status s = tlm_tokens_load(path, vocab, t);
    if (s != TLM_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", tlm_last_error()); /* the message names the file */
        return tlm_fail(s, "%s: %s", what, why);
    }
    if ((s = tlm_file_identify(path, id)) != TLM_OK) {
        tlm_tokens_free(t);
        memset(t, 0, sizeof *t);
        return s;
    }
    char how[160] = "";
    if (ck && expect > 0 && t->n != expect)
        snprintf(how, sizeof how, "%lld tokens, the checkpoint's %lld", (long long)t->n, (long long)expect);
    else if (ck && want && !tlm_file_identity_same(want, id)) tlm_file_identity_diff(want, id, how, sizeof how);
    if (!how[0]) return TLM_OK;
    if (allow) {
        snprintf(change + strlen(change), n - strlen(change), "%s%s %s: %s", change[0] ? "; " : "", what, path, how);
        return TLM_OK;
    }
    if (ck && expect > 0 && t->n != expect)
        s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s %s holds %lld tokens, but the checkpoint %s was trained on %lld: "
                     "not the same data (--allow-data-change to switch data deliberately)", what, path, (long long)t->n,
                     ck->dir, (long long)expect);
    else
        s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "%s %s is not the file the checkpoint %s was trained on (%s, as its "
                     "state.json recorded it): give --allow-data-change to switch data deliberately", what, path,
                     ck->dir, how);
    tlm_tokens_free(t);
    memset(t, 0, sizeof *t);
    return s;
}

tlm_status tlm_train_session_load(tlm_train_session *s, const tlm_train_sources *src, int vocab,
                                  const tlm_checkpoint *ck) {
    const bool allow = src->allow_data_change;
    TLM_TRY(load_tokens(src->train_data_path, "training data", vocab, ck ? ck->train_data_tokens : 0,
                        ck && ck->have_train_id ? &ck->train_data_id : NULL, ck, allow, &s->train_data, &s->train_id,
                        s->data_change, sizeof s->data_change));
    if (!src->val_data_path) return TLM_OK;
    TLM_TRY(load_tokens(src->val_data_path, "validation data", vocab, ck ? ck->val_data_tokens : 0,
                        ck && ck->have_val_id ? &ck->val_data_id : NULL, ck, allow, &s->val_data, &s->val_id,
                        s->data_change, sizeof s->data_change));
    s->have_val_data = true;
    return TLM_OK;
}

tlm_status tlm_train_session_create(tlm_train_session *s, tlm_backend *be, const tlm_config *model,
                                    const tlm_run_config *run, const tlm_train_config *recipe, uint64_t seed,
                                    int rank, int world_size, const tlm_checkpoint *ck) {
    s->config = *model;
    tlm_run_config r = *run;
    r.grad_accum_steps = recipe->grad_accum_steps; /* the recipe's micro-batches (train.h) */
    TLM_TRY(tlm_model_create(&s->model, model, &r, be));
    if (!ck) TLM_TRY(tlm_model_init_random(s->model, seed));
    TLM_TRY(tlm_train_init(&s->train, s->model, recipe, &s->train_data, s->have_val_data ? &s->val_data : NULL, rank,
                           world_size));
    s->have_train = true;
    s->train.train_data_id = &s->train_id;
    s->train.val_data_id = s->have_val_data ? &s->val_id : NULL;
    s->train.data_change = s->data_change[0] ? s->data_change : NULL;
    s->resumed = ck;
    return ck ? tlm_checkpoint_restore(&s->train, ck) : TLM_OK;
}

tlm_status tlm_train_session_join(tlm_train_session *s, tlm_comm *comm, tlm_precision precision,
                                  const tlm_ddp_config *ddp) {
    /* what the ranks will run, as they resolved it: tlm train's fingerprint (cli_agree) compares the flags and
     * the data files, not what a --resume or --init-weights path holds on each rank (node-local disks), and a
     * caller of the library has no fingerprint at all */
    const tlm_config *m = &s->config;
    const tlm_train_config *r = &s->train.config;
    char text[1024];
    snprintf(text, sizeof text, "model %d %d %d %d %d %d; recipe batch %d ctx %d steps %lld seed %llu lr %g %g; %s; "
             "data %lld %lld", m->vocab_size, m->d_model, m->d_ff, m->num_layers, m->num_heads, m->context_length,
             r->batch_size, r->context_length, (long long)r->steps, (unsigned long long)r->seed, r->lr_max, r->lr_min,
             tlm_precision_name(precision), (long long)s->train_data.n, (long long)s->val_data.n);
    TLM_TRY(tlm_comm_check_same(comm, "the run's configuration", text));
    TLM_TRY(tlm_ddp_create(&s->ddp, s->model, comm, ddp));
    s->train.ddp = s->ddp;
    /* resumed: AdamW's moments where the reducer keeps them (replicated, or this rank's ZeRO-1 shard) */
    return s->resumed ? tlm_ddp_agree(comm, tlm_checkpoint_restore_moments(&s->train, s->resumed)) : TLM_OK;
}

void tlm_train_session_free(tlm_train_session *s, bool free_ddp) {
    if (free_ddp) tlm_ddp_free(s->ddp);
    if (s->have_train) tlm_train_free(&s->train);
    tlm_model_free(s->model);
    if (s->train_data.ids) tlm_tokens_free(&s->train_data);
    if (s->val_data.ids) tlm_tokens_free(&s->val_data);
    memset(s, 0, sizeof *s);
}
