"""moeq.torch.replace_experts / from_pretrained on transformers models.

For each architecture (ct_tiny.ARCHES: Qwen3-MoE, Mixtral, DeepSeek-V3) a tiny
random model is saved, its routed experts quantized to W4A16 group 32 with the
compressed-tensors package, and the checkpoint reloaded twice: by transformers
alone (CompressedTensorsConfig(dequantize=True): the experts decompressed) and by
moeq.torch.from_pretrained (the experts packed, on moeq's kernels).  Both run in
float32, the reference's experts set to CT's dequantization done in float32
(transformers' loader rounds q * scale to the scales' bfloat16; moeq does not),
so that only summation order differs: the logits must agree to 1e-4 of their
range and a greedy generate must give the same tokens.  (In bfloat16 the two round the experts' intermediate
values differently, moeq less often; on these random models a rounding can flip a
near-tie in routing or in the argmax, so bfloat16 is compared per block below.)  GPT-OSS is not covered: its checkpoints store the experts as fused
3-D tensors, which moeq's MoE layer does not load."""

import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the transformers swap "
                                            "tests need it")
transformers = pytest.importorskip("transformers", reason="transformers is not installed: the "
                                   "swap tests need it")
pytest.importorskip("compressed_tensors", reason="compressed-tensors is not installed: the swap "
                    "tests quantize their models with it")

import moeq.torch as mt  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.utils.quantization_config import CompressedTensorsConfig  # noqa: E402

import ct_tiny  # noqa: E402


@pytest.fixture(scope="module", params=ct_tiny.ARCHES)
def checkpoint(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    ct_tiny.make_model(request.param, str(d))
    return request.param, str(d)


def reference_model(d, dtype=torch.bfloat16):
    """The checkpoint as transformers runs it: experts decompressed to `dtype`."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*already has a `quantization_config`")
        return AutoModelForCausalLM.from_pretrained(
            d, dtype=dtype, quantization_config=CompressedTensorsConfig(dequantize=True)).eval()


def prompt():
    return torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("low_memory", [True, False])
def test_swapped_model_matches_transformers(checkpoint, low_memory):
    arch, d = checkpoint
    ref = reference_model(d, torch.float32)
    ct_tiny.exact_experts(ref, arch, d)
    model, replaced = mt.from_pretrained(d, dtype=torch.float32, low_memory=low_memory)
    m = mt.model_settings(d)
    n_moe = sum(1 for i in range(model.config.num_hidden_layers)
                if i >= getattr(model.config, "first_k_dense_replace", 0))
    assert len(replaced) == n_moe, replaced
    for name in replaced:
        assert isinstance(model.get_submodule(name), mt.Experts)
    # The decompressed experts are gone: only moeq holds them, packed.
    assert not any(".experts." in n for n, _ in model.named_parameters())
    assert sum(p.numel() for p in model.parameters()) < sum(p.numel() for p in ref.parameters())
    ids = prompt()
    with torch.no_grad():
        want = ref(ids).logits.float()
        got = model(ids).logits.float()
    err = (got - want).abs().max().item()
    assert err < 1e-4 * want.abs().max().item(), (arch, m["summary"], err)
    with torch.no_grad():
        want_tokens = ref.generate(ids, max_new_tokens=8, do_sample=False)
        got_tokens = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert torch.equal(got_tokens, want_tokens), (arch, got_tokens, want_tokens)


def test_moe_module_matches_the_models_block(checkpoint):
    """moeq.torch.MoE of one layer against that layer's transformers block (router +
    routed experts, decompressed)."""
    arch, d = checkpoint
    ref = reference_model(d)
    layer = ref.config.num_hidden_layers - 1
    moe = mt.MoE.from_checkpoint(d, layer)
    block = ref.model.layers[layer].mlp  # the MoE block in all three architectures
    hidden = torch.randn(7, ref.config.hidden_size,
                         generator=torch.Generator().manual_seed(5)).bfloat16()
    with torch.no_grad():
        logits, weights, ids = block.gate(hidden)
        want = block.experts(hidden, ids, weights).float()
        got = moe(hidden, logits).float()
        # float32 of the same routed experts: moeq rounds once, transformers at each step
        E = block.experts
        exact = torch.zeros(hidden.shape)
        for t in range(hidden.shape[0]):
            for e, w in zip(ids[t].tolist(), weights[t].float().tolist()):
                gate, up = (E.gate_up_proj[e].float() @ hidden[t].float()).chunk(2)
                exact[t] += w * (E.down_proj[e].float() @ (torch.nn.functional.silu(gate) * up))
    assert got.shape == want.shape
    scale = exact.abs().max()
    assert (got - exact).abs().max() <= 2**-7 * scale  # one bfloat16 rounding of the output
    assert (got - exact).abs().max() <= (want - exact).abs().max() + 2**-8 * scale


def test_replace_experts_refuses_a_model_without_moe_blocks(checkpoint, tmp_path):
    arch, d = checkpoint
    dense = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2))
    import moeq
    with pytest.raises(moeq.NoMatchError, match="no MoE block"):
        mt.replace_experts(dense, d)
