#!/usr/bin/env python3
"""Cross-check moeq's synthetic checkpoints against compressed-tensors itself.

Runs synth_dump (built with the tests) to write every preset of
moeq_synth_write, plus moeq's dequantized weights and the original weights
(<preset>.reference.safetensors), then checks with compressed-tensors' own
code (tested with 0.18.0):

1. config.json is exactly what json.dump(indent=2, sort_keys=True) writes,
   and its quantization_config is exactly what CT writes for the same
   QuantizationConfig (model_validate, then model_compressor.update_config's
   dump: version, quant_method, sparsity_config, transform_config, model_dump).
2. Which modules are quantized, and by which group: CT's
   apply_quantization_config on a meta-device model with the checkpoint's
   module names (nn.Linear, nn.Embedding, norms) must attach exactly the
   schemes moeq_resolve chose.
3. For every quantized module, CT's registered compressor's decompress of the
   stored tensors equals moeq_dequantize bit for bit (in CT's output dtype);
   for block strategies CT's dequantize with the config's args, because its
   decompress infers the block size from the scale shape (spec §4.2).
4. For every quantized module, CT's calculate_qparams (memoryless min/max
   observer, as tests/conformance/make_fixtures.py) and compress, run on the
   original weight (with the checkpoint's g_idx and NVFP4 global scale, which
   llm-compressor shares between gate and up), reproduce every stored weight_*
   tensor byte for byte.
5. For every module with static input tensors, CT's calculate_qparams (the
   static_minmax observer over the calibration batch) or generate_gparam
   (NVFP4 "local" inputs) reproduce input_scale, input_zero_point and
   input_global_scale byte for byte.

Usage: python crosscheck_synth.py path/to/synth_dump [preset ...]
Exit status 0 when every check passes.
"""

import json
import os
import sys
import tempfile

import torch
from safetensors import safe_open

import compressed_tensors
from compressed_tensors.compressors.base import BaseCompressor
from compressed_tensors.quantization import QuantizationConfig
from compressed_tensors.quantization.lifecycle.apply import apply_quantization_config
from compressed_tensors.quantization.lifecycle.forward import dequantize
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import cell_min_max, val  # noqa: E402  (the fixtures' observer)

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class RMSNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(n))


def set_submodule(root, name, module):
    parts = name.split(".")
    node = root
    for p in parts[:-1]:
        if not hasattr(node, p):
            node.add_module(p, torch.nn.Module())
        node = getattr(node, p)
    node.add_module(parts[-1], module)


def load_all(paths):
    out = {}
    for path in paths:
        with safe_open(path, framework="pt") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k)
    return out


