"""examples/python/inspect_and_run.py stays runnable."""

import json
import os
import subprocess
import sys

import numpy as np

import moeq

from conftest import GLM, REPO
from test_dequant import f32_to_bf16_bits, pack_rows

EXAMPLE = os.path.join(REPO, "examples", "python", "inspect_and_run.py")


def make_model_dir(path):
    """A 5-layer GLM-style model: layers 3 and 4 are MoE with 4 int4 group-64 experts."""
    with open(GLM) as f:
        config = json.load(f)
    config.update(num_hidden_layers=5, first_k_dense_replace=3, n_routed_experts=4,
                  num_experts_per_tok=2, hidden_size=64, moe_intermediate_size=64)
    (path / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0)
    tensors = {"model.embed_tokens.weight": ("BF16", np.zeros((8, 64), np.uint16))}
    for layer in (3, 4):
        for e in range(4):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                base = f"model.layers.{layer}.mlp.experts.{e}.{proj}"
                tensors[base + ".weight_packed"] = pack_rows(rng.integers(-8, 8, (64, 64)), 4)
                tensors[base + ".weight_scale"] = ("BF16", f32_to_bf16_bits(
                    np.full((64, 1), 0.01, np.float32)))
                tensors[base + ".weight_shape"] = np.array([64, 64], np.int64)
    moeq.safetensors_write(str(path / "model.safetensors"), tensors)


def run_example(*args):
    """Runs the script with the moeq package and library this test uses."""
    env = dict(os.environ, MOEQ_LIBRARY=moeq.library_path,
               PYTHONPATH=os.path.dirname(os.path.dirname(moeq.__file__)))
    return subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True,
                          env=env)


def test_example_runs(tmp_path):
    make_model_dir(tmp_path)
    proc = run_example(str(tmp_path), "--tokens", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "config: 2 groups, format pack-quantized" in out
    assert "model.layers.3.mlp.experts (4 experts)" in out and "wna16" in out
    assert "checkpoint: 73 tensors in 1 file(s)" in out
    assert "model.layers.4.mlp.experts: 36 tensors" in out
    # Until the C MoE layer lands the script says so; then it runs the layer.
    assert ("not run: this libmoeq cannot build MoE layers yet" in out or
            ("loaded 36 tensors, skipped 0" in out and "token 2: experts" in out)), out


def test_example_reports_a_bad_directory(tmp_path):
    proc = run_example(str(tmp_path / "absent"))
    assert proc.returncode != 0 and "absent" in proc.stderr
