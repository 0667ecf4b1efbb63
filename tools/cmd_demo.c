/*
 * cmd_demo.c - `moeq demo`: the README's first command.  Plans the GLM-5.3
 * int4/int8 mixed-precision config bundled into the tool (regex-only targets,
 * no "Linear" group: the config that breaks engines assuming one) over that
 * model's layer names and prints the plan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_demo(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: moeq demo\n");
        return CLI_USAGE;
    }
    moeq_error err;
    moeq_config *cfg = NULL;
    if (moeq_config_parse((const char *)moeq_demo_glm_config, moeq_demo_glm_config_len, NULL, &cfg,
                          &err) != MOEQ_OK) {
        cli_print_error("bundled GLM config", &err);
        return CLI_FAILED;
    }
    printf("moeq %s demo: GLM-5.3 Int4/Int8 mixed precision (compressed-tensors %s)\n",
           moeq_version(), moeq_config_version(cfg));
    printf("config: %u groups, regex-only targets, %u ignore entries, top-level format %s\n\n",
           moeq_config_group_count(cfg), moeq_config_ignore_count(cfg),
           moeq_format_name(moeq_config_format(cfg)));

    cli_buf lines = {0};
    cli_glm_layer_lines(&lines, 1);
    moeq_plan_options po = {NULL, NULL, 0, 1};
    char *text = NULL;
    uint32_t errors = 0;
    moeq_status st = moeq_plan(cfg, lines.data, lines.len, &po, &text, &errors, &err);
    cli_buf_free(&lines);
    if (st != MOEQ_OK) {
        cli_print_error("plan", &err);
        moeq_config_destroy(cfg);
        return CLI_FAILED;
    }
    fwrite(text, 1, strlen(text), stdout);
    moeq_free(text);
    printf("\n%u layer lines in error\n", errors);
    moeq_config_destroy(cfg);
    return errors ? CLI_FAILED : CLI_OK;
}
