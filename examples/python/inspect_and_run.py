#!/usr/bin/env python3
"""Inspect a compressed-tensors MoE model directory with moeq, and run one layer.

    MOEQ_LIBRARY=build/libmoeq.so PYTHONPATH=python \\
        python3 examples/python/inspect_and_run.py MODEL_DIR [--tokens N]

Reads MODEL_DIR/config.json, plans every MoE layer (which group, format and
scheme, and why), opens the safetensors checkpoint if there is one and
counts its tensors per layer, then builds the first MoE layer found in the
checkpoint, loads it, and runs a few random tokens through router and experts.
"""

import argparse
import os
import sys

import numpy as np

import moeq


def model_int(cfg, *keys, default=None):
    """The first of `keys` the model config has, as an int."""
    for key in keys:
        value = cfg.model_number(key)
        if value is not None:
            return int(value)
    return default


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prefix", default="model.layers.{}.mlp.experts",
                    help="MoE layer name, {} for the layer number (default: %(default)s)")
    ap.add_argument("--tokens", type=int, default=4, help="random tokens to run (default 4)")
    args = ap.parse_args()

    print(f"moeq {moeq.version()} ({moeq.library_path})")
    try:
        cfg = moeq.Config.load(args.model_dir)
    except moeq.Error as e:
        sys.exit(f"{args.model_dir}: {e}")
    for warning in cfg.warnings:
        print(f"warning: {warning}")
    print(f"config: {len(cfg.groups)} groups, format {cfg.format}, compressed-tensors "
          f"{cfg.version or '(no version)'}, {len(cfg.ignore)} ignore entries")

    experts = model_int(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    layers = model_int(cfg, "num_hidden_layers")
    if not experts or not layers:
        sys.exit("config.json does not say num_hidden_layers and the number of experts")
    first_moe = model_int(cfg, "first_k_dense_replace", default=0)
    prefixes = [args.prefix.format(i) for i in range(first_moe, layers)]

    print()
    print(cfg.plan([f"{p} moe {experts}" for p in prefixes], json=False), end="")

    files = [f for f in os.listdir(args.model_dir) if f.endswith(".safetensors")]
    if not files:
        print("\nno *.safetensors in the model directory: nothing to load")
        return
    with moeq.Checkpoint(args.model_dir) as ckpt:
        names = ckpt.names()
        print(f"\ncheckpoint: {len(names)} tensors in {len(files)} file(s)")
        counts = {p: sum(n.startswith(p + ".") for n in names) for p in prefixes}
        for p, n in counts.items():
            if n:
                print(f"  {p}: {n} tensors")
        present = [p for p in prefixes if counts[p]]
        if present:
            run_layer(cfg, ckpt, present[0], experts, args.tokens)


def run_layer(cfg, ckpt, prefix, experts, tokens):
    hidden = model_int(cfg, "hidden_size")
    inter = model_int(cfg, "moe_intermediate_size", "intermediate_size")
    top_k = model_int(cfg, "num_experts_per_tok", default=2)
    print(f"\n{prefix}: {experts} experts, hidden {hidden}, intermediate {inter}, top-{top_k}")
    try:
        layer = moeq.MoELayer.from_config(cfg, prefix, experts, hidden, inter)
    except moeq.UnsupportedError as e:
        if "not implemented yet" in e.message:
            print(f"  not run: this libmoeq cannot build MoE layers yet ({e.message})")
            return
        raise
    with layer:
        print(f"  scheme {layer.scheme}, {len(layer.params())} parameters")
        loaded = layer.load_checkpoint(ckpt)
        print(f"  loaded {loaded['loaded']} tensors, skipped {loaded['skipped']}")
        layer.finalize()
        rng = np.random.default_rng(0)
        x = rng.standard_normal((tokens, hidden)).astype(np.float32)
        ids, weights = moeq.route(rng.standard_normal((tokens, experts)).astype(np.float32),
                                  top_k)
        out = layer.apply(x, ids, weights)
        for t in range(tokens):
            print(f"  token {t}: experts {ids[t].tolist()} -> |out| = "
                  f"{float(np.linalg.norm(out[t])):.4f}")


if __name__ == "__main__":
    main()
