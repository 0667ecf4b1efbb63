#!/usr/bin/env python3
"""Generate the compressed-tensors conformance fixtures for moeq.

Every number in the fixtures comes from the public ``compressed-tensors``
package's own code (tested with 0.18.0 and 0.20.1): its ``calculate_qparams`` /
``generate_gparam`` for the quantization parameters, its registered
compressors for ``compress`` and ``decompress``.  The only stand-in is the
observer: a memoryless min/max over each scale cell, which is what
llm-compressor's default ``memoryless_minmax`` weight observer computes.

For each case this writes, under tests/data/conformance/:
  <case>.safetensors  the compressed tensors under CT's names
                      (``<module>.weight_packed`` ...), plus
                      ``weight_orig``  the source weight in the model dtype and
                      ``expected``     CT's decompressed weight as F32
  <case>.json         what the case is: format, args, shapes, dtypes, notes
and index.json listing the cases.  moeq's tests/check_conformance.c reads
them; CI needs no torch.

The output directory follows the package's version: tests/data/conformance/
for 0.18 (kept: old checkpoints stay valid, including actorder "group" with
g_idx), tests/data/conformance_0.20/ for 0.20 and later.  0.20 refuses
actorder "group" (its QuantizationArgs raises "has been removed"), and adds
MXFP6 (mxfp6-pack-quantized); cases a version cannot write are skipped and
listed in index.json under "skipped".

Usage: /work/ctvenv/bin/python tests/conformance/make_fixtures.py [outdir]      (0.18)
       /work/venv-torch/bin/python tests/conformance/make_fixtures.py [outdir]  (0.20.1)
"""

import json
import math
import os
import sys

import torch
from safetensors.torch import save_file

import compressed_tensors
from compressed_tensors.compressors.base import BaseCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from compressed_tensors.quantization.lifecycle.forward import dequantize
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

MODULE = "model.layers.0.mlp.experts.0.up_proj"
HERE = os.path.dirname(os.path.abspath(__file__))
CT_VERSION = tuple(int(x) for x in compressed_tensors.__version__.split(".")[:2])
DEFAULT_OUT = os.path.join(HERE, "..", "data",
                           "conformance" if CT_VERSION < (0, 20) else "conformance_0.20")

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
ST_NAMES = {
    torch.bfloat16: "BF16", torch.float32: "F32", torch.float16: "F16", torch.int8: "I8",
    torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8", torch.float8_e4m3fn: "F8_E4M3",
}