def checkpoint_files(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            return sorted({os.path.join(d, v) for v in json.load(f)["weight_map"].values()})
    return [os.path.join(d, "model.safetensors")]


class Skipped(Exception):
    """A preset this compressed-tensors version cannot read (the reason)."""


CT_VERSION = tuple(int(x) for x in compressed_tensors.__version__.split(".")[:2])


def check_config_text(d):
    with open(os.path.join(d, "config.json")) as f:
        text = f.read()
    cfg = json.loads(text)
    assert json.dumps(cfg, indent=2, sort_keys=True) == text, "config.json is not json.dump's text"
    qc = cfg["quantization_config"]
    if CT_VERSION >= (0, 20) and any(
            (g.get("weights") or {}).get("actorder") in ("group", "dynamic", True)
            for g in qc.get("config_groups", {}).values()):
        raise Skipped("compressed-tensors 0.20 refuses actorder 'group' ('has been removed')")
    q = QuantizationConfig.model_validate(qc)
    ct = {"version": compressed_tensors.__version__, "quant_method": "compressed-tensors",
          "sparsity_config": {}, "transform_config": {}, **q.model_dump(exclude=["quant_method"])}
    ct = json.loads(json.dumps(ct))
    if CT_VERSION >= (0, 20):
        # moeq writes 0.18's dump (every field, version 0.18.0); 0.20 dumps only
        # the fields that were set and adds moe_sparsity_config.  What must agree
        # is what 0.20 reads from either text.
        assert QuantizationConfig.model_validate(ct) == q, (
            "quantization_config reads differently in CT:\n" + json.dumps(ct, indent=2, sort_keys=True))
        return cfg, q
    assert ct == qc, ("quantization_config differs from CT's dump:\n" +
                      json.dumps(ct, indent=2, sort_keys=True))
    return cfg, q


def build_model(tensors, dtype):
    """A meta-device model with the checkpoint's modules, for CT's matcher."""
    with torch.device("meta"):
        model = torch.nn.Module()
        done = set()
        for name, t in tensors.items():
            module, _, param = name.rpartition(".")
            if param not in ("weight", "weight_packed") or module in done:
                continue
            done.add(module)
            if "norm" in module.rsplit(".", 1)[-1]:
                set_submodule(model, module, RMSNorm(t.shape[0]))
            elif module.endswith("embed_tokens"):
                set_submodule(model, module, torch.nn.Embedding(t.shape[0], t.shape[1]))
            else:
                rows = t.shape[0]
                cols = int(tensors[module + ".weight_shape"][1]) if param == "weight_packed" and \
                    module + ".weight_shape" in tensors else None
                if cols is None:
                    cols = t.shape[1] * (2 if param == "weight_packed" else 1)
                set_submodule(model, module, torch.nn.Linear(cols, rows, bias=False, dtype=dtype))
    return model


def same_bytes(a, b):
    a, b = a.contiguous(), b.contiguous()
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.view(torch.uint8) if a.element_size() == 1 else a.view(-1).view(torch.uint8),
        b.view(torch.uint8) if b.element_size() == 1 else b.view(-1).view(torch.uint8))


def recompress(module, state, original, scheme, dtype):
    """CT's qparams + compress on the original weight; returns the weight_* tensors."""
    args = scheme.weights
    w = original.to(dtype)
    st = {"weight": w}
    perm = None
    g_idx = state.get("weight_g_idx")
    if g_idx is not None:
        st["weight_g_idx"] = g_idx
        if not bool((g_idx == -1).any()):
            perm = torch.argsort(g_idx, stable=True)
    mn, mx = cell_min_max(w, args, perm)
    gs = state.get("weight_global_scale")
    if gs is not None:
        st["weight_global_scale"] = gs
    scale, zp = calculate_qparams(mn, mx, args, global_scale=gs)
    st["weight_scale"] = scale.to(dtype)
    if not args.symmetric:
        st["weight_zero_point"] = zp
    compressor = BaseCompressor.get_value_from_registry(val(scheme.format))
    return compressor.compress(st, scheme)


