#!/usr/bin/env python3
"""ep_wire_model.py - the bytes expert parallelism moves, on paper (docs/parallel.md).

moeq_ep_apply sends a token's row (hidden x dtype bytes) once to each other
rank holding one of its experts, with top_k (id, weight) slots (8 bytes each),
and gets each (token, expert) pair's float32 output back (hidden x 4 bytes).
With experts and routing spread evenly over N machines a pair is remote with
probability (N-1)/N, a token touches D = (N-1) (1 - (1 - 1/N)^top_k) other
machines, and in balance each machine sends as many bytes as it receives, so
per token of its own a machine moves, each way,

    B(N) = D (hidden dtype + 8 top_k) + top_k (N-1)/N hidden 4   bytes per MoE layer

(a row per pair instead: top_k (N-1)/N hidden (dtype + 4)), and a link of
L Gb/s carries L*1e9/8 / B(N) tokens per second per layer (each direction of
a full-duplex link; latency and the all-reduces left out).

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
    remote_machines = (n - 1) * (1 - (1 - 1 / n) ** top_k)
    rows_out = remote_machines * (hidden * x_bytes + 8 * top_k)
    outputs_back = top_k * (n - 1) / n * hidden * 4
    return rows_out + outputs_back


def bytes_per_token_per_pair(hidden, top_k, n, x_bytes=X_BYTES):
    return top_k * (n - 1) / n * (hidden * (x_bytes + 4) + 8)


def main():
    rows = []
    for name, hidden, top_k, layers in MODELS:
        print(f"\n{name}: hidden {hidden}, top-{top_k}, {layers} MoE layers, bf16 rows out, "
              f"f32 outputs back")
        print(f"  all pairs, each way: dispatch {top_k * (hidden * X_BYTES + 8) / 1024:.1f} KiB, "
              f"return {top_k * hidden * 4 / 1024:.1f} KiB per token per layer")
        head = "".join(f"{f'{g} Gb/s':>22}" for g in LINKS_GBPS)
        print(f"  {'machines':>8} {'KiB/token/layer':>16} {'row per pair':>13}{head}")
        print(f"  {'':>8} {'(each way)':>16} {'':>13}" + "".join(
            f"{'us/token/layer':>15}{'tok/s':>7}" for _ in LINKS_GBPS))
        for n in MACHINES:
            b = bytes_per_token(hidden, top_k, n)
            naive = bytes_per_token_per_pair(hidden, top_k, n)
            line = f"  {n:>8} {b / 1024:>16.1f} {naive / 1024:>13.1f}"
            for g in LINKS_GBPS:
                us = b / (g * 1e9 / 8) * 1e6
                tok_s = 1e6 / us / layers  # whole model, network-bound
                line += f"{us:>15.1f}{tok_s:>7.0f}"
                rows.append({"model": name, "hidden": hidden, "top_k": top_k,
                             "machines": n, "link_gbps": g, "bytes_per_token_layer": b,
                             "bytes_per_token_layer_row_per_pair": naive,
                             "us_per_token_layer": us, "tokens_per_s_model": tok_s})
            print(line)
    print("\n  tok/s: tokens per second per machine through every MoE layer of the model when"
          " the link is the only limit")
    if "--json" in sys.argv:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