# name, format, weight dtype, [out, in], QuantizationArgs, options
CASES = [
    ("int4_group32_sym_bf16", "pack-quantized", "bfloat16", (24, 128),
     dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32), {}),
    ("int4_group32_asym_bf16", "pack-quantized", "bfloat16", (24, 128),
     dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=32),
     {"zero_group": True}),
    ("int4_channel_sym_bf16", "pack-quantized", "bfloat16", (20, 96),
     dict(num_bits=4, type="int", symmetric=True, strategy="channel"), {}),
    ("int4_channel_asym_f32", "pack-quantized", "float32", (20, 96),
     dict(num_bits=4, type="int", symmetric=False, strategy="channel"), {}),
    ("int4_tensor_asym_bf16", "pack-quantized", "bfloat16", (8, 64),
     dict(num_bits=4, type="int", symmetric=False, strategy="tensor"), {}),
    ("int8_group64_asym_bf16", "pack-quantized", "bfloat16", (16, 128),
     dict(num_bits=8, type="int", symmetric=False, strategy="group", group_size=64), {}),
    ("int8_channel_sym_bf16", "pack-quantized", "bfloat16", (16, 64),
     dict(num_bits=8, type="int", symmetric=True, strategy="channel"), {}),
    ("int4_group16_actorder_sym_bf16", "pack-quantized", "bfloat16", (12, 64),
     dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=16,
          actorder="group"), {}),
    ("int4_group16_actorder_asym_f32", "pack-quantized", "float32", (12, 64),
     dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=16,
          actorder="group"), {}),
    ("int3_group32_asym_bf16", "pack-quantized", "bfloat16", (10, 96),
     dict(num_bits=3, type="int", symmetric=False, strategy="group", group_size=32), {}),
    ("int8_int_quantized_channel_sym_bf16", "int-quantized", "bfloat16", (16, 64),
     dict(num_bits=8, type="int", symmetric=True, strategy="channel"), {}),
    ("int8_int_quantized_tensor_asym_f16", "int-quantized", "float16", (8, 48),
     dict(num_bits=8, type="int", symmetric=False, strategy="tensor"), {}),
    ("fp8_tensor_bf16", "float-quantized", "bfloat16", (16, 64),
     dict(num_bits=8, type="float", symmetric=True, strategy="tensor"), {}),
    ("fp8_channel_bf16", "float-quantized", "bfloat16", (16, 64),
     dict(num_bits=8, type="float", symmetric=True, strategy="channel"), {}),
    ("fp8_block_nondivisible_bf16", "float-quantized", "bfloat16", (40, 72),
     dict(num_bits=8, type="float", symmetric=True, strategy="block", block_structure=[16, 32]),
     {}),
    ("nvfp4_bf16", "nvfp4-pack-quantized", "bfloat16", (16, 64),
     dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16,
          scale_dtype="float8_e4m3fn"), {"zero_group": True}),
    ("nvfp4_f32", "nvfp4-pack-quantized", "float32", (8, 32),
     dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16,
          scale_dtype="float8_e4m3fn"), {}),
    ("mxfp4_bf16", "mxfp4-pack-quantized", "bfloat16", (16, 128),
     dict(num_bits=4, type="float", symmetric=True, strategy="group", group_size=32,
          scale_dtype="uint8"), {"zero_group": True}),
    ("mxfp8_bf16", "mxfp8-quantized", "bfloat16", (8, 64),
     dict(num_bits=8, type="float", symmetric=True, strategy="group", group_size=32,
          scale_dtype="uint8"), {}),
    # amax values where generate_gparam's 2688 / amax, which torch evaluates as
    # amax.reciprocal() * 2688 (two roundings), differs from one correctly
    # rounded division
    ("nvfp4_gscale_rounding_bf16", "nvfp4-pack-quantized", "bfloat16", (8, 32),
     dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16,
          scale_dtype="float8_e4m3fn"), {"amax": 0.55078125}),
    ("nvfp4_gscale_rounding_f32", "nvfp4-pack-quantized", "float32", (8, 32),
     dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16,
          scale_dtype="float8_e4m3fn"), {"amax": 2.0383694171905518}),
    # new in 0.20: FP6 E2M3 codes, four in three bytes, E8M0 scales per 32
    ("mxfp6_bf16", "mxfp6-pack-quantized", "bfloat16", (16, 128),
     dict(num_bits=6, type="float", symmetric=True, strategy="group", group_size=32,
          scale_dtype="uint8"), {"zero_group": True, "since": (0, 20)}),
    ("mxfp6_f32", "mxfp6-pack-quantized", "float32", (8, 64),
     dict(num_bits=6, type="float", symmetric=True, strategy="group", group_size=32,
          scale_dtype="uint8"), {"since": (0, 20)}),
    # a group max just under and at the E2M3 rounding edge (7.5 * 2^k vs 7.75 * 2^k)
    ("mxfp6_scale_edge_bf16", "mxfp6-pack-quantized", "bfloat16", (8, 32),
     dict(num_bits=6, type="float", symmetric=True, strategy="group", group_size=32,
          scale_dtype="uint8"), {"amax": 0.96875, "since": (0, 20)}),
]


def val(e):
    """Enum fields come back as plain strings (use_enum_values)."""
    return getattr(e, "value", e)


