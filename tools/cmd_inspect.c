/*
 * cmd_inspect.c - `moeq inspect MODEL_DIR [--json] [--engine-order]
 *                 [--platform cpu|npu] [--prefer-mxint4] [--names-only] [--engine SPEC]`
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void inspect_usage(FILE *f) {
    fprintf(f,
            "usage: moeq inspect MODEL_DIR [--json] [--engine-order] [--platform cpu|npu]\n"
            "                    [--prefer-mxint4] [--names-only] [--engine SPEC]\n\n"
            "Reads MODEL_DIR's config.json and its safetensors files (headers only, plus the\n"
            "scales that validation reads), finds the modules from the tensor names, plans\n"
            "them like 'moeq plan' (MoE layers as one line), and accounts for every tensor:\n"
            "tensors nothing reads (unconsumed), tensors a module needs that are absent\n"
            "(missing), and modules whose tensors have the wrong dtype, shape or values.\n\n"
            "  --json           one JSON object (modules, unconsumed, missing, errors, summary)\n"
            "  --engine-order   resolve overlapping targets in config order (vLLM/SGLang)\n"
            "                   instead of compressed-tensors order\n"
            "  --platform P     cpu (default) or npu (use the npu_* layouts where SGLang does)\n"
            "  --prefer-mxint4  int4 group-32 symmetric weights select mxint4, not wna16\n"
            "  --names-only     account by name only: no dtype, shape or value checks\n"
            "  --engine SPEC    also say, per MoE layer, what an engine's MoE dispatch would\n"
            "                   build or raise (as in 'moeq plan --engine')\n\n"
            "exit status: 0 every tensor accounted for, 1 unconsumed or missing tensors or\n"
            "module errors, 2 usage, unreadable model directory or bad config\n");
}

static int32_t write_stdout(const char *data, size_t len, void *user) {
    (void)user;
    return fwrite(data, 1, len, stdout) == len ? 0 : 1;
}

int cmd_inspect(int argc, char **argv) {
    const char *dir = NULL;
    moeq_resolve_options ro = {0};
    moeq_select_options so = {0};
    moeq_inspect_options io = {&ro, &so, 0, 0, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            inspect_usage(stdout);
            return CLI_OK;
        } else if (strcmp(a, "--json") == 0) {
            io.json = 1;
        } else if (strcmp(a, "--engine-order") == 0) {
            ro.precedence = MOEQ_PRECEDENCE_ENGINE;
        } else if (strcmp(a, "--platform") == 0 && i + 1 < argc) {
            if (cli_parse_platform("inspect", argv[++i], &so.platform) != 0) return CLI_USAGE;
        } else if (strcmp(a, "--prefer-mxint4") == 0) {
            so.prefer_mxint4 = 1;
        } else if (strcmp(a, "--names-only") == 0) {
            io.names_only = 1;
        } else if (strcmp(a, "--engine") == 0 && i + 1 < argc) {
            io.engine = argv[++i];
        } else if (a[0] == '-' || dir) {
            fprintf(stderr, "moeq inspect: unexpected argument '%s'\n\n", a);
            inspect_usage(stderr);
            return CLI_USAGE;
        } else {
            dir = a;
        }
    }
    if (!dir) {
        inspect_usage(stderr);
        return CLI_USAGE;
    }
    moeq_error err;
    moeq_config *cfg = NULL;
    if (!(cfg = cli_load_config(dir))) return CLI_USAGE;
    moeq_checkpoint *ckpt = NULL;
    if (moeq_checkpoint_open(dir, &ckpt, &err) != MOEQ_OK) {
        cli_print_error(dir, &err);
        moeq_config_destroy(cfg);
        return CLI_USAGE;
    }
    moeq_inspect_summary sum;
    moeq_status st = moeq_inspect_write(cfg, ckpt, &io, write_stdout, NULL, &sum, &err);
    moeq_checkpoint_close(ckpt);
    moeq_config_destroy(cfg);
    if (st != MOEQ_OK) {
        cli_print_error(dir, &err);
        return st == MOEQ_STATUS_IO ? CLI_FAILED : CLI_USAGE;
    }
    return sum.unconsumed || sum.missing || sum.errors ? CLI_FAILED : CLI_OK;
}
