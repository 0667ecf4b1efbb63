#!/usr/bin/env python3
"""Greedy generation with transformers alone vs moeq.torch, on one small MoE model.

    MOEQ_LIBRARY=build/libmoeq.so PYTHONPATH=python \\
        /var/cache/moeq/venv-torch/bin/python bench/torch_swap_bench.py [--dir DIR] \\
        [--arch qwen3_moe|gpt_oss] [--dtype bfloat16|float32] [--threads N] [--repeat 3] \\
        [--new-tokens 32] [--prompt 16]

(any Python with torch, transformers and compressed-tensors; with moeq
pip-installed neither variable is needed).  Makes (or reuses, --dir) a randomly
initialised model, by default Qwen3-MoE with hidden 1024, 32 experts of 512,
top-4, 4 layers, vocab 8192 (--arch gpt_oss: GPT-OSS of the same sizes), its
routed experts quantized W4A16 group 32 with compressed-tensors
(python/tests/ct_tiny.py), then runs each side in its own process:

  transformers  AutoModelForCausalLM, CompressedTensorsConfig(dequantize=True):
                the experts decompressed to --dtype
  moeq          moeq.torch.from_pretrained: the experts packed, on moeq's kernels

and prints, for each, load time, resident memory after loading and its peak
(VmRSS / VmHWM), decode speed (new tokens / s of a greedy generate after a
warm-up, the best of --repeat runs, so that a passing load on a shared machine
weighs less) and the process's CPU time per token in that run, then the
moeq / transformers ratios and how many greedy tokens agree.  Both sides run
--threads threads (torch.set_num_threads; moeq.torch's experts follow torch's
count); default: torch's default.  Both run with OMP_WAIT_POLICY=passive unless
the environment sets it: torch's OpenMP threads otherwise spin after each op on
the cores that moeq's kernels (and its own workers) run on next, which costs the
moeq side most (python/README.md, "Threads").

Tokens: in float32 the transformers side's experts are set to the checkpoint's
exact values (ct_tiny.exact_experts; its loader rounds them to the scales'
bfloat16) and all tokens agree; in bfloat16 the two round the experts
differently and a random model's near-ties in the argmax can send the greedy
paths apart.  GPT-OSS's transformers side always gets its experts that way: the
loader has no place for its per-expert tensors.  Figures only: nothing is
asserted.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
COMMON = dict(hidden_size=1024, num_experts_per_tok=4, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=4, head_dim=128, vocab_size=8192)
SIZES = {"qwen3_moe": dict(COMMON, moe_intermediate_size=512, num_experts=32,
                           intermediate_size=2048),
         "gpt_oss": dict(COMMON, intermediate_size=512, num_local_experts=32, sliding_window=128)}


def memory():
    """(VmRSS, VmHWM) of this process in MiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return out["VmRSS"], out["VmHWM"]


def load(side, d, dtype, arch):
    import torch
    if side == "moeq":
        import moeq.torch as mt
        return mt.from_pretrained(d, dtype=dtype)[0]
    import warnings
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig
    transformers.logging.set_verbosity_error()  # GPT-OSS: the per-expert tensors unplaced
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(
            d, dtype=dtype, quantization_config=CompressedTensorsConfig(dequantize=True)).eval()
    if dtype == torch.float32 or arch == "gpt_oss":
        sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
        import ct_tiny
        ct_tiny.exact_experts(model, arch, d, dtype)
    return model


def run_side(side, d, a):
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    with open(os.path.join(d, "config.json")) as f:
        arch = json.load(f)["model_type"]
    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = load(side, d, dtype, arch)
    load_s = time.perf_counter() - t0
    rss, _ = memory()
    ids = torch.randint(0, model.config.vocab_size, (1, a.prompt),
                        generator=torch.Generator().manual_seed(1))
    runs = []
    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm-up
        for _ in range(a.repeat):
            c0, t0 = time.process_time(), time.perf_counter()
            out = model.generate(ids, max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens,
                                 do_sample=False)
            runs.append((time.perf_counter() - t0, time.process_time() - c0))
    _, peak = memory()
    gen_s, cpu_s = min(runs)
    return {"side": side, "load_s": load_s, "rss_mib": rss, "peak_mib": peak,
            "tokens_per_s": a.new_tokens / gen_s, "cpu_ms_per_token": cpu_s / a.new_tokens * 1e3,
            "threads": torch.get_num_threads(), "tokens": out[0, a.prompt:].tolist()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", help="model directory (made when missing or empty)")
    ap.add_argument("--arch", choices=sorted(SIZES), default="qwen3_moe",
                    help="the model made when --dir holds none")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per side; the best counts")
    ap.add_argument("--side", choices=["transformers", "moeq"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        print(json.dumps(run_side(a.side, a.dir, a)))
        return
    d = a.dir or tempfile.mkdtemp(prefix="moeq-swap-bench-")
    if not os.path.exists(os.path.join(d, "config.json")):
        sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
        import ct_tiny
        t0 = time.perf_counter()
        ct_tiny.make_model(a.arch, d, **SIZES[a.arch])
        print(f"model: {d} (made in {time.perf_counter() - t0:.0f} s)")
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    files = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)
                if n.endswith(".safetensors"))
    experts = next(c[k] for k in ("num_experts", "num_local_experts") if k in c)
    size = c.get("moe_intermediate_size", c["intermediate_size"])
    print(f"{c['model_type']}: hidden {c['hidden_size']}, {experts} experts of {size}, "
          f"top-{c['num_experts_per_tok']}, {c['num_hidden_layers']} layers, vocab "
          f"{c['vocab_size']}; checkpoint {files / 2**20:.0f} MiB (experts W4A16 g32)")
    print(f"greedy generate: prompt {a.prompt}, {a.new_tokens} new tokens, batch 1, {a.dtype}, "
          f"best of {a.repeat}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    print(f"OMP_WAIT_POLICY={env['OMP_WAIT_POLICY']}")
    results = {}
    for side in ("transformers", "moeq"):
        proc = subprocess.run([sys.executable, __file__, "--side", side, "--dir", d,
                               "--new-tokens", str(a.new_tokens), "--prompt", str(a.prompt),
                               "--dtype", a.dtype, "--threads", str(a.threads),
                               "--repeat", str(a.repeat)],
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            sys.exit(f"{side} failed:\n{proc.stderr}")
        results[side] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{'':14}{'load s':>8}{'RSS MiB':>10}{'peak MiB':>10}{'tok/s':>9}{'CPU ms/tok':>12}")
    for side, r in results.items():
        print(f"{side:14}{r['load_s']:8.1f}{r['rss_mib']:10.0f}{r['peak_mib']:10.0f}"
              f"{r['tokens_per_s']:9.1f}{r['cpu_ms_per_token']:12.1f}")
    t, m = results["transformers"], results["moeq"]
    print(f"moeq / transformers: RSS {m['rss_mib'] / t['rss_mib']:.2f}, peak "
          f"{m['peak_mib'] / t['peak_mib']:.2f}, tok/s {m['tokens_per_s'] / t['tokens_per_s']:.2f}"
          f", CPU per token {m['cpu_ms_per_token'] / t['cpu_ms_per_token']:.2f} "
          f"(threads {t['threads']})")
    first = next((i for i, (x, y) in enumerate(zip(t["tokens"], m["tokens"])) if x != y),
                 len(t["tokens"]))
    print(f"greedy tokens equal before the paths part: {first} of {len(t['tokens'])}")


if __name__ == "__main__":
    main()
