/*
 * cmd_demo.c - `moeq demo [--keep]`: the README's first command, the whole
 * product on an embedded default.
 *
 *   1. the real GLM-5.3 Int4/Int8 quantization_config compiled into the tool
 *      (regex-only targets, no "Linear" group: the config that breaks engines
 *      assuming one), group by group, with the MoE scheme each selects;
 *   2. a scaled-down model of the same layout written to a temporary
 *      directory (int4 routed experts, int8 attention and shared experts,
 *      regex-only targets, an ignore list);
 *   3. `moeq inspect` of it: the plan and the tensor accounting;
 *   4. `moeq run` of one MoE layer: routing from config.json, the time per
 *      token, and the error against the float64 reference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void real_config(void) {
    moeq_error err;
    moeq_config *cfg = NULL;
    if (moeq_config_parse((const char *)moeq_demo_glm_config, moeq_demo_glm_config_len, NULL, &cfg,
                          &err) != MOEQ_OK) {
        cli_print_error("bundled GLM config", &err);
        return;
    }
    printf(
        "1. The quantization_config of GLM-5.3-Int4-Int8Mix (compressed-tensors %s): %u groups,\n"
        "   regex-only targets, %u ignore entries.  Every expert of a layer resolves alike:\n",
        moeq_config_version(cfg), moeq_config_group_count(cfg), moeq_config_ignore_count(cfg));
    static const char *const layers[] = {
        "model.layers.3.self_attn.q_a_proj", "model.layers.40.mlp.shared_experts.down_proj",
        "model.layers.40.mlp.experts moe 256", "model.layers.2.mlp.experts moe 256", "lm_head"};
    cli_buf lines = {0};
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        cli_buf_printf(&lines, "%s\n", layers[i]);
    }
    moeq_plan_options po = {NULL, NULL, 0, 1, NULL};
    char *text = NULL;
    if (moeq_plan(cfg, lines.data, lines.len, &po, &text, NULL, &err) == MOEQ_OK) {
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            printf("   %s\n", line);
        }
    } else {
        cli_print_error("plan", &err);
    }
    moeq_free(text);
    cli_buf_free(&lines);
    moeq_config_destroy(cfg);
}

static int remove_dir(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

int cmd_demo(int argc, char **argv) {
    int keep = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--keep")) {
            keep = 1;
        } else {
            fprintf(stderr, "usage: moeq demo [--keep]\n");
            return CLI_USAGE;
        }
    }
    printf("moeq %s demo\n\n", moeq_version());
    real_config();

    moeq_error err;
    moeq_synth_layout layout;
    if (moeq_synth_preset("glm-mini", &layout, &err) != MOEQ_OK) {
        cli_print_error("glm-mini", &err);
        return CLI_FAILED;
    }
    layout.num_experts = 16;
    layout.hidden_size = 512;
    layout.moe_intermediate_size = 256;
    layout.intermediate_size = 1024;
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/moeq-demo-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "moeq demo: cannot create a directory under %s\n", tmp ? tmp : "/tmp");
        return CLI_FAILED;
    }
    printf("\n2. A scaled-down model of that layout: %d layers (layer 0 dense and ignored), %d\n"
           "   experts of %d, hidden %d, one shared expert, sigmoid routing with a correction\n"
           "   bias; int4 g64 routed experts, int8 g64 attention and shared experts, written as\n"
           "   compressed-tensors 0.18 writes them to %s\n",
           (int)layout.num_layers, (int)layout.num_experts, (int)layout.moe_intermediate_size,
           (int)layout.hidden_size, dir);
    fflush(stdout);
    int rc = CLI_FAILED;
    if (moeq_synth_write(&layout, dir, &err) != MOEQ_OK) {
        cli_print_error(dir, &err);
        goto done;
    }

    printf("\n3. moeq inspect %s\n\n", dir);
    fflush(stdout);
    char *inspect_argv[] = {"inspect", dir, NULL};
    rc = cmd_inspect(2, inspect_argv);
    fflush(stdout);
    if (rc != CLI_OK) goto done;

    printf("\n4. moeq run %s --layer model.layers.1.mlp.experts --tokens 16 --check\n\n", dir);
    fflush(stdout);
    char *run_argv[] = {"run",      dir,  "--layer", "model.layers.1.mlp.experts",
                        "--tokens", "16", "--check", NULL};
    rc = cmd_run(7, run_argv);
    fflush(stdout);
    if (rc == CLI_OK) {
        printf("\nAll of it is in the library (include/moeq/moeq.h); the tool uses only the public "
               "API.\n");
    }
done:
    if (keep) {
        printf("(kept %s)\n", dir);
    } else if (remove_dir(dir) != 0) {
        fprintf(stderr, "moeq demo: could not remove %s\n", dir);
    }
    return rc;
}
