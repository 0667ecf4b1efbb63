"""moeq.torch.replace_experts / from_pretrained on transformers models.

For each architecture (ct_tiny.ARCHES: Qwen3-MoE, Mixtral, DeepSeek-V3, GPT-OSS) a
tiny random model is saved, its routed experts quantized to W4A16 group 32 with
the compressed-tensors package (GPT-OSS's fused experts split into per-expert
linear layers first, as llm-compressor does), and the checkpoint reloaded twice:
by transformers (CompressedTensorsConfig(dequantize=True): the experts
decompressed) and by moeq.torch.from_pretrained (the experts packed, on moeq's
kernels).  Both run in float32, the reference's experts set to CT's
dequantization done in float32 and fused as the model's experts module holds
them (ct_tiny.exact_experts: transformers' loader rounds q * scale to the scales'
bfloat16, and has no place for GPT-OSS's per-expert tensors), so that only
summation order differs: the logits must agree to 1e-4 of their range and a
greedy generate must give the same tokens.  (In bfloat16 the two round the
experts' intermediate values differently, moeq less often; on these random
models a rounding can flip a near-tie in routing or in the argmax, so bfloat16
is compared per block below.)  GPT-OSS runs with the expert names of
llm-compressor ("mlp.experts.experts.<e>.gate_proj") and with moeq's family
table's ("mlp.experts.<e>.gate_proj")."""

import copy
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


# (model_type, the experts' container in the checkpoint names: None = ct_tiny's default)
CASES = [(arch, None) for arch in ct_tiny.ARCHES] + [("gpt_oss", "experts")]


@pytest.fixture(scope="module", params=CASES,
                ids=[a if e is None else f"{a}-{e.replace('.', '_')}" for a, e in CASES])
def checkpoint(request, tmp_path_factory):
    arch, experts = request.param
    d = tmp_path_factory.mktemp(arch)
    ct_tiny.make_model(arch, str(d), experts=experts)
    return arch, str(d)


def reference_model(arch, d, dtype=torch.bfloat16):
    """The checkpoint as transformers runs it, the experts decompressed to `dtype`:
    transformers' loader, then the experts set to CT's dequantization (see the module
    docstring)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*already has a `quantization_config`")
        # GPT-OSS's per-expert tensors have no place in GptOssForCausalLM: the loader
        # reports them (and the fused parameters they become below) as unexpected/missing.
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()
        try:
            model = AutoModelForCausalLM.from_pretrained(
                d, dtype=dtype, quantization_config=CompressedTensorsConfig(dequantize=True))
        finally:
            transformers.logging.set_verbosity(verbosity)
    ct_tiny.exact_experts(model, arch, d, dtype)
    return model.eval()


def prompt():
    return torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("low_memory", [True, False])
def test_swapped_model_matches_transformers(checkpoint, low_memory):
    arch, d = checkpoint
    ref = reference_model(arch, d, torch.float32)
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
    routed experts, decompressed), in bfloat16."""
    arch, d = checkpoint
    ref = reference_model(arch, d)
    layer = ref.config.num_hidden_layers - 1
    moe = mt.MoE.from_checkpoint(d, layer)
    block = ref.model.layers[layer].mlp  # the MoE block in all four architectures
    router = block.router if arch == "gpt_oss" else block.gate
    hidden = torch.randn(16, ref.config.hidden_size,
                         generator=torch.Generator().manual_seed(5)).bfloat16()
    with torch.no_grad():
        logits, weights, ids = router(hidden)
        want = block.experts(hidden, ids, weights).float()
        got = moe(hidden, logits).float()
        # The same routed experts in float32 (transformers' own experts module, widened):
        # moeq rounds once, transformers at each step.
        exact = copy.deepcopy(block.experts).float()(hidden.float(), ids, weights.float())
    assert got.shape == want.shape
    scale = exact.abs().max()
    assert (got - exact).abs().max() <= 2**-7 * scale  # one bfloat16 rounding of the output
    assert (got - exact).abs().max() <= (want - exact).abs().max() + 2**-8 * scale
    if arch == "gpt_oss":
        # The case reaches the clamped SwiGLU's limits (gate > 7, |up| > 7) in the
        # chosen experts: the clamps are compared, not only the smooth part.
        E = block.experts
        gate_up = torch.stack([hidden[t].float() @ E.gate_up_proj[e].float()
                               + E.gate_up_proj_bias[e].float()
                               for t in range(hidden.shape[0]) for e in ids[t].tolist()])
        assert (gate_up[:, 0::2] > E.limit).any() and (gate_up[:, 1::2].abs() > E.limit).any()


def test_replace_experts_refuses_a_model_without_moe_blocks(checkpoint, tmp_path):
    arch, d = checkpoint
    dense = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2))
    import moeq
    with pytest.raises(moeq.NoMatchError, match="no MoE block"):
        mt.replace_experts(dense, d)
    with pytest.raises(moeq.NoMatchError, match=r"no experts under model\.layers\.0\.self_attn"):
        mt.MoE.from_checkpoint(d, "model.layers.0.self_attn")
