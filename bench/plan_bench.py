#!/usr/bin/env python3
"""Resolution speed: `moeq plan --json` against Python loops applying the same
compressed-tensors rules with re.match, over every module name of the GLM-5.3
model the bundled config belongs to (78 layers x 256 experts x 3 projections,
plus attention, shared experts and routers: 60,764 names).

Two Python baselines, timed in the same run:
  ct-style   the rules as compressed-tensors' utils/match.py applies them per
             module: is_match (every target, then every ignore entry, each
             through re.match), then match_targets (sort the targets, match all);
  optimized  the same rules with precompiled patterns, exact-name dicts and an
             early exit: the fastest plain-Python form of them.
moeq's time is the whole `moeq plan CONFIG --layers FILE --json` process
(startup, config parse, pattern compile, resolution, 31 MB of JSON written to
a new file).  Both sides must agree on every name.

Usage: bench/plan_bench.py [--moeq build/moeq] [--repeat 5] [--threads N]
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


def ct_style_resolver(qc):
    """compressed-tensors' per-module matching (utils/match.py), names only."""
    target_group = {}
    for gname, group in qc["config_groups"].items():
        for t in group["targets"]:
            target_group[t] = gname
    ignore = qc.get("ignore", [])

    def match_name(name, target):
        if target.startswith("re:"):
            return re.match(target.removeprefix("re:"), name) is not None
        return target == name

    def resolve(name):
        targets = list(target_group)
        if not (any(match_name(name, t) for t in targets)
                and not any(match_name(name, i) for i in ignore)):
            ignored = any(match_name(name, i) for i in ignore)
            return ("ignored", None) if ignored else ("unmatched", None)
        ordered = sorted(targets, key=lambda x: ("re:" in x, x))
        matched = [t for t in ordered if match_name(name, t)]
        return ("quantized", target_group[matched[0]])

    return resolve


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
    ap.add_argument("--threads", type=int, default=0, help="moeq plan --threads (0: all CPUs)")
    args = ap.parse_args()

    names = glm_names()
    with open(CONFIG) as f:
        qc = json.load(f)["quantization_config"]
    with tempfile.TemporaryDirectory() as tmp:
        layers = os.path.join(tmp, "layers.txt")
        with open(layers, "w") as f:
            f.write("\n".join(names) + "\n")
        out_path = os.path.join(tmp, "plan.json")
        cmd = [args.moeq, "plan", CONFIG, "--layers", layers, "--json"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]

        def timed(fn):
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                result = fn()
                times.append(time.perf_counter() - t0)
            return result, times

        # The clock covers the moeq process alone: each run writes a new file,
        # opened (and the last run's removed) before the clock starts.
        c_times = []
        for _ in range(args.repeat):
            if os.path.exists(out_path):
                os.remove(out_path)
            with open(out_path, "wb") as f:
                t0 = time.perf_counter()
                subprocess.run(cmd, stdout=f, check=True)
                c_times.append(time.perf_counter() - t0)
        with open(out_path, "rb") as f:
            out = f.read()
        plan = json.loads(out)
        # Compiling the patterns counts, as it does in moeq.
        ct, ct_times = timed(lambda: [r(n) for r in [ct_style_resolver(qc)] for n in names])
        py, py_times = timed(lambda: [r(n) for r in [python_resolver(qc)] for n in names])

    mismatches = [n for n, a, b, c in zip(names, ct, py, plan)
                  if not ((c["status"], c["group"]) == a == b and c["layer"] == n)]
    med = statistics.median
    print(f"names resolved:                   {len(names)}")
    print(f"moeq plan --json (whole process):  {med(c_times) * 1e3:8.1f} ms  (median of {args.repeat}, "
          f"min {min(c_times) * 1e3:.1f} ms, {len(out) / 1e6:.1f} MB of JSON)")
    print(f"Python, compressed-tensors style:  {med(ct_times) * 1e3:8.1f} ms  (min {min(ct_times) * 1e3:.1f} ms)")
    print(f"Python, precompiled + early exit:  {med(py_times) * 1e3:8.1f} ms  (min {min(py_times) * 1e3:.1f} ms)")
    print(f"speed-up vs compressed-tensors style: {med(ct_times) / med(c_times):6.1f}x")
    print(f"speed-up vs precompiled Python:       {med(py_times) / med(c_times):6.1f}x")
    print(f"disagreements:                     {len(mismatches)}")
    if mismatches:
        print("first:", mismatches[:5])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
