"""Cross-checks src/safetensors.c against the safetensors package.

The package writes checkpoints; `check_safetensors --copy` opens each with
moeq_checkpoint_open and writes every tensor (and the metadata) again with
moeq_safetensors_write.  The copy must be byte for byte the package's file,
and the package must load it back equal.  With torch installed, BF16 and F8
tensors are checked the same way.

Usage: python3 safetensors_package.py PATH/TO/check_safetensors
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file, save_file


def numpy_cases(rng):
    dtypes = ["<f8", "<f4", "<f2", "<i8", "<i4", "<i2", "|i1", "<u8", "<u4", "<u2", "|u1", "|b1"]
    every = {f"layer.{i}.{np.dtype(d).name}": rng.integers(0, 100, size=(2, 3)).astype(d)
             for i, d in enumerate(dtypes)}
    yield "every dtype", every, None
    yield "with metadata", every, {"format": "np"}
    yield "scalars and empty", {"s": np.array(1.5, "<f4"), "e": np.zeros((0, 4), "<f2"),
                                "z": np.zeros((3, 0, 2), "<i8")}, None
    many = {}
    for i in range(300):
        d = dtypes[i % len(dtypes)]
        shape = tuple(int(x) for x in rng.integers(1, 5, size=int(rng.integers(0, 4))))
        many[f"model.layers.{i % 17}.mlp.experts.{i}.w"] = rng.integers(0, 9, size=shape).astype(d)
    yield "300 tensors", many, {"format": "pt"}
    yield "no tensors", {}, None


def copy_and_compare(tool, tmp, label, src, check):
    out = src + ".moeq"
    subprocess.run([tool, "--copy", src, out], check=True)
    with open(src, "rb") as f:
        want = f.read()
    with open(out, "rb") as f:
        got = f.read()
    if got != want:
        sys.exit(f"{label}: bytes differ from the package's file:\n"
                 f"  moeq:    {got[:200]!r}\n  package: {want[:200]!r}")
    check(out)


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(0)
    n = 0
    with tempfile.TemporaryDirectory(prefix="moeq-st-") as tmp:
        for label, tensors, meta in numpy_cases(rng):
            src = os.path.join(tmp, f"{n}.safetensors")
            save_file(tensors, src, metadata=meta)

            def check(out, tensors=tensors, label=label):
                back = load_file(out)
                if back.keys() != tensors.keys() or any(
                        back[k].dtype != v.dtype or back[k].shape != v.shape
                        or not np.array_equal(back[k], v) for k, v in tensors.items()):
                    sys.exit(f"{label}: the package reads back something else")

            copy_and_compare(tool, tmp, label, src, check)
            n += 1
        try:
            import torch
            from safetensors.torch import save_file as save_torch
        except ImportError:
            print("torch not importable: BF16/F8 cases skipped")
        else:
            src = os.path.join(tmp, "torch.safetensors")
            save_torch({"bf16": torch.arange(6, dtype=torch.float32).reshape(2, 3).bfloat16(),
                        "f8": torch.arange(4, dtype=torch.float32).to(torch.float8_e4m3fn),
                        "f8b": torch.arange(3, dtype=torch.float32).to(torch.float8_e5m2),
                        "f32": torch.ones(2)}, src)
            copy_and_compare(tool, tmp, "torch dtypes", src, lambda out: None)
            n += 1
    print(f"{n} checkpoints: identical to the safetensors package")


if __name__ == "__main__":
    main()
