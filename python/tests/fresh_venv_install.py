#!/usr/bin/env python3
"""Installs the moeq package into a fresh venv and runs a layer with it.

    fresh_venv_install.py WORKDIR [--isolated] [--sdist] [--library PATH]

What a new user does: `python -m venv`, `pip install ./python`, then
`import moeq` with no environment variable.  The package build (scikit-build-
core + CMake) compiles libmoeq from this checkout and ships it inside the
package; this script checks that the installed package loads that copy, that
a synthetic checkpoint's MoE layer runs and matches the library's float64
reference, and that MOEQ_LIBRARY still overrides the packaged copy.

  --isolated  pip's default build isolation: pip fetches scikit-build-core
              from PyPI into a throw-away build environment (the real user
              path).  Without it, scikit-build-core is installed into the venv
              first and the package is built with --no-build-isolation.
  --sdist     builds an sdist of python/ first and installs from it (checks
              that the sdist carries every C source the build needs).
  --library   a libmoeq.so to check the MOEQ_LIBRARY override with.

Needs PyPI (or a pip configuration that reaches a mirror) for numpy and
scikit-build-core.  ctest runs it as python_fresh_venv; .ci/run runs it with
--isolated --sdist.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import textwrap

PYTHON_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# Run inside the fresh venv, from a directory outside the checkout, with no
# MOEQ_LIBRARY and no PYTHONPATH.
SMOKE = textwrap.dedent("""
    import json, os, sys, tempfile
    import numpy as np
    import moeq

    site = sys.argv[1]
    assert moeq.library_path.startswith(site), (moeq.library_path, site)
    print(f"moeq {moeq.__version__}: libmoeq {moeq.version()} from {moeq.library_path}")
    with moeq.Context() as ctx:
        print("kernels:", ctx.kernels)

    d = tempfile.mkdtemp()
    moeq.synth_write(d, "wna16-int4-g128")
    with open(os.path.join(d, "config.json")) as f:
        model = json.load(f)
    E, H, I, K = (model["num_experts"], model["hidden_size"], model["moe_intermediate_size"],
                  model["num_experts_per_tok"])
    prefix = "model.layers.1.mlp.experts"
    with moeq.Config.load(d) as cfg, moeq.Checkpoint(d) as ckpt:
        layer = moeq.MoELayer.from_config(cfg, prefix, E, H, I)
        counts = layer.load_checkpoint(ckpt)
        layer.finalize()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, H)).astype(np.float32)
    ids, weights = moeq.route(rng.standard_normal((5, E)), K)
    out = layer.apply(x, ids, weights)
    ref = layer.apply_reference(x, ids, weights)
    err = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
    print(f"{prefix} ({layer.scheme}, {counts['loaded']} tensors): out {out.shape}, "
          f"max |out - reference| / max |reference| = {err:.2e}")
    assert out.shape == (5, H) and np.isfinite(out).all() and err < 1e-4, err
""")

OVERRIDE = textwrap.dedent("""
    import sys
    import moeq
    assert moeq.library_path == sys.argv[1], (moeq.library_path, sys.argv[1])
    print("MOEQ_LIBRARY override:", moeq.library_path)
""")


def run(cmd, **kw):
    shown = ["<script>" if "\n" in c else c for c in cmd]
    print("+", " ".join(shown), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MOEQ_LIBRARY", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def make_venv(path, packages):
    shutil.rmtree(path, ignore_errors=True)
    # The base interpreter, not a venv's: the new venv must not see its packages.
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", path], env=clean_env())
    py = os.path.join(path, "bin", "python")
    if packages:
        run([py, "-m", "pip", "install", "-q", *packages], env=clean_env())
    return py


def build_sdist(work):
    """python/'s sdist, made with scikit-build-core's PEP 517 hook in a venv of its own."""
    py = make_venv(os.path.join(work, "sdist-venv"), ["scikit-build-core>=1.1"])
    out = os.path.join(work, "dist")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    run([py, "-c", "import sys, scikit_build_core.build as b; print(b.build_sdist(sys.argv[1]))",
         out], cwd=PYTHON_DIR, env=clean_env())
    (sdist,) = glob.glob(os.path.join(out, "moeq-*.tar.gz"))
    return sdist


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("work", help="a scratch directory (emptied)")
    ap.add_argument("--isolated", action="store_true")
    ap.add_argument("--sdist", action="store_true")
    ap.add_argument("--library")
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    source = build_sdist(work) if a.sdist else PYTHON_DIR
    py = make_venv(os.path.join(work, "venv"),
                   [] if a.isolated else ["numpy", "scikit-build-core>=1.1"])
    install = [py, "-m", "pip", "install", "-q"]
    if not a.isolated:
        install.append("--no-build-isolation")
    # CMake's output, when the build fails, names the missing Debian package.
    run(install + [source], env=clean_env(), cwd=work)

    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"],
                          check=True, capture_output=True, text=True,
                          env=clean_env()).stdout.strip()
    run([py, "-c", SMOKE, site], env=clean_env(), cwd=work)
    if a.library:
        run([py, "-c", OVERRIDE, a.library], env=clean_env(MOEQ_LIBRARY=a.library), cwd=work)
        bad = os.path.join(work, "no-such-libmoeq.so")
        proc = subprocess.run([py, "-c", "import moeq"], env=clean_env(MOEQ_LIBRARY=bad),
                              cwd=work, capture_output=True, text=True)
        assert proc.returncode != 0 and "MOEQ_LIBRARY" in proc.stderr, proc.stderr
        print("MOEQ_LIBRARY pointing nowhere: import fails, naming it")
    print("fresh venv install: OK")


if __name__ == "__main__":
    main()
