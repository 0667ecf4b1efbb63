#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz corpora (tests/fuzz/corpus/<target>/seed-*).

    python3 tests/fuzz/make_seeds.py

Seeds are deterministic and small; the corpora also hold inputs that once
found a bug (crash-*, leak-*, timeout-*, named after what they found) and the
coverage long fuzz runs reached (cov-<sha1>, merged with
`fuzz_<target> -merge=1 -use_counters=0 tests/fuzz/corpus/fuzz_<target> WORKDIR`),
which this script never touches.  The input layouts are described at the top of
each fuzz_<target>.c.
"""
import json
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def read(*parts):
    with open(os.path.join(ROOT, *parts), "rb") as f:
        return f.read()


def group_config(weights, inputs="null", fmt="pack-quantized", targets='["re:.*experts.*"]',
                 ignore='["lm_head"]'):
    return ('{"quant_method":"compressed-tensors","format":"mixed-precision","ignore":%s,'
            '"config_groups":{"g":{"targets":%s,"format":"%s","weights":%s,'
            '"input_activations":%s}}}' % (ignore, targets, fmt, weights, inputs))


# ---- fuzz_config: real configs and edge cases ---------------------------------------
CONFIGS = sorted(os.listdir(os.path.join(ROOT, "tests", "data", "configs")))
for name in CONFIGS:
    if name.endswith(".json"):
        put("fuzz_config", name, read("tests", "data", "configs", name))
put("fuzz_config", "glm-5.3-tool-demo.json", read("tools", "data", "glm-5.3-int4-int8mix.json"))
EDGE_CONFIGS = {
    "empty-object.json": "{}",
    "bare-block.json": '{"config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":4}}}}',
    "text-config.json": '{"model_type":"x","text_config":{"quantization_config":'
                        '{"quant_method":"compressed-tensors","config_groups":{"g":{"targets":'
                        '["Linear"],"weights":{"num_bits":8,"type":"float"}}}},"num_experts":8}}',
    "legacy-compression-config.json": '{"compression_config":{"quant_method":"sparseml",'
                                      '"config_groups":{"g":{"targets":["Linear"],"weights":'
                                      '{"num_bits":4,"group_size":128}}}}}',
    "preset.json": '{"quantization_config":{"quant_method":"compressed-tensors",'
                   '"config_groups":{"W4A16":["Linear"],"FP8_DYNAMIC":["re:.*experts.*"]}}}',
    "kv-cache.json": '{"quant_method":"compressed-tensors","kv_cache_scheme":{"num_bits":8,'
                     '"type":"float","strategy":"tensor","dynamic":false},"config_groups":{}}',
    "hostile-regex.json": group_config('{"num_bits":4,"group_size":32}',
                                       targets='["re:(a+)+$","re:(.*a){20}","re:(x|xx)+y"]',
                                       ignore='["re:(\\\\w+\\\\s?)*$"]'),
    "bad-regex.json": group_config('{"num_bits":4}', targets='["re:model.(layers"]'),
    "unicode.json": group_config('{"num_bits":4,"group_size":32}',
                                 targets='["re:caf\\u00e9.*","\\u00e9"]'),
    "truncated.json": '{"quant_method":"compressed-tensors","config_groups":{"g":{"targets":["Lin',
    "deep-nesting.json": "[" * 2000 + "]" * 2000,
    "numbers.json": '{"config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":'
                    '1e400,"group_size":-0.5}}}}',
    "block-fp8.json": group_config('{"num_bits":8,"type":"float","strategy":"block",'
                                   '"block_structure":[128,128]}',
                                   '{"num_bits":8,"type":"float","strategy":"group",'
                                   '"group_size":128,"dynamic":true}', "float-quantized"),
    "nvfp4.json": group_config('{"num_bits":4,"type":"float","strategy":"tensor_group",'
                               '"group_size":16}', '{"num_bits":4,"type":"float","strategy":'
                               '"tensor_group","group_size":16,"dynamic":"local"}',
                               "nvfp4-pack-quantized"),
}
for name, text in EDGE_CONFIGS.items():
    put("fuzz_config", name, text)

# ---- fuzz_resolve: flags, knobs, config, NUL, name -----------------------------------
GLM = read("tools", "data", "glm-5.3-int4-int8mix.json")


def resolve_seed(flags, knobs, config, name):
    if isinstance(config, str):
        config = config.encode()
    if isinstance(name, str):
        name = name.encode()
    return bytes([flags, knobs]) + config + b"\0" + name


put("fuzz_resolve", "glm-experts", resolve_seed(1, 3, GLM, "model.layers.3.mlp.experts"))
put("fuzz_resolve", "glm-attn", resolve_seed(0, 0, GLM, "model.layers.3.self_attn.o_proj"))
put("fuzz_resolve", "glm-qkv-engine", resolve_seed(4, 0, GLM, "model.layers.0.self_attn.qkv_proj"))
put("fuzz_resolve", "glm-npu", resolve_seed(0x41, 7, GLM, "model.layers.5.mlp.experts"))
put("fuzz_resolve", "glm-fused-null", resolve_seed(0x30, 0, GLM, "model.layers.0.mlp.gate_up"))
put("fuzz_resolve", "glm-proj-w1w3w2", resolve_seed(1, 0x09, GLM, "model.layers.1.mlp.experts"))
for i, c in enumerate(["llama2c-stories110m-w4a16-g128-pack-quantized.json",
                       "llama-3.1-8b-instruct-fp8-dynamic-channel-token.json",
                       "meta-llama-3-8b-mxfp4-w4a4-ct-readme.json",
                       "qwen3-w8a8-int8-mse-observer-v0.13.json"]):
    put("fuzz_resolve", "real-%d" % i, resolve_seed(1, 0x23, read("tests", "data", "configs", c),
                                                    "model.layers.1.mlp.experts"))
HOSTILE = [
    ("re:(a+)+$", "a" * 40 + "b"),
    ("re:(a|aa)+$", "a" * 60 + "!"),
    ("re:(.*a){25}", "a" * 30),
    ("re:(\\\\w+\\\\s?)*$", "model layers experts " * 4 + "!"),
    ("re:(x+x+)+y", "x" * 50),
    ("re:((a*)*)*b", "a" * 64),
]
for i, (pattern, name) in enumerate(HOSTILE):
    cfg = group_config('{"num_bits":4,"group_size":32}', targets='["%s"]' % pattern)
    put("fuzz_resolve", "hostile-target-%d" % i, resolve_seed(0, 0, cfg, name))
    cfg = group_config('{"num_bits":4,"group_size":32}', targets='["Linear"]',
                       ignore='["%s"]' % pattern)
    put("fuzz_resolve", "hostile-ignore-%d" % i, resolve_seed(1, 1, cfg, name))
cfg = group_config('{"num_bits":4,"group_size":32}', targets='["re:.*experts.*","Linear"]')
put("fuzz_resolve", "bad-utf8-name", resolve_seed(0, 0, cfg, b"model.\xff\xfe.experts"))
put("fuzz_resolve", "overlong-utf8-name", resolve_seed(1, 0, cfg, b"model.\xc0\xae.experts"))
put("fuzz_resolve", "surrogate-name", resolve_seed(1, 0, cfg, b"m.\xed\xa0\x80.x"))
put("fuzz_resolve", "empty-name", resolve_seed(0, 0, cfg, b""))
put("fuzz_resolve", "bad-kind", resolve_seed(3, 0, cfg, "model.layers.0.mlp.experts"))
mixed = ('{"quant_method":"compressed-tensors","config_groups":{'
         '"a":{"targets":["re:.*experts\\\\.[0-3]\\\\..*"],"weights":{"num_bits":4,"group_size":32}},'
         '"b":{"targets":["re:.*experts.*"],"weights":{"num_bits":8,"group_size":-1}}}}')
put("fuzz_resolve", "experts-disagree", resolve_seed(1, 7, mixed, "model.layers.0.mlp.experts"))
put("fuzz_resolve", "plan-lines", resolve_seed(1, 0, GLM, "model.layers.0.self_attn.q_a_proj\n"
                                              "model.layers.3.mlp.experts moe 8\n# comment\n\n"
                                              "model.layers.4.block_sparse_moe.experts moe 2 w1,w3,w2\n"
                                              "x moe\n"))

# ---- fuzz_safetensors: mode, config, file ----------------------------------------------
CASES = json.loads(read("tests", "data", "conformance", "index.json"))["cases"]
for i, case in enumerate(CASES):
    data = read("tests", "data", "conformance", case + ".safetensors")
    put("fuzz_safetensors", "conformance-%s" % case, bytes([0x00 | (0x08 if i % 2 else 0), i]) + data)
small = read("tests", "data", "conformance", "int4_tensor_asym_bf16.safetensors")
put("fuzz_safetensors", "as-model-dir", bytes([3, 4]) + small)
put("fuzz_safetensors", "dir-with-neighbour", bytes([2, 4]) + small)
put("fuzz_safetensors", "names-only", bytes([0x10, 4]) + small)
g32 = read("tests", "data", "conformance", "int4_group32_sym_bf16.safetensors")
put("fuzz_safetensors", "load-into-layer", bytes([0x80, 0]) + g32)
put("fuzz_safetensors", "load-into-layer-stop", bytes([0x83, 0]) + g32)
index = {"metadata": {"total_size": 100},
         "weight_map": {"x.weight": "model-00001-of-00002.safetensors",
                        "x.bias": "model-00001-of-00002.safetensors",
                        "y.weight_packed": "model-00002-of-00002.safetensors",
                        "y.weight_scale": "model-00002-of-00002.safetensors",
                        "y.weight_shape": "model-00002-of-00002.safetensors"}}
put("fuzz_safetensors", "index", bytes([1, 1]) + json.dumps(index).encode())
put("fuzz_safetensors", "index-by-path", bytes([5, 1]) + json.dumps(index).encode())
bad = dict(index)
bad["weight_map"] = dict(index["weight_map"], **{"z": "../etc/passwd"})
put("fuzz_safetensors", "index-escape", bytes([1, 0]) + json.dumps(bad).encode())
wrong = dict(index)
wrong["weight_map"] = dict(index["weight_map"], **{"x.weight": "model-00002-of-00002.safetensors"})
put("fuzz_safetensors", "index-wrong-shard", bytes([1, 0]) + json.dumps(wrong).encode())


def st_file(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


put("fuzz_safetensors", "overlap", bytes([0, 0]) + st_file(
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12))
put("fuzz_safetensors", "metadata", bytes([0, 0]) + st_file(
    {"__metadata__": {"format": "pt"}, "a": {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]}},
    b"\0\0"))
put("fuzz_safetensors", "huge-shape", bytes([0, 0]) + st_file(
    {"a": {"dtype": "F64", "shape": [2**40, 2**40], "data_offsets": [0, 0]}}))
put("fuzz_safetensors", "header-too-long", bytes([0, 0]) + struct.pack("<Q", 2**40) + b"{}")

# ---- fuzz_loader: one seed per variant, plus a few with records -----------------------
N_VARIANTS = 30
rng = random.Random(1234)
for v in range(N_VARIANTS):
    dims = rng.randrange(256) & 0x7F  # no expert-parallel bit games in the plain seeds
    lk = rng.randrange(256) & ~0x10 & 0xFF
    head = bytes([v, dims, lk, 0, 0, 0])
    apply = bytes([2 + (rng.randrange(4) << 3), 1, 0]) + bytes(rng.randrange(256) for _ in range(600))
    put("fuzz_loader", "variant-%02d" % v, head + apply)
    # records: a guided tensor with each kind of mistake, raw tensors, pokes
    recs = bytearray()
    for m in range(12):
        recs += bytes([1, rng.randrange(256), rng.randrange(256), rng.randrange(3),
                       rng.randrange(256), m, rng.randrange(256)])
    recs += bytes([2, 20]) + b"model.layers.3.mlp.e" + bytes([2, 2, 4, 4, 0])
    recs += bytes([3, 0, 0, 0, 0, 0, 4]) + b"\xff\xff\xff\x7f"
    recs += bytes([4, 5, 6])
    n_rec = 12 + 4
    fill = (v % 4) << 4
    head = bytes([v, dims, lk, 0, fill, n_rec])
    put("fuzz_loader", "records-%02d" % v, head + bytes(recs) + apply)
# hostile args straight into moeq_moe_create
for field in range(16):
    head = bytes([2 + field % 20, 0x15, 0, 0x80 | field, 0, 0]) + struct.pack("<i", 1000 + field)
    put("fuzz_loader", "corrupt-args-%02d" % field, head + bytes(64))
# ids and weights from moeq_route (softmax, sigmoid with a bias, grouped)
for i, (v, style, rk) in enumerate([(2, 0x10, 0x00), (20, 0x10, 0x85), (16, 0x30, 0x91)]):
    put("fuzz_loader", "route-%d" % i,
        bytes([v, 0x07, 0, 0, 0, 0, 3, 1, style]) + bytes(rng.randrange(256) for _ in range(300))
        + bytes([rk]) + bytes(64))
# NaN and Inf inputs, NaN weights, out-of-range ids
put("fuzz_loader", "nan-inputs", bytes([2, 0x05, 0, 0, 0, 0, 3, 1, 0x06]) + bytes(200))
put("fuzz_loader", "bad-ids", bytes([2, 0x07, 0, 0, 0, 0, 3, 1, 0x08]) + bytes([0xff] * 200))
