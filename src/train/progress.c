/* progress.c — the progress line of a training run (train.h, tlm_train_progress): step, loss, lr,
 * gradient norm, tokens/s, MFU and ETA, rewritten in place on a terminal. */
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "tlm/train.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "42s", "3m07s", "2h05m"; "?" when unknown */
static void format_eta(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e8) snprintf(buf, n, "?");
    else if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

void tlm_train_progress_clear(tlm_train_progress *p) {
    if (p->shown) fputs("\r\033[K", p->out);
    p->shown = false;
}

static void show(tlm_train_progress *p, const tlm_train_record *e, int64_t steps, const tlm_train_window *w,
                 double eta_s) {
    char eta[32], mfu[16];
    format_eta(eta_s, eta, sizeof eta);
    if (isnan(w->mfu)) snprintf(mfu, sizeof mfu, "n/a");
    else snprintf(mfu, sizeof mfu, "%.1f%%", 100 * w->mfu);
    tlm_train_progress_clear(p);
    char norm[48] = "";
    if (!isnan(e->grad_norm) || e->clipped)
        snprintf(norm, sizeof norm, " grad norm %.3f%s", e->grad_norm, e->clipped ? " (clipped)" : "");
    fprintf(p->out, "%s: step %lld/%lld loss %.4f lr %.2e%s | %.0f tok/s MFU %s | ETA %s%s", p->prefix,
            (long long)e->step, (long long)steps, (double)e->loss, e->lr, norm, w->tokens_per_s, mfu, eta,
            p->tty ? "" : "\n");
    p->shown = p->tty;
    fflush(p->out);
}

void tlm_train_progress_step(tlm_train_progress *p, const tlm_train_record *rec, int64_t steps,
                             const tlm_train_window *w, double eta_s, bool row) {
    if (!p->quiet && (row || (p->tty && now_s() - p->last_show > 0.2))) {
        show(p, rec, steps, w, eta_s);
        p->last_show = now_s();
    }
    if (row) tlm_train_progress_clear(p); /* the log row follows */
}

void tlm_train_progress_checkpoint(tlm_train_progress *p, int64_t step, const char *dir) {
    tlm_train_progress_clear(p);
    if (!p->quiet) fprintf(p->out, "%s: step %lld: checkpoint %s\n", p->prefix, (long long)step, dir);
}