def make_weight(shape, dtype, seed, zero_group):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(shape, generator=g) * 0.05
    # a few outliers, so that group maxima differ a lot
    idx = torch.randint(0, w.numel(), (max(1, w.numel() // 97),), generator=g)
    w.view(-1)[idx] *= 8.0
    if zero_group:
        w[1, :32] = 0.0  # an all-zero group: eps scales, NaN zero points
    return w.to(dtype)


def cell_min_max(w, args, perm):
    """memoryless_minmax over each scale cell, in the weight's dtype."""
    rows, cols = w.shape
    s = val(args.strategy)
    if s == "tensor":
        return w.amin().reshape(1), w.amax().reshape(1)
    if s == "channel":
        return w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
    if s in ("group", "tensor_group"):
        x = w if perm is None else w[:, perm]
        gs = args.group_size
        x = x.reshape(rows, math.ceil(cols / gs), gs)
        return x.amin(dim=-1), x.amax(dim=-1)
    if s == "block":
        bh, bw = args.block_structure
        pr, pc = (-rows) % bh, (-cols) % bw
        x = torch.nn.functional.pad(w, (0, pc, 0, pr))
        x = x.reshape((rows + pr) // bh, bh, (cols + pc) // bw, bw)
        return x.amin(dim=(1, 3)), x.amax(dim=(1, 3))
    raise ValueError(s)


def tensor_args_json(args):
    # 0.20 dumps only the fields that were set; the others are read back
    # (a symmetric zp_dtype stays null, as 0.18 wrote it)
    d = args.model_dump(mode="json")
    out = {}
    for k in ("num_bits", "type", "symmetric", "group_size", "strategy", "block_structure",
              "dynamic", "actorder", "scale_dtype", "zp_dtype"):
        if k in d:
            out[k] = d[k]
            continue
        v = getattr(args, k, None)
        if k == "zp_dtype" and args.symmetric:
            v = None
        out[k] = str(v) if isinstance(v, torch.dtype) else val(v)
    return out


def build(name, fmt, dtype_name, shape, arg_kw, opts, seed, outdir):
    dtype = DTYPES[dtype_name]
    args = QuantizationArgs(**arg_kw)
    scheme = QuantizationScheme(targets=["Linear"], weights=args, format=fmt)
    w = make_weight(shape, dtype, seed, opts.get("zero_group", False))
    if "amax" in opts:  # pin the tensor's absolute maximum
        a = opts["amax"]
        w = w.float().clamp(-0.9 * a, 0.9 * a)
        w[0, 0] = -a
        w = w.to(dtype)
    rows, cols = shape
    notes = []

    state = {"weight": w}
    perm = None
    if args.actorder is not None and val(args.actorder) == "group":
        g = torch.Generator().manual_seed(seed + 1)
        perm = torch.randperm(cols, generator=g)
        g_idx = torch.empty(cols, dtype=torch.int32)
        g_idx[perm] = (torch.arange(cols) // args.group_size).to(torch.int32)
        state["weight_g_idx"] = g_idx

    mn, mx = cell_min_max(w, args, perm)
    global_scale = None
    if val(args.strategy) == "tensor_group":
        global_scale = generate_gparam(w.amin().reshape(1), w.amax().reshape(1))
        state["weight_global_scale"] = global_scale
    scale, zp = calculate_qparams(mn, mx, args, global_scale=global_scale)
    # The module's scale parameter has the weight's dtype; the observer output
    # is copied into it.
    state["weight_scale"] = scale.to(dtype)
    if not args.symmetric:
        state["weight_zero_point"] = zp

    compressor = BaseCompressor.get_value_from_registry(fmt)
    compressed = compressor.compress(dict(state), scheme)
    try:
        decompressed = compressor.decompress(dict(compressed), scheme)["weight"]
        failure = None
    except Exception as e:  # noqa: BLE001 - recorded in the fixture's notes
        decompressed, failure = None, f"{type(e).__name__}: {e}"
    expected = decompressed
    if val(args.strategy) == "block" and (rows % args.block_structure[0] or
                                          cols % args.block_structure[1]):
        # CT's decompress infers the block size from the scale shape
        # (rows // scale_rows), which is wrong for non-divisible shapes (spec
        # §4.2); CT's own dequantize with the config's args is right.
        expected = dequantize(compressed["weight"], compressed["weight_scale"],
                              args=args, dtype=compressed["weight_scale"].dtype)
        if failure:
            what = "raises " + failure
        else:
            what = "agrees" if torch.equal(expected.float(), decompressed.float()) else "differs"
        notes.append("expected = compressed_tensors dequantize(weight, weight_scale, "
                     f"args=weights); the compressor's decompress {what} (it infers the block "
                     "size from the scale shape)")
    elif failure:
        raise RuntimeError(f"{name}: CT decompress failed: {failure}")

    tensors = {}
    meta = {}
    for k, v in compressed.items():
        v = v.detach().contiguous()
        tensors[f"{MODULE}.{k}"] = v
        meta[k] = {"dtype": ST_NAMES[v.dtype], "shape": list(v.shape)}
    tensors["weight_orig"] = w.contiguous()
    tensors["expected"] = expected.to(torch.float32).contiguous()
    save_file(tensors, os.path.join(outdir, name + ".safetensors"))

    case = {
        "name": name,
        "module": MODULE,
        "format": fmt,
        "weight_dtype": ST_NAMES[dtype],
        "shape": [rows, cols],
        "args": tensor_args_json(args),
        "tensors": meta,
        "expected_dtype": ST_NAMES[expected.dtype],
        "compare": "exact",
        "generator": {"compressed_tensors": compressed_tensors.__version__,
                      "torch": torch.__version__.split("+")[0], "seed": seed},
        "notes": notes,
    }
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(case, f, indent=2, sort_keys=True)
        f.write("\n")
    return case


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)
    index = []
    skipped = []
    for i, (name, fmt, dt, shape, kw, opts) in enumerate(CASES):
        if CT_VERSION < opts.get("since", (0, 0)):
            skipped.append(f"{name}: needs compressed-tensors {opts['since']}")
            continue
        if CT_VERSION >= (0, 20) and kw.get("actorder") == "group":
            skipped.append(f"{name}: 0.20 refuses actorder 'group' (it 'has been removed')")
            continue
        case = build(name, fmt, dt, shape, kw, opts, 1000 + i, outdir)
        index.append(case["name"])
        print(f"{name:40s} {case['format']:22s} {sorted(case['tensors'])}")
    with open(os.path.join(outdir, "index.json"), "w") as f:
        out = {"cases": index, "compressed_tensors": compressed_tensors.__version__}
        if skipped:
            out["skipped"] = skipped
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
