/*
 * moeq.c - the moeq command-line tool: subcommand dispatch and shared helpers.
 * Uses only the public API (include/moeq/moeq.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} k_commands[] = {
    {"demo", cmd_demo, "show moeq on a bundled real config (no arguments needed)"},
    {"dequant", cmd_dequant, "dequantize one module of a checkpoint to a float32 .npy"},
    {"plan", cmd_plan, "which group, args, format and scheme apply to each layer, and why"},
    {"inspect", cmd_inspect, "plan a model directory's modules and account for every tensor"},
    {"load", cmd_load, "load and finalize every MoE layer of a checkpoint, timed"}, /* [load] */
    {"manifest", cmd_manifest, "the parameters (names, dtypes, shapes) of one MoE layer"},
    {"run", cmd_run, "load one MoE layer of a checkpoint, run and time it, check it"},
    {"synth", cmd_synth, "write a small synthetic compressed-tensors MoE checkpoint"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: moeq <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++) {
        fprintf(f, "  %-8s %s\n", k_commands[i].name, k_commands[i].help);
    }
    fprintf(f, "  %-8s %s\n", "version", "print the library version");
    fprintf(f, "\n'moeq <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("moeq %s\n", moeq_version());
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++) {
        if (strcmp(argv[1], k_commands[i].name) == 0) return k_commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "moeq: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}

/* ---- shared helpers ------------------------------------------------------------ */

static void out_of_memory(void) {
    fprintf(stderr, "moeq: out of memory\n");
    exit(CLI_FAILED);
}

void cli_buf_append(cli_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) out_of_memory();
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void cli_buf_printf(cli_buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        cli_buf_append(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) out_of_memory();
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    cli_buf_append(b, big, (size_t)n);
    free(big);
}

void cli_buf_free(cli_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "moeq: cannot open %s\n", path);
        return NULL;
    }
    cli_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) cli_buf_append(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "moeq: error reading %s\n", path);
        cli_buf_free(&b);
        return NULL;
    }
    if (!b.data) cli_buf_append(&b, "", 0);
    *len = b.len;
    return b.data;
}

int cli_parse_long(const char *cmd, const char *flag, const char *text, long lo, long hi,
                   long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "moeq %s: %s takes %ld..%ld, got '%s'\n", cmd, flag, lo, hi, text);
        return -1;
    }
    *out = v;
    return 0;
}

void cli_print_error(const char *what, const moeq_error *err) {
    /* Messages usually name the file or layer already. */
    if (what && strncmp(err->message, what, strlen(what)) != 0) {
        fprintf(stderr, "moeq: %s: %s: %s\n", what, moeq_status_name(err->code), err->message);
    } else {
        fprintf(stderr, "moeq: %s: %s\n", moeq_status_name(err->code), err->message);
    }
}

moeq_config *cli_load_config(const char *path) {
    moeq_error err;
    moeq_config *cfg = NULL;
    if (moeq_config_load(path, NULL, &cfg, &err) != MOEQ_OK) {
        cli_print_error(path, &err);
        return NULL;
    }
    for (uint32_t i = 0; i < moeq_config_warning_count(cfg); i++) {
        fprintf(stderr, "moeq: warning: %s\n", moeq_config_warning(cfg, i));
    }
    return cfg;
}

void cli_glm_layer_lines(cli_buf *out, int moe_lines) {
    static const char *const attn[] = {"q_a_proj",  "q_b_proj", "kv_a_proj_with_mqa",
                                       "kv_b_proj", "o_proj",   "indexer.wq_b",
                                       "indexer.wk"};
    static const char *const mlp[] = {"gate_proj", "up_proj", "down_proj"};
    cli_buf_printf(out, "model.embed_tokens\n");
    for (int l = 0; l <= 78; l++) {
        for (size_t a = 0; a < sizeof attn / sizeof attn[0]; a++) {
            cli_buf_printf(out, "model.layers.%d.self_attn.%s\n", l, attn[a]);
        }
        if (l < 3) {
            for (int p = 0; p < 3; p++) cli_buf_printf(out, "model.layers.%d.mlp.%s\n", l, mlp[p]);
            continue;
        }
        cli_buf_printf(out, "model.layers.%d.mlp.gate\n", l);
        for (int p = 0; p < 3; p++) {
            cli_buf_printf(out, "model.layers.%d.mlp.shared_experts.%s\n", l, mlp[p]);
        }
        if (moe_lines) {
            cli_buf_printf(out, "model.layers.%d.mlp.experts moe 256\n", l);
        } else {
            for (int e = 0; e < 256; e++) {
                for (int p = 0; p < 3; p++) {
                    cli_buf_printf(out, "model.layers.%d.mlp.experts.%d.%s\n", l, e, mlp[p]);
                }
            }
        }
    }
    cli_buf_printf(out, "lm_head\n");
}
