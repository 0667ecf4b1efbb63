#!/usr/bin/env python3
"""ep_wire_model.py - the bytes expert parallelism moves, on paper (docs/parallel.md).

Per (token, expert) pair whose expert lives on another machine, moeq_ep_apply
sends the token's row (hidden x dtype bytes) with its expert id and weight
(8 bytes), and gets the expert's float32 output back (hidden x 4 bytes).  With
experts spread evenly and routing spread evenly, a pair is remote with
probability (N-1)/N on N machines, and in balance each machine sends as many
bytes as it receives, so per token of its own a machine moves, each way,

    B(N) = top_k * (N-1)/N * (hidden * (dtype + 4) + 8)   bytes per MoE layer

and a link of L Gb/s carries L*1e9/8 / B(N) tokens per second per layer (each
direction of a full-duplex link; latency and the all-reduces left out).

    python3 bench/ep_wire_model.py [--json]
"""
import json
import sys

MODELS = [
    # name, hidden, top_k, MoE layers
    ("Qwen3-30B-A3B", 2048, 8, 48),
    ("DeepSeek-V3 / Kimi-K2", 7168, 8, 58),
]
MACHINES = [2, 4, 8, 16]
LINKS_GBPS = [25, 50, 100]
X_BYTES = 2  # bfloat16 activations


def bytes_per_token(hidden, top_k, n, x_bytes=X_BYTES):
    return top_k * (n - 1) / n * (hidden * (x_bytes + 4) + 8)


def main():
    rows = []
    for name, hidden, top_k, layers in MODELS:
        print(f"\n{name}: hidden {hidden}, top-{top_k}, {layers} MoE layers, bf16 rows out, "
              f"f32 outputs back")
        print(f"  all pairs, each way: dispatch {top_k * (hidden * X_BYTES + 8) / 1024:.1f} KiB, "
              f"return {top_k * hidden * 4 / 1024:.1f} KiB per token per layer")
        head = "".join(f"{f'{g} Gb/s':>22}" for g in LINKS_GBPS)
        print(f"  {'machines':>8} {'KiB/token/layer':>16}{head}")
        print(f"  {'':>8} {'(each way)':>16}" + "".join(
            f"{'us/token/layer':>15}{'tok/s':>7}" for _ in LINKS_GBPS))
        for n in MACHINES:
            b = bytes_per_token(hidden, top_k, n)
            line = f"  {n:>8} {b / 1024:>16.1f}"
            for g in LINKS_GBPS:
                us = b / (g * 1e9 / 8) * 1e6
                tok_s = 1e6 / us / layers  # whole model, network-bound
                line += f"{us:>15.1f}{tok_s:>7.0f}"
                rows.append({"model": name, "hidden": hidden, "top_k": top_k,
                             "machines": n, "link_gbps": g, "bytes_per_token_layer": b,
                             "us_per_token_layer": us, "tokens_per_s_model": tok_s})
            print(line)
    print("\n  tok/s: tokens per second per machine through every MoE layer of the model when"
          " the link is the only limit")
    if "--json" in sys.argv:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
