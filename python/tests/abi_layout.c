/*
 * abi_layout.c - prints the size and field offsets of every struct in moeq.h
 * as the C compiler lays them out, as JSON; test_abi.py compares them with
 * the ctypes mirrors in moeq/_lib.py.
 */
#include <stddef.h>
#include <stdio.h>

#include <moeq/moeq.h>

static int first_struct = 1, first_field = 1;

static void begin(const char *name, size_t size) {
    printf("%s\n \"%s\": {\"size\": %zu, \"fields\": {", first_struct ? "" : ",", name, size);
    first_struct = 0;
    first_field = 1;
}

static void field(const char *name, size_t offset) {
    printf("%s\"%s\": %zu", first_field ? "" : ", ", name, offset);
    first_field = 0;
}

static void end(void) {
    printf("}}");
}

#define S(type) begin(#type, sizeof(type))
#define F(type, member) field(#member, offsetof(type, member))

int main(void) {
    printf("{");
    S(moeq_error); F(moeq_error, code); F(moeq_error, message); end();
    S(moeq_quant_args);
    F(moeq_quant_args, num_bits); F(moeq_quant_args, type); F(moeq_quant_args, symmetric);
    F(moeq_quant_args, group_size); F(moeq_quant_args, strategy);
    F(moeq_quant_args, strategy_given); F(moeq_quant_args, block_rows);
    F(moeq_quant_args, block_cols); F(moeq_quant_args, dynamic); F(moeq_quant_args, actorder);
    F(moeq_quant_args, scale_dtype); F(moeq_quant_args, zp_dtype); F(moeq_quant_args, observer);
    end();
    S(moeq_config_options);
    F(moeq_config_options, strict_keys); F(moeq_config_options, regex_match_limit);
    end();
    S(moeq_group_view);
    F(moeq_group_view, name); F(moeq_group_view, index); F(moeq_group_view, n_targets);
    F(moeq_group_view, targets); F(moeq_group_view, weights);
    F(moeq_group_view, input_activations); F(moeq_group_view, output_activations);
    F(moeq_group_view, format); F(moeq_group_view, preset);
    end();
    S(moeq_fused_name);
    F(moeq_fused_name, fused); F(moeq_fused_name, n_shards); F(moeq_fused_name, shards);
    end();
    S(moeq_resolve_options);
    F(moeq_resolve_options, precedence); F(moeq_resolve_options, n_fused);
    F(moeq_resolve_options, fused); F(moeq_resolve_options, no_fused);
    end();
    S(moeq_resolution);
    F(moeq_resolution, status); F(moeq_resolution, group_index); F(moeq_resolution, group_name);
    F(moeq_resolution, target); F(moeq_resolution, format); F(moeq_resolution, weights);
    F(moeq_resolution, input_activations); F(moeq_resolution, output_activations);
    F(moeq_resolution, ignore_index); F(moeq_resolution, flags);
    F(moeq_resolution, other_group_index);
    end();
    S(moeq_select_options);
    F(moeq_select_options, platform); F(moeq_select_options, prefer_mxint4);
    end();
    S(moeq_selection); F(moeq_selection, scheme); F(moeq_selection, reason); end();
    S(moeq_plan_options);
    F(moeq_plan_options, resolve); F(moeq_plan_options, select); F(moeq_plan_options, json);
    F(moeq_plan_options, threads); F(moeq_plan_options, engine);
    end();
    S(moeq_tensor);
    F(moeq_tensor, name); F(moeq_tensor, dtype); F(moeq_tensor, ndim); F(moeq_tensor, shape);
    F(moeq_tensor, data); F(moeq_tensor, nbytes); F(moeq_tensor, file);
    end();
    S(moeq_route_config);
    F(moeq_route_config, num_experts); F(moeq_route_config, top_k);
    F(moeq_route_config, scoring); F(moeq_route_config, renormalize);
    F(moeq_route_config, num_expert_group); F(moeq_route_config, topk_group);
    F(moeq_route_config, correction_bias); F(moeq_route_config, routed_scaling_factor);
    end();
    S(moeq_model_moe);
    F(moeq_model_moe, family); F(moeq_model_moe, model_type); F(moeq_model_moe, known);
    F(moeq_model_moe, num_experts); F(moeq_model_moe, top_k); F(moeq_model_moe, hidden_size);
    F(moeq_model_moe, intermediate_size); F(moeq_model_moe, scoring);
    F(moeq_model_moe, renormalize); F(moeq_model_moe, num_expert_group);
    F(moeq_model_moe, topk_group); F(moeq_model_moe, routed_scaling_factor);
    F(moeq_model_moe, apply_router_weight_on_input); F(moeq_model_moe, activation);
    F(moeq_model_moe, swiglu_alpha); F(moeq_model_moe, swiglu_limit);
    F(moeq_model_moe, gated); F(moeq_model_moe, expert_bias);
    F(moeq_model_moe, n_shared_experts); F(moeq_model_moe, shared_expert_gate);
    F(moeq_model_moe, params_dtype); F(moeq_model_moe, moe_block); F(moeq_model_moe, router);
    F(moeq_model_moe, router_bias); F(moeq_model_moe, correction_bias);
    F(moeq_model_moe, experts); F(moeq_model_moe, proj); F(moeq_model_moe, defaults);
    F(moeq_model_moe, unknown_defaults);
    end();
    S(moeq_moe_config);
    F(moeq_moe_config, scheme); F(moeq_moe_config, weights);
    F(moeq_moe_config, input_activations); F(moeq_moe_config, format);
    F(moeq_moe_config, dequant_flags); F(moeq_moe_config, prefix);
    F(moeq_moe_config, proj_names); F(moeq_moe_config, num_experts);
    F(moeq_moe_config, num_local_experts); F(moeq_moe_config, expert_map);
    F(moeq_moe_config, first_expert); F(moeq_moe_config, hidden_size);
    F(moeq_moe_config, intermediate_size); F(moeq_moe_config, activation);
    F(moeq_moe_config, swiglu_alpha); F(moeq_moe_config, swiglu_limit);
    F(moeq_moe_config, params_dtype); F(moeq_moe_config, has_bias);
    F(moeq_moe_config, routed_scaling_factor);
    F(moeq_moe_config, apply_router_weight_on_input); F(moeq_moe_config, non_gated);
    end();
    S(moeq_linear_config);
    F(moeq_linear_config, scheme); F(moeq_linear_config, weights);
    F(moeq_linear_config, input_activations); F(moeq_linear_config, format);
    F(moeq_linear_config, dequant_flags); F(moeq_linear_config, name);
    F(moeq_linear_config, in_features); F(moeq_linear_config, out_features);
    F(moeq_linear_config, has_bias); F(moeq_linear_config, params_dtype);
    F(moeq_linear_config, num_shards); F(moeq_linear_config, shard_names);
    F(moeq_linear_config, shard_out_features);
    end();
    S(moeq_param);
    F(moeq_param, name); F(moeq_param, dtype); F(moeq_param, ndim); F(moeq_param, shape);
    F(moeq_param, data); F(moeq_param, nbytes); F(moeq_param, ckpt_suffix);
    F(moeq_param, layout); F(moeq_param, quant_method); F(moeq_param, is_transposed);
    F(moeq_param, required);
    end();
    S(moeq_ctx_options); F(moeq_ctx_options, threads); F(moeq_ctx_options, force_ref); end();
    S(moeq_inspect_options);
    F(moeq_inspect_options, resolve); F(moeq_inspect_options, select);
    F(moeq_inspect_options, json); F(moeq_inspect_options, names_only);
    F(moeq_inspect_options, engine);
    end();
    S(moeq_engine_verdict);
    F(moeq_engine_verdict, engine); F(moeq_engine_verdict, scheme); F(moeq_engine_verdict, error);
    F(moeq_engine_verdict, branch); F(moeq_engine_verdict, group_index);
    F(moeq_engine_verdict, args_group_index); F(moeq_engine_verdict, differs);
    F(moeq_engine_verdict, moeq_scheme);
    end();
    S(moeq_synth_group);
    F(moeq_synth_group, name); F(moeq_synth_group, n_targets); F(moeq_synth_group, targets);
    F(moeq_synth_group, weights); F(moeq_synth_group, input_activations);
    F(moeq_synth_group, format);
    end();
    S(moeq_synth_layout);
    F(moeq_synth_layout, model_type); F(moeq_synth_layout, num_layers);
    F(moeq_synth_layout, first_dense_layers); F(moeq_synth_layout, num_experts);
    F(moeq_synth_layout, top_k); F(moeq_synth_layout, hidden_size);
    F(moeq_synth_layout, moe_intermediate_size); F(moeq_synth_layout, intermediate_size);
    F(moeq_synth_layout, n_shared_experts); F(moeq_synth_layout, scoring);
    F(moeq_synth_layout, norm_topk_prob); F(moeq_synth_layout, n_group);
    F(moeq_synth_layout, topk_group); F(moeq_synth_layout, routed_scaling_factor);
    F(moeq_synth_layout, correction_bias); F(moeq_synth_layout, num_attention_heads);
    F(moeq_synth_layout, num_key_value_heads); F(moeq_synth_layout, vocab_size);
    F(moeq_synth_layout, dtype); F(moeq_synth_layout, seed); F(moeq_synth_layout, shards);
    F(moeq_synth_layout, calibration_tokens); F(moeq_synth_layout, weight_std);
    F(moeq_synth_layout, n_groups); F(moeq_synth_layout, groups);
    F(moeq_synth_layout, n_ignore); F(moeq_synth_layout, ignore);
    end();
    S(moeq_inspect_summary);
    F(moeq_inspect_summary, tensors); F(moeq_inspect_summary, modules);
    F(moeq_inspect_summary, moe_layers); F(moeq_inspect_summary, expert_modules);
    F(moeq_inspect_summary, quantized); F(moeq_inspect_summary, ignored);
    F(moeq_inspect_summary, unmatched); F(moeq_inspect_summary, unconsumed);
    F(moeq_inspect_summary, missing); F(moeq_inspect_summary, errors);
    F(moeq_inspect_summary, warnings);
    end();
    S(moeq_model_layer_info);
    F(moeq_model_layer_info, prefix); F(moeq_model_layer_info, experts);
    F(moeq_model_layer_info, found_experts); F(moeq_model_layer_info, has_bias);
    F(moeq_model_layer_info, proj); F(moeq_model_layer_info, tensors);
    F(moeq_model_layer_info, bytes);
    end();
    S(moeq_model_progress);
    F(moeq_model_progress, layers_done); F(moeq_model_progress, layers);
    F(moeq_model_progress, bytes_done); F(moeq_model_progress, bytes);
    F(moeq_model_progress, seconds); F(moeq_model_progress, layer);
    F(moeq_model_progress, linear);
    end();
    S(moeq_model_load_options);
    F(moeq_model_load_options, threads); F(moeq_model_load_options, select);
    F(moeq_model_load_options, progress); F(moeq_model_load_options, user_data);
    F(moeq_model_load_options, moe_only);
    end();
    S(moeq_model_load_summary);
    F(moeq_model_load_summary, layers); F(moeq_model_load_summary, experts);
    F(moeq_model_load_summary, tensors); F(moeq_model_load_summary, bytes);
    F(moeq_model_load_summary, resident); F(moeq_model_load_summary, seconds);
    F(moeq_model_load_summary, gb_per_s); F(moeq_model_load_summary, rss_before);
    F(moeq_model_load_summary, rss_after); F(moeq_model_load_summary, peak_rss);
    F(moeq_model_load_summary, linear_layers); F(moeq_model_load_summary, linear_tensors);
    F(moeq_model_load_summary, linear_bytes); F(moeq_model_load_summary, linear_resident);
    end();
    printf("\n}\n");
    return 0;
}
