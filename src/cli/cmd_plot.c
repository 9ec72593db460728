/* cmd_plot.c — `tlm plot KIND FILE.json...`: the one plotting command of tlm. Draws tlm's JSON
 * results as PNG and SVG with gnuplot (plot.h: the kinds and how they are drawn). */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tlm/plot.h"

enum { OPT_OUT = 'o', OPT_ONLY = 3000, OPT_SIZE, OPT_LIST };

typedef struct {
    const char *out;
    bool png, svg, list;
    int width, height;
} plot_opts;

static void plot_usage(FILE *f, const cli_command *c) {
    fprintf(f, "Usage: tlm plot KIND FILE.json... [--out OUT] [--only png|svg] [--size W,H]\n"
               "       tlm plot --list\n"
               "Draws tlm's JSON results with gnuplot (Debian package gnuplot-nox) as OUT.png and OUT.svg, written\n"
               "together or not at all. The JSON may come from another machine (a GPU run).\n\n"
               "  -o, --out OUT               the pictures' path without extension (default: the first FILE's,\n"
               "                              without .json)\n"
               "      --only png|svg          write one format only (default: both)\n"
               "      --size W,H              picture size in pixels (default: the kind's, 1200,700)\n"
               "      --list                  the kinds, what each draws and which JSON it reads\n"
               "  -h, --help                  this text\n\nKinds:\n");
    for (int i = 0; i < tlm_plot_num_kinds(); i++) {
        const tlm_plot_kind *k = tlm_plot_kind_at(i);
        fprintf(f, "  %-18s %s\n  %-18s reads: %s\n", k->name, k->summary, "", k->reads);
    }
    fprintf(f, "\ngnuplot is found on PATH, or at $TLM_GNUPLOT.\n");
}

static bool plot_option(void *user, int opt, const char *arg) {
    plot_opts *o = user;
    switch (opt) {
    case OPT_OUT: o->out = arg; return true;
    case OPT_ONLY:
        if (strcmp(arg, "png") == 0) o->svg = false;
        else if (strcmp(arg, "svg") == 0) o->png = false;
        else {
            cli_error("plot", "--only: '%s' is not png or svg", arg);
            return false;
        }
        return true;
    case OPT_SIZE: {
        int v[2], n = 0;
        if (!cli_parse_int_list("plot", "--size", arg, 100, 10000, v, 2, &n)) return false;
        if (n != 2) {
            cli_error("plot", "--size: '%s' is not W,H (two pixel counts)", arg);
            return false;
        }
        o->width = v[0];
        o->height = v[1];
        return true;
    }
    case OPT_LIST: o->list = true; return true;
    }
    return false;
}

int cmd_plot(int argc, char **argv) {
    const char *cmd = "plot";
    plot_opts o = {.png = true, .svg = true};
    static const struct option opts[] = {{"out", required_argument, 0, OPT_OUT},
                                         {"only", required_argument, 0, OPT_ONLY},
                                         {"size", required_argument, 0, OPT_SIZE},
                                         {"list", no_argument, 0, OPT_LIST},
                                         {0, 0, 0, 0}};
    const cli_command c = {.name = cmd, .options = opts, .short_options = "o:", .handle = plot_option,
                           .usage = plot_usage, .min_positional = 0, .max_positional = 17};
    cli_args a;
    int rc = cli_parse(&c, &o, argc, argv, &a);
    if (rc >= 0) return rc;
    rc = TLM_EXIT_USAGE;
    const tlm_plot_kind *k = NULL;
    if (o.list) {
        for (int i = 0; i < tlm_plot_num_kinds(); i++) {
            const tlm_plot_kind *x = tlm_plot_kind_at(i);
            printf("%-18s %s (reads: %s)\n", x->name, x->summary, x->reads);
        }
        rc = TLM_EXIT_OK;
    } else if (a.num_positional < 2) {
        cli_error(cmd, "give a kind and its JSON file(s): tlm plot KIND FILE.json... (tlm plot --list shows the kinds)");
    } else if (!(k = tlm_plot_find(a.positional[0]))) {
        char known[512] = "";
        for (int i = 0; i < tlm_plot_num_kinds(); i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     tlm_plot_kind_at(i)->name);
        cli_error(cmd, "unknown kind '%s' (known: %s)", a.positional[0], known);
    } else {
        char out[4096];
        if (!o.out) { /* the first input without .json */
            snprintf(out, sizeof out, "%s", a.positional[1]);
            const size_t n = strlen(out);
            if (n > 5 && strcmp(out + n - 5, ".json") == 0) out[n - 5] = '\0';
            o.out = out;
        }
        const tlm_plot_options po = {.out = o.out, .png = o.png, .svg = o.svg, .width = o.width, .height = o.height};
        const tlm_status s = tlm_plot_render(k, (const char *const *)a.positional + 1, a.num_positional - 1, &po);
        if (s != TLM_OK) {
            cli_error(cmd, "%s", tlm_last_error());
            rc = s == TLM_ERR_INVALID_ARGUMENT ? TLM_EXIT_USAGE : TLM_EXIT_FAILURE;
        } else {
            char stem[4096];
            snprintf(stem, sizeof stem, "%s", o.out);
            const size_t n = strlen(stem);
            if (n > 4 && (strcmp(stem + n - 4, ".png") == 0 || strcmp(stem + n - 4, ".svg") == 0)) stem[n - 4] = '\0';
            fprintf(stderr, "tlm plot: wrote %s%s%s%s%s\n", o.png ? stem : "", o.png ? ".png" : "",
                    o.png && o.svg ? " and " : "", o.svg ? stem : "", o.svg ? ".svg" : "");
            rc = TLM_EXIT_OK;
        }
    }
    cli_args_free(&a);
    return rc;
}
