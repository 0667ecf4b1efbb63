/*
 * cmd_load.c - `moeq load MODEL_DIR [--threads N] [--moe-only] [--json]`:
 * every MoE layer and quantized linear module of a checkpoint loaded and
 * finalized through moeq_model_load, with a progress bar on a terminal (a
 * line per layer otherwise) and a summary.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void load_usage(FILE *f) {
    fprintf(f, "usage: moeq load MODEL_DIR [--threads N] [--moe-only] [--json]\n\n"
               "Loads and finalizes every MoE layer and quantized linear module (attention,\n"
               "shared experts, dense MLPs; q/k/v and gate/up siblings fused) of the checkpoint\n"
               "in MODEL_DIR (config.json and safetensors) as an engine would, then prints what\n"
               "it took: layers, bytes of their checkpoint tensors, seconds, GB/s, and the\n"
               "process's resident and peak memory against those bytes.  Progress goes to\n"
               "stderr: a bar on a terminal, a line per layer otherwise.\n\n"
               "  --threads N  loader threads (default: all CPUs)\n"
               "  --moe-only   the MoE layers alone\n"
               "  --json       the summary as one JSON object\n\n"
               "exit status: 0 loaded, 1 a layer failed (the message names it), 2 usage or an\n"
               "unreadable MODEL_DIR\n");
}

typedef struct {
    int tty;
} load_view;

static int32_t on_progress(const moeq_model_progress *p, void *user) {
    const load_view *v = user;
    const double gb = (double)p->bytes_done * 1e-9, all = (double)p->bytes * 1e-9;
    const double rate = p->seconds > 0 ? gb / p->seconds : 0;
    if (v->tty) {
        const int width = 30;
        const int fill = p->bytes ? (int)((double)p->bytes_done / (double)p->bytes * width) : width;
        fprintf(stderr, "\rloading [%.*s%*s] %u/%u layers, %.2f/%.2f GB, %.2f GB/s  ", fill,
                "##############################", width - fill, "", p->layers_done, p->layers, gb,
                all, rate);
        if (p->layers_done == p->layers) fputc('\n', stderr);
    } else {
        fprintf(stderr, "loaded %s%s (%u/%u), %.2f/%.2f GB, %.1f s\n", p->layer,
                p->linear ? " [linear]" : "", p->layers_done, p->layers, gb, all, p->seconds);
    }
    fflush(stderr);
    return 0;
}

int cmd_load(int argc, char **argv) {
    const char *dir = NULL;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    int json = 0, moe_only = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            load_usage(stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            if (cli_parse_long("load", a, argv[++i], 1, 1024, &threads) != 0) return CLI_USAGE;
        } else if (!strcmp(a, "--moe-only")) {
            moe_only = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (a[0] == '-' || dir) {
            fprintf(stderr, "moeq load: unexpected argument '%s'\n\n", a);
            load_usage(stderr);
            return CLI_USAGE;
        } else {
            dir = a;
        }
    }
    if (!dir) {
        fprintf(stderr, "moeq load: a MODEL_DIR is required\n\n");
        load_usage(stderr);
        return CLI_USAGE;
    }
    if (threads < 1) threads = 1;
    load_view view = {isatty(2)};
    moeq_model_load_options o = {.threads = (int32_t)threads,
                                 .progress = on_progress,
                                 .user_data = &view,
                                 .moe_only = moe_only};
    moeq_model *m = NULL;
    moeq_model_load_summary s;
    moeq_error err;
    moeq_status st = moeq_model_load(dir, &o, &m, &s, &err);
    if (st != MOEQ_OK) {
        if (view.tty) fputc('\n', stderr);
        cli_print_error(dir, &err);
        /* the directory itself: usage-class; a layer's tensors: a failed check */
        return st == MOEQ_STATUS_IO || st == MOEQ_STATUS_INVALID_ARG ? CLI_USAGE : CLI_FAILED;
    }
    const double bytes = (double)s.bytes;
    if (json) {
        printf("{\"dir\": ");
        cli_json_string(stdout, dir);
        printf(", \"layers\": %u, \"experts\": %llu, \"tensors\": %llu, \"bytes\": %llu, "
               "\"resident_bytes\": %llu, \"seconds\": %.4f, \"gb_per_s\": %.4f, \"threads\": %ld, "
               "\"rss_before\": %llu, \"rss_after\": %llu, \"peak_rss\": %llu, "
               "\"linear_layers\": %u, \"linear_tensors\": %llu, \"linear_bytes\": %llu, "
               "\"linear_resident_bytes\": %llu}\n",
               s.layers, (unsigned long long)s.experts, (unsigned long long)s.tensors,
               (unsigned long long)s.bytes, (unsigned long long)s.resident, s.seconds, s.gb_per_s,
               threads, (unsigned long long)s.rss_before, (unsigned long long)s.rss_after,
               (unsigned long long)s.peak_rss, s.linear_layers,
               (unsigned long long)s.linear_tensors, (unsigned long long)s.linear_bytes,
               (unsigned long long)s.linear_resident);
    } else {
        printf("loaded %u MoE layers (%llu experts) and %u linear layers (%.3f GB), %llu "
               "tensors of %s: %.3f GB in %.2f s, %.2f GB/s, %ld threads\n",
               s.layers, (unsigned long long)s.experts, s.linear_layers,
               (double)s.linear_bytes * 1e-9, (unsigned long long)s.tensors, dir, bytes * 1e-9,
               s.seconds, s.gb_per_s, threads);
        if (s.peak_rss && bytes > 0) {
            printf("memory: finalized %.3f GB (%.2fx), resident %.3f GB after (%.2fx), peak "
                   "%.3f GB (%.2fx) of the checkpoint bytes\n",
                   (double)s.resident * 1e-9, (double)s.resident / bytes,
                   (double)s.rss_after * 1e-9, (double)s.rss_after / bytes,
                   (double)s.peak_rss * 1e-9, (double)s.peak_rss / bytes);
        }
    }
    moeq_model_destroy(m);
    return CLI_OK;
}
