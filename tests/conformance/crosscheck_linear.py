#!/usr/bin/env python3
"""Cross-check `moeq run` on linear layers against compressed-tensors itself.

For every preset in compressed-tensors' quant_scheme.py (PRESET_SCHEMES; the
package the torch venv holds, 0.20.1), on a random bfloat16 nn.Linear-sized
weight (out 192, in 256):

1. the weight's qparams from CT's calculate_qparams (and generate_gparam for
   NVFP4) over a memoryless min/max of each scale cell, as
   tests/conformance/make_fixtures.py computes them, compressed by the
   compressor CT registers for the format CT infers for an nn.Linear
   (infer_module_format), saved with a config.json whose quantization_config
   is CT's QuantizationConfig dump; static input tensors (FP8 input_scale,
   NVFP4 input_global_scale) from CT's calculate_qparams / generate_gparam over
   a calibration batch;
2. `moeq run DIR --layer model.layers.0.self_attn.o_proj --input X -o Y`;
3. the expected output: x quantized as the preset says (CT's
   compute_dynamic_scales_and_zp and fake_quantize, except dynamic per-token
   int8, which engines quantize with amax/127 where CT's calibration uses
   amax/127.5: the scale is amax/127 and CT's fake_quantize rounds), times
   CT's decompressed weight (the compressor's decompress), summed in float64.

Max |Y - expected| / max |expected| must be within 1e-4 for weight-only
presets, 1e-2 with 8-bit inputs, 5e-2 with 4-bit inputs.  A preset moeq has
no scheme for must be refused by `moeq run` with exit status 1 and the
selection's reason as REJECTED pins it.

Usage: python crosscheck_linear.py path/to/moeq [preset ...]
Exit status 0 when every preset passes, 77 (skip) without torch or CT.
"""

import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.compressors.format import infer_module_format
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.config import CompressionFormat
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus
    from compressed_tensors.quantization.lifecycle.forward import dequantize, fake_quantize
    from compressed_tensors.quantization.quant_scheme import (PRESET_SCHEMES,
                                                              preset_name_to_scheme)
    from compressed_tensors.quantization.utils import (calculate_qparams,
                                                       compute_dynamic_scales_and_zp,
                                                       generate_gparam)
    from safetensors.torch import save_file
