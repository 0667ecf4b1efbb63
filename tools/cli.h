/*
 * cli.h - helpers shared by the moeq tool's subcommands (tools/ only; the tool
 * uses nothing but the public API).
 */
#ifndef MOEQ_CLI_H
#define MOEQ_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "moeq/moeq.h"
#include "moeq/moeq_ep.h"

/* Exit codes of every subcommand. */
enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2 };

/* A growable text buffer; aborts the tool (not the library) when memory runs out. */
typedef struct cli_buf {
    char *data;
    size_t len, cap;
} cli_buf;
void cli_buf_append(cli_buf *b, const char *s, size_t n);
void cli_buf_printf(cli_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_buf_free(cli_buf *b);

/* Reads a whole file; NULL (with a message on stderr) on failure. */
char *cli_read_file(const char *path, size_t *len);
/* Parses a whole decimal number in lo..hi for option FLAG of command CMD;
 * prints "moeq CMD: FLAG takes lo..hi, got 'TEXT'" and returns -1 otherwise. */
int cli_parse_long(const char *cmd, const char *flag, const char *text, long lo, long hi,
                   long *out);
/* "cpu" or "npu" for --platform of command CMD; prints why not and returns -1. */
int cli_parse_platform(const char *cmd, const char *text, int32_t *platform);
/* Writes s as a JSON string (quoted and escaped). */
void cli_json_string(FILE *f, const char *s);
/* Prints "moeq: <status name>: <message>" to stderr. */
void cli_print_error(const char *what, const moeq_error *err);
/* moeq_config_load(path) with its warnings printed to stderr; on failure the
 * error is printed and NULL returned. */
moeq_config *cli_load_config(const char *path);

/* The quantization_config compiled into the tool (GLM-5.3 int4/int8 mix). */
extern const unsigned char moeq_demo_glm_config[];
extern const size_t moeq_demo_glm_config_len;

/* Layer lines ("NAME" / "NAME moe N") for the GLM-5.3 MoE model the demo
 * config belongs to: 79 decoder layers (0-2 dense, 3-77 MoE with 256
 * experts, 78 the MTP layer), attention, shared experts and routers. */
void cli_glm_layer_lines(cli_buf *out, int moe_lines);

/* The model's MoE settings through the family table (moeq_model_moe_get);
 * prints the error, or the warning for an unknown family that took
 * defaults, to stderr.  WHAT names the model directory or config. */
int cli_model_moe(const moeq_config *cfg, const char *what, moeq_model_moe *mm);
/* The experts MoE layer LAYER holds: moe_sparsity_config's retained count
 * for its decoder layer when the config has one, else `model`.  CLI_FAILED
 * (message printed) when the config refuses the layer (dense, novice). */
int cli_layer_experts(const moeq_config *cfg, const char *layer, int32_t model, int32_t *out);
/* "model: glm4_moe; routing: sigmoid, top-8 of 128, ..." and, when some came
 * from the family table, the line that lists them. */
void cli_print_routing(FILE *f, const moeq_model_moe *mm);

/* A MoE layer of a model: resolution, selection, and the moeq_moe_config
 * (activation, SwiGLU limits and parameter dtype from the model's family)
 * that creates it.  mc points into the struct and at LAYER: use it in place. */
typedef struct cli_moe_layer {
    moeq_resolution res;
    moeq_selection sel;
    moeq_moe_config mc;
    moeq_model_layer_info info; /* what moeq_model_layer_config made mc from */
} cli_moe_layer;
/* A linear module of a checkpoint (linear_layer.c): its resolution,
 * selection and the moeq_linear_config that creates it; for a fused name the
 * checkpoint stores split (qkv_proj, gate_up_proj), its shards.  lc points
 * into the struct and at LAYER: use it in place. */
typedef struct cli_linear {
    int n_shards; /* 0: the module itself */
    const char *shard_names[4];
    int32_t shard_out[4];
    moeq_resolution res;
    moeq_selection sel;
    moeq_linear_config lc;
} cli_linear;
/* 1 when the checkpoint stores LAYER as a linear module ("<LAYER>.<param>"
 * tensors) or, for a fused name, every shard of it; 0 otherwise. */
int cli_linear_find(const moeq_checkpoint *ck, const char *layer, cli_linear *out);
/* Resolves and selects LAYER and starts cl->lc (name, scheme, args, the
 * model's params_dtype); prints the error and returns CLI_FAILED. */
int cli_linear_resolve(const moeq_config *cfg, const char *layer, const moeq_select_options *so,
                       cli_linear *cl);
/* For a fused name (qkv_proj, gate_up_proj): sets cl->shard_names to its
 * shards and returns their count; 0 for any other name. */
int cli_linear_fused(const char *layer, cli_linear *cl);
/* After cli_linear_find: resolves and selects LAYER and fills lc, with the
 * dimensions of the module's (shards') tensors and a bias when it has one.
 * Prints the error and returns CLI_FAILED when that fails. */
int cli_linear_setup(const moeq_config *cfg, const moeq_checkpoint *ck, const char *layer,
                     const moeq_select_options *so, cli_linear *cl);
/* "LAYER: linear, SCHEME (group G), in N, out M[ fused from ...][, with bias]" */
void cli_linear_describe(FILE *f, const cli_linear *cl);

/* proj NULL: the family's names.  has_bias -1: the family decides; 0 or 1:
 * the checkpoint does.  Prints the error and returns CLI_FAILED when LAYER
 * does not resolve, no scheme accepts it, or its experts are of a kind the
 * layer cannot run. */
int cli_moe_layer_setup(const moeq_config *cfg, const moeq_model_moe *mm, const char *layer,
                        const char *const proj[3], int32_t experts, int32_t hidden,
                        int32_t intermediate, int32_t has_bias, const moeq_select_options *so,
                        cli_moe_layer *out);

/* `moeq run --ep` (cmd_run_ep.c): expert parallelism over MPI when the tool
 * was built with it (MOEQ_CLI_MPI), else a message saying how to get it. */
typedef struct cli_ep_job {
    const char *layer;
    const moeq_checkpoint *ck;
    const moeq_moe_config *mc; /* the whole layer's config */
    int32_t placement;
    const char *scheme;
    int32_t E, H, I;
    const float *x; /* [T, H]: every rank's tokens (the same on each) */
    int64_t T;
    int32_t top_k;
    const int32_t *ids;
    const float *weights;
    long threads; /* 0: this machine's cores shared by its ranks */
    long repeat;
    const char *out_path;
    int check;
} cli_ep_job;
/* MPI_Init; stdout of every rank but 0 goes to /dev/null.  CLI_USAGE (with
 * the reason on stderr) when the tool has no MPI. */
int cli_ep_start(void);
/* Collective: 1 when every rank passes 1. */
int cli_ep_all_ok(int ok);
/* Collective: creates, loads and runs the layer on this rank's share of the
 * tokens; rank 0 prints the timing per rank and writes out_path.  Returns
 * the exit code. */
int cli_ep_run(const cli_ep_job *job);
/* MPI_Finalize. */
void cli_ep_stop(void);

int cmd_plan(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_dequant(int argc, char **argv);
int cmd_load(int argc, char **argv); /* [load] */
int cmd_run(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_manifest(int argc, char **argv);

#endif
