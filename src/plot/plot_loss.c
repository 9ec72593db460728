/* plot_loss.c — the loss-curve plot kind of `tlm plot` (plot.h): the training loss and the validation
 * loss of one or more `tlm train --log FILE.json` runs, against the step (left) and against the
 * tokens trained on (right). Each run is one colour: the training loss a thin line, the validation
 * loss points joined by a thicker line. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tlm/plot.h"

static const char *const colors[8] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2c",
                                      "#76b7b2", "#b07aa1", "#edc948", "#9c755f"};

static tlm_status build(tlm_plot *p, const cJSON *const *docs, const char *const *paths, int n) {
    char name[32], plots[2][4096];
    size_t used[2] = {0, 0};
    double step_lo = INFINITY, step_hi = -INFINITY, tokens_hi = 0; /* over every run: the axes' tics */
    int entries = 0;                                                 /* lines in the key */
    for (int i = 0; i < n; i++) {
        const cJSON *tool = cJSON_GetObjectItemCaseSensitive(docs[i], "tool");
        const cJSON *log = cJSON_GetObjectItemCaseSensitive(docs[i], "log");
        if (!cJSON_IsString(tool) || strcmp(tool->valuestring, "tlm train") != 0 || !cJSON_IsArray(log))
            return tlm_fail(TLM_ERR_FORMAT, "%s is not a training log (\"tool\": \"tlm train\" with a \"log\" "
                            "array; written by tlm train --log FILE.json)", paths[i]);
        int ntrain = 0, nval = 0;
        snprintf(name, sizeof name, "train%d", i);
        tlm_plot_data_begin(p, name); /* step, tokens, loss */
        for (const cJSON *r = log->child; r; r = r->next) {
            const double step = tlm_plot_json_num(r, "step", NAN), loss = tlm_plot_json_num(r, "loss", NAN);
            if (isfinite(loss) && isfinite(step)) {
                const double tokens = tlm_plot_json_num(r, "tokens", NAN);
                tlm_plot_row(p, 3, (double[]){step, tokens, loss});
                ntrain++;
                step_lo = fmin(step_lo, step), step_hi = fmax(step_hi, step);
                if (isfinite(tokens)) tokens_hi = fmax(tokens_hi, tokens);
            }
        }
        tlm_plot_data_end(p);
        snprintf(name, sizeof name, "val%d", i);
        tlm_plot_data_begin(p, name); /* step, tokens, val_loss */
        for (const cJSON *r = log->child; r; r = r->next) {
            const double val = tlm_plot_json_num(r, "val_loss", NAN);
            if (isfinite(val)) {
                const double step = tlm_plot_json_num(r, "step", NAN), tokens = tlm_plot_json_num(r, "tokens", NAN);
                tlm_plot_row(p, 3, (double[]){step, tokens, val});
                nval++;
            }
        }
        tlm_plot_data_end(p);
        if (!ntrain)
            return tlm_fail(TLM_ERR_FORMAT, "%s: the log holds no step with a finite loss", paths[i]);
        entries += nval ? 2 : 1;
        /* the run's label: its model and precision, and the file when several are drawn */
        const cJSON *model = cJSON_GetObjectItemCaseSensitive(docs[i], "model");
        const cJSON *prec = cJSON_GetObjectItemCaseSensitive(docs[i], "precision");
        char label[512];
        const char *base = strrchr(paths[i], '/');
        snprintf(label, sizeof label, "%s%s%s%s%s", cJSON_IsString(model) ? model->valuestring : "",
                 cJSON_IsString(prec) ? " " : "", cJSON_IsString(prec) ? prec->valuestring : "", n > 1 ? " " : "",
                 n > 1 ? (base ? base + 1 : paths[i]) : "");
        const char *color = colors[i % 8];
        char title_train[600], title_val[600];
        snprintf(title_train, sizeof title_train, "%s train", label);
        snprintf(title_val, sizeof title_val, "%s validation", label);
        const char *tt = tlm_plot_str(p, title_train), *tv = tlm_plot_str(p, title_val);
        for (int side = 0; side < 2; side++) {
            const int x = side + 1; /* column 1 step, 2 tokens */
            char *out = plots[side] + used[side];
            const size_t room = sizeof plots[side] - used[side];
            int k = snprintf(out, room, "%s$train%d using %d:3 with lines lw 1 lc rgb '%s' title %s",
                             used[side] ? ", " : "plot ", i, x, color, tt);
            if (nval && k >= 0 && (size_t)k < room)
                k += snprintf(out + k, room - (size_t)k,
                              ", $val%d using %d:3 with linespoints lw 2.5 pt 7 ps 0.8 lc rgb '%s' title %s", i, x,
                              color, tv);
            if (k < 0 || (size_t)k >= room)
                return tlm_fail(TLM_ERR_FORMAT, "%s: too many runs to plot in one picture", paths[i]);
            used[side] += (size_t)k;
        }
    }
    tlm_plot_size(p, 1400, 600);
    tlm_plot_cmd(p, "set multiplot layout 1,2 title 'tlm train: loss (mean cross-entropy, nats)'");
    tlm_plot_cmd(p, "set grid lc rgb '#dddddd'");
    /* the key below each panel, never over the curves (a short run's fill the panel) */
    tlm_plot_cmd(p, "set key outside below center vertical Left reverse noenhanced");
    tlm_plot_cmd(p, "set bmargin %d", 5 + entries); /* the x label, then the key's lines under it */
    tlm_plot_cmd(p, "set ylabel 'loss (nats)'");
    tlm_plot_cmd(p, "set xlabel 'step'");
    /* steps are whole: a short run's axis (gnuplot would put tics at 1.5, 2.5) gets a tic per step */
    if (step_hi - step_lo <= 10) tlm_plot_cmd(p, "set xtics 1");
    tlm_plot_cmd(p, "set format x '%%.0f'");
    tlm_plot_cmd(p, "%s", plots[0]);
    tlm_plot_cmd(p, "set xtics autofreq");
    tlm_plot_cmd(p, "set xlabel 'tokens trained on'");
    /* whole numbers up to 10^4, then 1.5k, 2.0M */
    tlm_plot_cmd(p, tokens_hi < 1e4 ? "set format x '%%.0f'" : "set format x '%%.1s%%c'");
    tlm_plot_cmd(p, "%s", plots[1]);
    tlm_plot_cmd(p, "unset multiplot");
    return TLM_OK;
}

const tlm_plot_kind tlm_plot_loss_curve = {"loss-curve",
                                           "training and validation loss against step and against tokens",
                                           "tlm train --log FILE.json (one or more runs)", 1, 8, build};
