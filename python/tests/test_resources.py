"""Memory is given back, and shared objects serve many threads."""

import gc
import os
import threading

import numpy as np
import pytest

import moeq

from conftest import GLM

CYCLES = 10_000
MAX_GROWTH_BYTES = 5 * 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def growth_over(cycles, body):
    """RSS growth across `cycles` calls of body(), after a warm-up."""
    for _ in range(200):
        body()
    gc.collect()
    before = rss_bytes()
    for _ in range(cycles):
        body()
    gc.collect()
    return rss_bytes() - before


needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/statm") or bool(os.environ.get("MOEQ_SANITIZED")),
    reason="RSS is read from /proc/self/statm (Linux), and means nothing under a sanitizer "
           "that keeps freed memory in quarantine")


@needs_proc
def test_config_create_destroy_does_not_leak():
    with open(GLM, "rb") as f:
        text = f.read()

    def body():
        cfg = moeq.Config.parse(text)  # freed by refcount at the end of each call
        res = cfg.resolve_moe("model.layers.3.mlp.experts", 4)
        assert res["group"] == "group_1"
        assert len(cfg.plan(["lm_head", "model.layers.3.mlp.experts moe 4"])) == 2  # moeq_free
        with moeq.Config.load(GLM) as other:
            other.groups

    growth = growth_over(CYCLES, body)
    print(f"Config: RSS growth over {CYCLES} cycles: {growth / 1024:.0f} KiB")
    assert growth < MAX_GROWTH_BYTES


@needs_proc
def test_checkpoint_open_close_does_not_leak(tmp_path):
    path = str(tmp_path / "m.safetensors")
    moeq.safetensors_write(path, {f"t{i}": np.full((16, 16), i, np.float32) for i in range(8)})

    def body():
        with moeq.Checkpoint(path) as ckpt:
            view = ckpt.tensor("t3")
            assert view[0, 0] == 3
        ckpt2 = moeq.Checkpoint(path)
        del ckpt2

    growth = growth_over(CYCLES, body)
    print(f"Checkpoint: RSS growth over {CYCLES} cycles: {growth / 1024:.0f} KiB")
    assert growth < MAX_GROWTH_BYTES


def test_handles_are_released_when_the_last_reference_goes(tmp_path):
    path = str(tmp_path / "m.safetensors")
    moeq.safetensors_write(path, {"w": np.arange(4, dtype=np.float32)})
    ckpt = moeq.Checkpoint(path)
    closer = ckpt._handle._finalizer  # runs moeq_checkpoint_close; holds no handle
    view = ckpt.tensor("w")
    ckpt.close()
    assert closer.alive  # the view still uses the mapping
    assert view.sum() == 6
    del view
    assert not closer.alive
    cfg = moeq.Config.load(GLM)
    destroyer = cfg._handle._finalizer
    del cfg
    assert not destroyer.alive


def test_threads_resolve_on_one_shared_config(glm):
    names = [f"model.layers.{layer}.mlp.experts.{e}.up_proj" for layer in range(0, 80, 3)
             for e in (0, 7)]
    names += [f"model.layers.{layer}.self_attn.o_proj" for layer in range(80)]
    expected = {n: glm.resolve(n, kind="expert")["group"] for n in names}
    moe_expected = glm.plan([f"model.layers.{layer}.mlp.experts moe 32" for layer in range(80)])
    errors = []
    barrier = threading.Barrier(8)

    def worker(seed):
        try:
            rng = np.random.default_rng(seed)
            barrier.wait()
            for _ in range(300):
                n = names[rng.integers(len(names))]
                assert glm.resolve(n, kind="expert")["group"] == expected[n]
            layer = int(rng.integers(80))
            res = glm.resolve_moe(f"model.layers.{layer}.mlp.experts", 32)
            assert glm.select(res)[0] == moe_expected[layer]["scheme"]
            ids, _ = moeq.route(rng.standard_normal((4, 16)).astype(np.float32), 2)
            assert ids.shape == (4, 2)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_close_from_another_thread_waits_for_calls_in_flight(glm):
    # Calls hold the handle: close() while others resolve never frees under them.
    stop = threading.Event()
    errors = []

    def worker():
        while not stop.is_set():
            try:
                glm.resolve("model.layers.5.self_attn.o_proj")
            except moeq.StateError:
                return  # closed: refused cleanly
            except Exception as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    glm.close()
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
