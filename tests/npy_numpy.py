"""Cross-checks tools/npy.c against numpy.

For arrays of every supported dtype and several shapes, numpy writes the file
in format versions 1.0, 2.0 and 3.0; `check_npy --copy` reads each with
npy_read and writes it again with npy_write.  The copy must be byte for byte
what np.save writes, and numpy must load it back equal.

Usage: python3 npy_numpy.py PATH/TO/check_npy
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

CASES = [
    ("<f4", (2, 3)),
    ("<f2", (5,)),
    ("<f8", ()),
    ("<i4", (0,)),
    ("<i8", (3, 1, 2)),
    ("|u1", (7,)),
    ("|i1", (2, 2)),
    ("<u2", (4,)),
    ("<i2", (3,)),
    ("<u4", (2,)),
    ("<u8", (2,)),
    ("|b1", (3,)),
    ("<f4", (1, 2, 3, 1, 2, 3, 1, 2)),
    ("<f4", (123456789, 0)),
    ("|u1", (0, 99999, 99999, 99999, 9, 9, 9, 9)),
    ("<f8", (1000, 3)),
]


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="moeq-npy-") as tmp:
        for i, (descr, shape) in enumerate(CASES):
            dtype = np.dtype(descr)
            if 0 in shape:
                a = np.zeros(shape, dtype)
            else:
                a = rng.integers(0, 100, size=shape).astype(dtype)
            ref = os.path.join(tmp, f"{i}-ref.npy")
            np.save(ref, a)
            with open(ref, "rb") as f:
                want = f.read()
            for version in ((1, 0), (2, 0), (3, 0)):
                src = os.path.join(tmp, f"{i}-v{version[0]}.npy")
                with open(src, "wb") as f:
                    np.lib.format.write_array(f, a, version=version)
                out = os.path.join(tmp, f"{i}-v{version[0]}-moeq.npy")
                subprocess.run([tool, "--copy", src, out], check=True)
                with open(out, "rb") as f:
                    got = f.read()
                if got != want:
                    sys.exit(f"{descr} {shape} v{version}: bytes differ from np.save:\n"
                             f"  moeq:  {got[:128]!r}\n  numpy: {want[:128]!r}")
                b = np.load(out)
                if b.dtype != a.dtype or b.shape != a.shape or not np.array_equal(a, b):
                    sys.exit(f"{descr} {shape} v{version}: numpy reads back something else")
    print(f"{len(CASES)} arrays x 3 format versions: identical to numpy")


if __name__ == "__main__":
    main()
