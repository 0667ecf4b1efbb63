"""moeq.torch.MoE and Experts against transformers' own MoE blocks.

Each synthetic checkpoint's MoE block is built twice: as moeq.torch.MoE from the
checkpoint (packed weights), and as the transformers block class of its
model_type with the experts' weights dequantized into its 3-D parameters and a
random router.  The transformers gate routes (softmax or sigmoid, groups,
correction bias, norm_topk_prob, routed_scaling_factor, as its code does) and
its experts module computes the routed output; moeq's MoE gets the same router
logits and must choose the same experts and give the same output (weight-only
schemes: only float32 summation order differs)."""

import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the moeq.torch tests "
                                            "need it (pip install torch)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed: the "
                                   "moeq.torch block tests compare with its MoE blocks")

import moeq  # noqa: E402
import moeq.torch as mt  # noqa: E402

# model_type -> (transformers module, MoE block class)
BLOCKS = {
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeSparseMoeBlock"),
    "glm4_moe": ("glm4_moe", "Glm4MoeMoE"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3MoE"),
}

# preset -> the decoder layer whose MoE block is compared
PRESETS = {"wna16-int4-g128": 1, "glm-mini": 2, "w4a16-asym-actorder": 1, "nvfp4-w4a16": 2}


def dequantized_experts(cfg, m, block_prefix):
    """gate_up_proj [E, 2I, H] and down_proj [E, H, I] float32, as transformers stores them."""
    gate_up, down = [], []
    with moeq.Checkpoint(cfg_dir(cfg)) as ckpt:
        for e in range(m["num_experts"]):
            w = {}
            for proj in m["proj"]:
                module = f"{block_prefix}.{m['experts']}.{e}.{proj}"
                res = cfg.resolve(module)
                tensors = {n[len(module) + 1:]: (ckpt.info(n)["dtype"], ckpt.tensor(n))
                           for n in ckpt.names() if n.startswith(module + ".")}
                w[proj] = moeq.dequantize(res["weights"], res["format"], tensors, module=module,
                                          flags=cfg.dequant_flags)
            gate, up, dn = (w[p] for p in m["proj"])
            gate_up.append(np.concatenate([gate, up], axis=0))
            down.append(dn)
    return torch.from_numpy(np.stack(gate_up)), torch.from_numpy(np.stack(down))


_DIRS = {}


def cfg_dir(cfg):
    return _DIRS[id(cfg)]


@pytest.fixture(scope="module", params=sorted(PRESETS))
def synth(request, tmp_path_factory):
    preset = request.param
    d = tmp_path_factory.mktemp(preset)
    moeq.synth_write(str(d), preset)
    cfg = moeq.Config.load(str(d))
    _DIRS[id(cfg)] = str(d)
    yield preset, str(d), cfg
    cfg.close()


def hf_block(d, m, block_prefix, cfg, moe):
    module_name, cls_name = BLOCKS[m["model_type"]]
    hf_config = transformers.AutoConfig.from_pretrained(d)
    if hasattr(hf_config, "quantization_config"):
        del hf_config.quantization_config
    mod = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    block = getattr(mod, cls_name)(hf_config).float().eval()
    gate_up, down = dequantized_experts(cfg, m, block_prefix)
    with torch.no_grad():
        block.experts.gate_up_proj.copy_(gate_up)
        block.experts.down_proj.copy_(down)
        block.gate.weight.copy_(torch.randn(block.gate.weight.shape,
                                            generator=torch.Generator().manual_seed(7)) * 0.5)
        if moe.correction_bias is not None:
            block.gate.e_score_correction_bias.copy_(moe.correction_bias)
    return block


def test_settings_come_from_the_family_table(synth):
    preset, d, cfg = synth
    m = mt.model_settings(d)
    assert m["known"] and m["family"] == m["model_type"] in BLOCKS
    if m["model_type"] in ("glm4_moe", "deepseek_v3"):
        assert m["scoring"] == "sigmoid"  # what their code does, whether or not config says
    else:
        assert m["scoring"] == "softmax"


def test_moe_matches_the_transformers_block(synth):
    preset, d, cfg = synth
    layer = PRESETS[preset]
    m = mt.model_settings(cfg)
    block_prefix = f"model.layers.{layer}.{m['moe_block']}"
    moe = mt.MoE.from_checkpoint(d, layer)
    assert moe.experts.prefix == block_prefix + ".experts"
    if m["model_type"] == "deepseek_v3" or preset == "glm-mini":
        assert moe.correction_bias is not None and moe.correction_bias.shape == (m["num_experts"],)
    block = hf_block(d, m, block_prefix, cfg, moe)

    hidden = torch.randn(2, 6, m["hidden_size"], generator=torch.Generator().manual_seed(3))
    flat = hidden.view(-1, m["hidden_size"])
    with torch.no_grad():
        logits, hf_weights, hf_ids = block.gate(flat)
        expected = block.experts(flat, hf_ids, hf_weights)
    ids, weights = moe.route(logits)
    # The same experts with the same weights (as sets: top-k order may differ).
    got = sorted(zip(ids.tolist(), weights.tolist()))
    order = torch.argsort(hf_ids, dim=1)
    order_m = torch.argsort(ids.long(), dim=1)
    assert torch.equal(torch.gather(hf_ids, 1, order), torch.gather(ids.long(), 1, order_m)), got
    torch.testing.assert_close(torch.gather(weights, 1, order_m),
                               torch.gather(hf_weights.float(), 1, order), rtol=1e-5, atol=1e-6)
    out = moe(hidden, logits)
    assert out.shape == hidden.shape and out.dtype == torch.float32
    torch.testing.assert_close(out.view(-1, m["hidden_size"]), expected, rtol=2e-4, atol=2e-4)
    # bfloat16 in, bfloat16 out, close to the float32 result.
    out_bf = moe(hidden.bfloat16(), logits)
    assert out_bf.dtype == torch.bfloat16
    err = (out_bf.float() - out).abs().max() / out.abs().max()
    assert err < 3e-2, err


def test_experts_from_tensors_equal_from_checkpoint(synth):
    preset, d, cfg = synth
    m = mt.model_settings(cfg)
    prefix = f"model.layers.{PRESETS[preset]}.{m['moe_block']}.{m['experts']}"
    tensors = {}
    with moeq.Checkpoint(d) as ckpt:
        for name in ckpt.names():
            if name.startswith(prefix + "."):
                arr = np.array(ckpt.tensor(name))
                t = torch.from_numpy(arr)
                if ckpt.info(name)["dtype"] == "BF16":
                    t = t.view(torch.int16).view(torch.bfloat16) if t.dtype != torch.int16 \
                        else t.view(torch.bfloat16)
                elif ckpt.info(name)["dtype"] == "F8_E4M3":
                    t = t.view(torch.float8_e4m3fn)
                tensors[name] = t
    a = mt.Experts.from_tensors(d, prefix, tensors)
    b = mt.Experts.from_checkpoint(d, prefix)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(5, m["hidden_size"], generator=g)
    ids, weights = moeq.route(torch.randn(5, m["num_experts"], generator=g), m["top_k"])
    assert torch.equal(a(x, ids, weights), b(x, ids, weights))
    assert "scheme=" in repr(a)


def test_missing_tensors_are_named(synth):
    preset, d, cfg = synth
    m = mt.model_settings(cfg)
    prefix = f"model.layers.{PRESETS[preset]}.{m['moe_block']}.{m['experts']}"
    with pytest.raises(moeq.CheckpointError, match=prefix):
        mt.Experts.from_tensors(d, prefix, {})


def test_moe_takes_any_leading_shape_and_no_tokens(synth):
    preset, d, cfg = synth
    m = mt.model_settings(cfg)
    moe = mt.MoE.from_checkpoint(d, PRESETS[preset])
    g = torch.Generator().manual_seed(13)
    hidden = torch.randn(2, 3, m["hidden_size"], generator=g)
    logits = torch.randn(6, m["num_experts"], generator=g)
    out = moe(hidden, logits)
    assert out.shape == hidden.shape
    assert torch.equal(out.view(6, -1), moe(hidden.view(6, -1), logits))
    empty = moe(torch.zeros(0, m["hidden_size"]), torch.zeros(0, m["num_experts"]))
    assert empty.shape == (0, m["hidden_size"])


def test_experts_follow_torch_threads(synth, monkeypatch):
    """threads=None runs moeq with torch's thread count (a context per count and calling
    thread); the result does not depend on it."""
    preset, d, cfg = synth
    m = mt.model_settings(cfg)
    prefix = f"model.layers.{PRESETS[preset]}.{m['moe_block']}.{m['experts']}"
    experts = mt.Experts.from_checkpoint(d, prefix)
    assert experts.threads is None
    g = torch.Generator().manual_seed(17)
    x = torch.randn(40, m["hidden_size"], generator=g)
    ids, weights = moeq.route(torch.randn(40, m["num_experts"], generator=g), m["top_k"])
    seen = []
    apply = experts.layer.apply

    def spy(*args, ctx=None, **kw):
        seen.append(ctx)
        return apply(*args, ctx=ctx, **kw)

    monkeypatch.setattr(experts.layer, "apply", spy)
    before = torch.get_num_threads()
    outs = {}
    try:
        for n in (1, 3, 1):
            torch.set_num_threads(n)
            outs.setdefault(n, []).append(experts(x, ids, weights))
    finally:
        torch.set_num_threads(before)
    assert seen[0] is seen[2] and seen[0] is not seen[1]  # one context per thread count
    experts.threads = 2
    outs[2] = [experts(x, ids, weights)]
    assert seen[3] is not seen[0] and seen[3] is not seen[1]
    for n, results in outs.items():
        for out in results:
            assert torch.equal(out, outs[1][0]), n
    assert "threads=2" in repr(experts)
