#!/usr/bin/env python3
"""Resolution speed: `moeq plan --json` against a Python loop applying the same
compressed-tensors rules with re.match, over every module name of the GLM-5.3
model the bundled config belongs to (78 layers x 256 experts x 3 projections,
plus attention, shared experts and routers).

Prints both wall times from one run, their ratio, and checks that both agree on
every name.  Usage: bench/plan_bench.py [--moeq build/moeq] [--repeat 5]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "tools", "data", "glm-5.3-int4-int8mix.json")


def glm_names():
    attn = ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj",
            "indexer.wq_b", "indexer.wk"]
    proj = ["gate_proj", "up_proj", "down_proj"]
    names = ["model.embed_tokens"]
    for layer in range(78):
        names += [f"model.layers.{layer}.self_attn.{a}" for a in attn]
        names.append(f"model.layers.{layer}.mlp.gate")
        names += [f"model.layers.{layer}.mlp.shared_experts.{p}" for p in proj]
        for e in range(256):
            names += [f"model.layers.{layer}.mlp.experts.{e}.{p}" for p in proj]
    names.append("lm_head")
    return names


def python_resolver(qc):
    """compressed-tensors matching: ignore first (exact or re.match), then
    exact target > regex targets in lexicographic order > class target."""
    target_group = {}
    for gname, group in qc["config_groups"].items():
        for t in group["targets"]:
            target_group[t] = gname
    ordered = sorted(target_group, key=lambda t: (t.startswith("re:"), t))
    exact = {t: g for t, g in target_group.items() if not t.startswith("re:")}
    regexes = [(re.compile(t[3:]), target_group[t]) for t in ordered if t.startswith("re:")]
    ignore_exact = {i for i in qc.get("ignore", []) if not i.startswith("re:")}
    ignore_re = [re.compile(i[3:]) for i in qc.get("ignore", []) if i.startswith("re:")]
    linear = exact.get("Linear")

    def resolve(name):
        if name in ignore_exact or any(p.match(name) for p in ignore_re):
            return ("ignored", None)
        g = exact.get(name)
        if g is None:
            for pat, grp in regexes:
                if pat.match(name):
                    g = grp
                    break
        if g is None:
            g = linear
        return ("quantized", g) if g else ("unmatched", None)

    return resolve


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--moeq", default=os.path.join(ROOT, "build", "moeq"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    names = glm_names()
    with open(CONFIG) as f:
        qc = json.load(f)["quantization_config"]
    with tempfile.TemporaryDirectory() as tmp:
        layers = os.path.join(tmp, "layers.txt")
        with open(layers, "w") as f:
            f.write("\n".join(names) + "\n")
        cmd = [args.moeq, "plan", CONFIG, "--layers", layers, "--json"]

        c_times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True).stdout
            c_times.append(time.perf_counter() - t0)
        plan = json.loads(out)

        py_times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            resolve = python_resolver(qc)  # compiling the patterns counts, as in moeq
            py = [resolve(n) for n in names]
            py_times.append(time.perf_counter() - t0)

    mismatches = [n for n, p, c in zip(names, py, plan)
                  if (c["status"], c["group"]) != p or c["layer"] != n]
    c_med, py_med = statistics.median(c_times), statistics.median(py_times)
    print(f"names resolved:                 {len(names)}")
    print(f"moeq plan --json (process):     {c_med * 1e3:8.1f} ms  (median of {args.repeat}, "
          f"min {min(c_times) * 1e3:.1f} ms, {len(out) / 1e6:.1f} MB of JSON)")
    print(f"Python re.match loop:           {py_med * 1e3:8.1f} ms  (median of {args.repeat}, "
          f"min {min(py_times) * 1e3:.1f} ms)")
    print(f"speed-up (Python / moeq):       {py_med / c_med:8.1f}x")
    print(f"disagreements:                  {len(mismatches)}")
    if mismatches:
        print("first:", mismatches[:5])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