except ImportError as e:  # optional dependencies: skip, saying why
    print(f"skipped: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import cell_min_max, make_weight, val  # noqa: E402

MODULE = "model.layers.0.self_attn.o_proj"
OUT, IN, TOKENS, CALIB = 192, 256, 8, 32

# Presets moeq has no scheme for, and the reason its selection gives (the
# UNSUPPORTED line `moeq run` must print, up to the list of each scheme's
# rejection).  A preset listed here that moeq comes to run is checked like the
# others.
def _refused(fmt, weights, inputs):
    return (f"UNSUPPORTED: layer {MODULE} (group group_0, format {fmt}): no MoE scheme "
            f"accepts weights {weights} with input activations {inputs}:")


_INT8_TOKEN = "int8 token sym dynamic"
REJECTED = {
    "W2A4": _refused("int-quantized", "int2 group(128) sym static", "int4 token sym dynamic"),
    "W3A4": _refused("int-quantized", "int3 group(128) sym static", "int4 token sym dynamic"),
    "W4A4": _refused("int-quantized", "int4 group(128) sym static", "int4 token sym dynamic"),
    "W2A8": _refused("int-quantized", "int2 group(128) sym static", _INT8_TOKEN),
    "W3A8": _refused("int-quantized", "int3 group(128) sym static", _INT8_TOKEN),
    "W5A8": _refused("int-quantized", "int5 group(128) sym static", _INT8_TOKEN),
    "W6A8": _refused("int-quantized", "int6 group(128) sym static", _INT8_TOKEN),
    "W7A8": _refused("int-quantized", "int7 group(128) sym static", _INT8_TOKEN),
    "MXFP4XFP8": _refused("mxfp4-pack-quantized", "float4 group(32) sym static",
                          "float8 group(128) sym dynamic"),
    "MXFP6A16": _refused("mxfp6-pack-quantized", "float6 group(32) sym static", "none"),
    "MXFP6A8": _refused("mxfp6-pack-quantized", "float6 group(32) sym static",
                        "float8 group(32) sym dynamic"),
}


def tolerance(scheme):
    a = scheme.input_activations
    if a is None:
        return 1e-4
    return 1e-2 if a.num_bits >= 8 else 5e-2


def quantize_inputs(x, scheme, input_tensors):
    """x [T, K] float32 as the layer's inputs are quantized (see the module doc)."""
    a = scheme.input_activations
    if a is None:
        return x
    strategy = val(a.strategy)
    if val(a.type) == "int" and a.num_bits == 8 and a.dynamic is True and strategy == "token":
        scale = (x.abs().amax(dim=1, keepdim=True).clamp_min(1e-10) / 127.0)
        return fake_quantize(x, scale, torch.zeros_like(scale, dtype=torch.int8), a)
    if a.dynamic is False:  # static per tensor
        return fake_quantize(x, input_tensors["input_scale"],
                             torch.zeros_like(input_tensors["input_scale"]).to(torch.int8), a)
    gs = input_tensors.get("input_global_scale")
    if strategy == "token":  # CT reduces over all but the batch and token dims
        x3 = x.unsqueeze(0)
        scale, zp = compute_dynamic_scales_and_zp(x3, a, None)
        return fake_quantize(x3, scale, zp, a).squeeze(0)
    scale, zp = compute_dynamic_scales_and_zp(x, a, None, global_scale=gs)
    return fake_quantize(x, scale, zp, a, global_scale=gs)


def write_model(name, scheme, directory, seed):
    """Compresses a random weight as CT does; returns (decompressed weight,
    input tensors) after writing model.safetensors and config.json."""
    w = make_weight((OUT, IN), torch.bfloat16, seed, False)
    fmt = CompressionFormat.dense
    tensors, inputs = {}, {}
    if scheme.weights is None:
        tensors["weight"] = w
        w_deq = w.float()
    else:
        args = scheme.weights
        fmt = infer_module_format(torch.nn.Linear, scheme)
        scheme.format = fmt.value
        state = {"weight": w}
        mn, mx = cell_min_max(w, args, None)
        global_scale = None
        if val(args.strategy) == "tensor_group":
            global_scale = generate_gparam(w.amin().reshape(1), w.amax().reshape(1))
            state["weight_global_scale"] = global_scale
        scale, zp = calculate_qparams(mn, mx, args, global_scale=global_scale)
        state["weight_scale"] = scale.to(w.dtype) if scale.is_floating_point() else scale
        if not args.symmetric:
            state["weight_zero_point"] = zp
        compressor = BaseCompressor.get_value_from_registry(fmt.value)
        compressed = compressor.compress(dict(state), scheme)
        # CT's dequantization with 16-bit scales widened to float32 first, so that
        # q * scale is the exact product (as moeq computes it) rather than that
        # product rounded to the scale dtype (CT's output dtype)
        wide = {k: v.float() if k == "weight_scale" and v.dtype in (torch.bfloat16,
                                                                   torch.float16) else v
                for k, v in compressed.items()}
        if fmt == CompressionFormat.nvfp4_pack_quantized:
            # the compressor unpacks to bfloat16 and dequantizes in it; the same
            # steps in float32
            rows, half = wide["weight_packed"].shape
            codes = unpack_fp4_from_uint8(wide["weight_packed"], rows, 2 * half,
                                          dtype=torch.float32)
            w_deq = dequantize(codes, wide["weight_scale"].float(), args=args,
                               global_scale=wide["weight_global_scale"], dtype=torch.float32)
        elif val(args.strategy) == "block":
            w_deq = dequantize(wide["weight"], wide["weight_scale"], args=args,
                               dtype=torch.float32)
        else:
            w_deq = compressor.decompress(wide, scheme)["weight"].float()
        tensors.update(compressed)
    a = scheme.input_activations
    if a is not None and a.dynamic is not True:
        g = torch.Generator().manual_seed(seed + 7)
        xc = torch.randn(CALIB, IN, generator=g).to(torch.bfloat16)
        if val(a.strategy) == "tensor_group":  # NVFP4: a static global scale
            inputs["input_global_scale"] = generate_gparam(xc.amin().reshape(1),
                                                           xc.amax().reshape(1))
        else:
            s, _ = calculate_qparams(xc.amin().reshape(1), xc.amax().reshape(1), a)
            inputs["input_scale"] = s.to(torch.bfloat16)
        tensors.update(inputs)
    save_file({f"{MODULE}.{k}": v.contiguous() for k, v in tensors.items()},
              os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    qc = QuantizationConfig(config_groups={"group_0": scheme}, format=fmt.value,
                            quantization_status=QuantizationStatus.COMPRESSED)
    cfg = {"model_type": "llama", "hidden_size": IN, "torch_dtype": "bfloat16",
           "quantization_config": qc.model_dump(mode="json") | {
               "quant_method": "compressed-tensors"}}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return w_deq, {k: v.float() for k, v in inputs.items()}


def check(moeq, name, seed):
    scheme = preset_name_to_scheme(name, ["Linear"])
    with tempfile.TemporaryDirectory(prefix="moeq_linear_") as d:
        try:
            w_deq, inputs = write_model(name, scheme, d, seed)
        except Exception as e:  # noqa: BLE001 - CT itself cannot write it
            return f"{name}: compressed-tensors cannot compress it for a Linear: {e}"
        g = torch.Generator().manual_seed(seed + 3)
        x = torch.randn(TOKENS, IN, generator=g)
        np.save(os.path.join(d, "x.npy"), x.numpy())
        r = subprocess.run([moeq, "run", d, "--layer", MODULE, "--input",
                            os.path.join(d, "x.npy"), "-o", os.path.join(d, "y.npy"),
                            "--repeat", "1", "--threads", "2"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            want = REJECTED.get(name)
            line = next((ln for ln in r.stderr.splitlines() if "UNSUPPORTED" in ln), "")
            if r.returncode == 1 and want and line.endswith(want):
                print(f"{name:12s} refused as expected: {want}")
                return None
            return f"{name}: moeq run exited {r.returncode}: {r.stderr.strip()}"
        y = torch.from_numpy(np.load(os.path.join(d, "y.npy"))).double()
    xq = quantize_inputs(x, scheme, inputs).double()
    want = xq @ w_deq.double().T
    err = (y - want).abs().max().item() / want.abs().max().item()
    tol = tolerance(scheme)
    scheme_line = r.stdout.splitlines()[0] if r.stdout else ""
    print(f"{name:12s} {scheme_line.split(': linear, ')[-1]:60s} rel err {err:.2e} "
          f"(tolerance {tol:.0e})")
    if not err <= tol:
        return f"{name}: relative error {err:.3g} over {tol:g}"
    return None


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    moeq = sys.argv[1]
    names = sys.argv[2:] or sorted(PRESET_SCHEMES)
    failures = []
    for i, name in enumerate(names):
        f = check(moeq, name, 1000 + i)
        if f:
            failures.append(f)
            print("FAILED " + f)
    print(f"{len(names) - len(failures)} of {len(names)} presets pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