def check_preset(out, preset):
    d = os.path.join(out, preset)
    cfg, q = check_config_text(d)
    dtype = DTYPES[cfg["torch_dtype"]]
    tensors = load_all(checkpoint_files(d))
    ref = load_all([os.path.join(out, preset + ".reference.safetensors")])
    model = build_model(tensors, dtype)
    apply_quantization_config(model, q, show_progress=False)
    n_quant = n_dense = 0
    for key in sorted(ref):
        module, _, what = key.rpartition(".")
        if what != "original":
            continue
        scheme = getattr(model.get_submodule(module), "quantization_scheme", None)
        ct_quantized = (scheme is not None and scheme.weights is not None and
                        val(scheme.format) != "dense")
        moeq_quantized = module + ".moeq" in ref
        assert ct_quantized == moeq_quantized, (
            f"{module}: CT {'quantizes' if ct_quantized else 'does not quantize'} it, moeq "
            f"{'does' if moeq_quantized else 'does not'}")
        state = {k.rpartition(".")[2]: v for k, v in tensors.items()
                 if k.rpartition(".")[0] == module}
        if not ct_quantized:
            assert torch.equal(state["weight"].float(), ref[key]), f"{module}: dense weight differs"
            n_dense += 1
            continue
        n_quant += 1
        # 3. CT's decompress == moeq_dequantize
        compressor = BaseCompressor.get_value_from_registry(val(scheme.format))
        weight_state = {k: v for k, v in state.items() if k.startswith("weight")}
        if val(scheme.weights.strategy) == "block":
            # CT's decompress infers the block size from the scale's shape
            # (spec §4.2) and a [rows/128, 1] scale reads as per-channel, so
            # a 128-wide down_proj raises there; CT's own dequantize with the
            # config's args is the reference (as in make_fixtures.py).
            ct_w = dequantize(weight_state["weight"], weight_state["weight_scale"],
                              args=scheme.weights, dtype=weight_state["weight_scale"].dtype)
        else:
            ct_w = compressor.decompress(dict(weight_state), scheme)["weight"]
        moeq_w = ref[module + ".moeq"].to(ct_w.dtype)
        assert torch.equal(ct_w.view(-1).view(torch.uint8) if ct_w.element_size() > 1 else ct_w,
                           moeq_w.view(-1).view(torch.uint8) if moeq_w.element_size() > 1 else moeq_w), \
            f"{module}: CT decompress differs from moeq_dequantize " \
            f"(max |diff| {(ct_w.float() - ref[module + '.moeq']).abs().max().item():g})"
        # 4. CT's compress of the original == the stored tensors
        ct_state = recompress(module, state, ref[key], scheme, dtype)
        stored = {k for k in state if k.startswith("weight")}
        made = {k for k in ct_state if k.startswith("weight")}
        assert stored == made, f"{module}: stored {sorted(stored)}, CT writes {sorted(made)}"
        for k in sorted(made):
            assert same_bytes(ct_state[k], state[k]), f"{module}.{k}: differs from CT's compress"
    n_inputs = 0
    for key in sorted(ref):
        module, _, what = key.rpartition(".")
        if what != "calibration":
            continue
        n_inputs += 1
        args = model.get_submodule(module).quantization_scheme.input_activations
        x = ref[key].to(dtype)
        mn, mx = x.amin().reshape(1), x.amax().reshape(1)
        if args.dynamic == "local" or val(args.dynamic) == "local":
            want = {"input_global_scale": generate_gparam(mn, mx)}
        else:
            scale, zp = calculate_qparams(mn, mx, args)
            want = {"input_scale": scale.to(dtype)}
            if not args.symmetric:
                want["input_zero_point"] = zp
        stored = {k.rpartition(".")[2] for k in tensors
                  if k.rpartition(".")[0] == module and k.rpartition(".")[2].startswith("input_")}
        assert stored == set(want), f"{module}: stored {sorted(stored)}, CT stores {sorted(want)}"
        for k, v in want.items():
            assert same_bytes(v, tensors[module + "." + k]), \
                f"{module}.{k}: {tensors[module + '.' + k]} differs from CT's {v}"
    print(f"{preset:24s} ok: {n_quant} quantized modules match CT (decompress and compress), "
          f"{n_dense} dense, {n_inputs} with static input tensors")
    return n_quant


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    dump = sys.argv[1]
    presets = sys.argv[2:]
    with tempfile.TemporaryDirectory(prefix="moeq_crosscheck_") as out:
        rc = os.system(" ".join([dump, out] + presets) + " > " + os.path.join(out, "dump.log"))
        with open(os.path.join(out, "dump.log")) as f:
            lines = f.read().split("\n")
        if rc != 0:
            print("synth_dump failed", file=sys.stderr)
            return 1
        names = presets or [ln.split()[0] for ln in lines if ln.strip()]
        failures = skipped = 0
        for p in names:
            try:
                check_preset(out, p)
            except Skipped as e:
                skipped += 1
                print(f"{p:24s} skipped: {e}")
            except AssertionError as e:
                failures += 1
                print(f"{p:24s} FAILED: {e}")
        print(f"compressed-tensors {compressed_tensors.__version__}, torch "
              f"{torch.__version__.split('+')[0]}: {len(names) - failures - skipped}/"
              f"{len(names) - skipped} presets agree ({skipped} skipped)")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
