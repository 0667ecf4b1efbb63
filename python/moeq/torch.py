"""moeq.torch: a checkpoint's MoE layers as torch ``nn.Module``s on moeq's kernels.

Needs torch (``import moeq`` alone does not); the transformers helpers need
transformers too.  The experts keep the checkpoint's packed weights (int4, FP8,
NVFP4, ...) inside libmoeq; torch sees no parameters for them.

- ``Experts``: the routed experts of one MoE block, with the interface of the
  experts module of transformers' MoE blocks, ``forward(hidden_states [T, H],
  top_k_index [T, K], top_k_weights [T, K]) -> [T, H]``, so it can stand in for it.
- ``MoE``: router logits in, routed experts' output out, ``forward(hidden_states,
  router_logits)``, routing as the model's family does it (softmax or sigmoid,
  grouped top-k with the correction bias, norm_topk_prob, routed_scaling_factor).
- ``replace_experts(model, checkpoint_dir)``: swaps the experts of every MoE block
  of a transformers model for ``Experts`` built from the checkpoint, so
  ``model.generate`` runs on moeq's kernels; ``from_pretrained`` loads and swaps.
  Tested on Qwen3-MoE, Mixtral, DeepSeek-V3 and GPT-OSS.  The checkpoint holds the
  experts one module per expert and projection ("<block>.experts.<e>.gate_proj"),
  as compressed-tensors quantizes them; GPT-OSS's as llm-compressor writes them
  ("<block>.experts.experts.<e>.gate_proj", with biases) or one level up.  Fused
  3-D expert tensors (GPT-OSS's own MXFP4 release) are not a compressed-tensors
  checkpoint and are not read.

Where the settings come from: ``model_settings(config)``, one function over the
library's model-family table (``Config.model_moe()``, moeq_model_moe_get): the
config.json keys when present, else what the family's transformers code does
(e.g. glm4_moe and deepseek_v3 score with sigmoid without a scoring_func key).
"""

import os
import re
import threading
import warnings

import torch
from torch import nn

from . import _errors
from .checkpoint import Checkpoint
from .config import Config
from .moe import Context, MoELayer
from .ops import route

__all__ = ["Experts", "MoE", "model_settings", "replace_experts", "from_pretrained"]


def _as_config(config):
    """(Config, owned) for a Config, a checkpoint directory or a config.json path."""
    if isinstance(config, Config):
        return config, False
    return Config.load(os.fspath(config)), True


def model_settings(config):
    """The MoE settings of a model (routing, activation, dimensions, module names):
    the library's family table read through config.json (Config.model_moe()).
    Warns when the model_type is unknown and moeq's defaults were taken."""
    cfg, owned = _as_config(config)
    try:
        m = cfg.model_moe()
    finally:
        if owned:
            cfg.close()
    if m["unknown_defaults"]:
        warnings.warn(f"moeq: model_type {m['model_type']!r} is not in moeq's family table; "
                      f"routing and activation use moeq's defaults ({m['defaults']})",
                      stacklevel=2)
    return m


def _routing(m):
    """route()'s keyword arguments for settings `m`."""
    return {"scoring": m["scoring"], "renormalize": m["renormalize"],
            "num_expert_group": m["num_expert_group"], "topk_group": m["topk_group"],
            "routed_scaling_factor": m["routed_scaling_factor"]}


def _block_prefix(m, layer):
    """A decoder layer index -> its MoE block's prefix ("model.layers.3.mlp")."""
    if isinstance(layer, int):
        return f"model.layers.{layer}.{m['moe_block']}"
    return layer


class Experts(nn.Module):
    """The routed experts of one MoE block, run by a finalized ``moeq.MoELayer``.

    forward(hidden_states [T, H] (or [..., H]), top_k_index [T, K], top_k_weights [T, K])
    returns sum_k weight * expert(x) in hidden_states' dtype (float32, float16 or
    bfloat16), as transformers' experts modules do.  Expert ids are global; -1 adds
    nothing.

    threads: the threads moeq's kernels use for a call; None (default): torch's
    (torch.get_num_threads() at the call, so torch.set_num_threads governs both).
    Each calling thread gets its own moeq.Context per thread count."""

    def __init__(self, layer, *, num_experts, hidden_size, top_k=None, prefix=None,
                 threads=None):
        super().__init__()
        self.layer = layer
        self.num_experts = num_experts
        self.hidden_size = hidden_size
        self.top_k = top_k
        self.prefix = prefix
        self.threads = threads
        # the checkpoint prefix of the MoE block (replace_experts sets it where the
        # experts are nested deeper than "<block>.experts")
        self.block = prefix.rpartition(".")[0] if prefix else None

    @classmethod
    def from_checkpoint(cls, checkpoint_dir, prefix, *, config=None, checkpoint=None,
                        settings=None, threads=None):
        """The experts under `prefix` ("model.layers.3.mlp.experts") of a checkpoint
        directory, loaded straight from its safetensors files (packed, not
        decompressed).  `config`/`checkpoint`: an open Config / Checkpoint to reuse."""
        cfg, owned_cfg = _as_config(config if config is not None else checkpoint_dir)
        ckpt = checkpoint if checkpoint is not None else Checkpoint(os.fspath(checkpoint_dir))
        try:
            m = settings if settings is not None else model_settings(cfg)
            layer = cls._create(cfg, prefix, m)
            layer.load_checkpoint(ckpt)
            layer.finalize()
        finally:
            if checkpoint is None:
                ckpt.close()
            if owned_cfg:
                cfg.close()
        return cls(layer, num_experts=m["num_experts"], hidden_size=m["hidden_size"],
                   top_k=m["top_k"], prefix=prefix, threads=threads)

    @classmethod
    def from_tensors(cls, config, prefix, tensors, *, settings=None, threads=None):
        """The experts under `prefix` from {full checkpoint name: tensor} (torch tensors or
        ndarrays as the checkpoint stores them: weight_packed int32, weight_scale
        torch.bfloat16, ...); `config`: the model's config.json (or its directory, or
        a Config) with its quantization_config."""
        cfg, owned = _as_config(config)
        try:
            m = settings if settings is not None else model_settings(cfg)
            layer = cls._create(cfg, prefix, m)
            for name, value in tensors.items():
                layer.load(name, value)
            missing = layer.missing()
            if missing:
                _errors.fail("CHECKPOINT", f"{prefix}: {len(missing)} tensors missing, e.g. "
                                           f"{missing[0]}")
            layer.finalize()
        finally:
            if owned:
                cfg.close()
        return cls(layer, num_experts=m["num_experts"], hidden_size=m["hidden_size"],
                   top_k=m["top_k"], prefix=prefix, threads=threads)

    @staticmethod
    def _create(cfg, prefix, m):
        for key in ("num_experts", "hidden_size", "intermediate_size"):
            if m[key] <= 0:
                _errors.fail("INVALID_ARG", f"{prefix}: the model config gives no {key} "
                                            f"(family {m['family'] or m['model_type']!r})")
        return MoELayer.from_config(
            cfg, prefix, m["num_experts"], m["hidden_size"], m["intermediate_size"],
            proj_names=m["proj"], activation=m["activation"],
            swiglu_alpha=m["swiglu_alpha"], swiglu_limit=m["swiglu_limit"],
            has_bias=m["expert_bias"], params_dtype=m["params_dtype"],
            apply_router_weight_on_input=m["apply_router_weight_on_input"])

    def forward(self, hidden_states, top_k_index, top_k_weights):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        k = top_k_index.shape[-1]
        ctx = _context(self.threads or torch.get_num_threads())
        with torch.no_grad():
            out = self.layer.apply(x, top_k_index.reshape(x.shape[0], k),
                                   top_k_weights.reshape(x.shape[0], k), ctx=ctx)
        return out.view(shape)

    def extra_repr(self):
        return (f"prefix={self.prefix!r}, scheme={self.layer.scheme}, "
                f"num_experts={self.num_experts}, hidden_size={self.hidden_size}, "
                f"threads={self.threads or 'torch'}")


_contexts = threading.local()


def _context(threads):
    """The calling thread's moeq.Context with `threads` threads (a context serves one call
    at a time, and its worker threads are made once)."""
    cache = getattr(_contexts, "by_threads", None)
    if cache is None:
        cache = _contexts.by_threads = {}
    ctx = cache.get(threads)
    if ctx is None:
        ctx = cache[threads] = Context(threads=threads)
    return ctx


class MoE(nn.Module):
    """One MoE block's routed experts: forward(hidden_states [..., H], router_logits
    [T, E]) -> [..., H], routing the logits as the model's family does (see
    model_settings) and applying the experts.  Shared experts, and the router's
    own linear layer, stay the caller's (as in transformers' blocks, where the
    gate computes router_logits)."""

    def __init__(self, experts, settings, correction_bias=None):
        super().__init__()
        self.experts = experts
        self.settings = dict(settings)
        self.routing = _routing(settings)
        self.top_k = settings["top_k"]
        bias = None
        if correction_bias is not None:
            bias = torch.as_tensor(correction_bias).detach().float().reshape(-1).contiguous()
        self.register_buffer("correction_bias", bias, persistent=False)

    @classmethod
    def from_checkpoint(cls, checkpoint_dir, layer, *, config=None):
        """The MoE block `layer` of a checkpoint: a decoder layer index (3 ->
        "model.layers.3.<moe_block>") or the block's prefix ("model.layers.3.mlp").
        Its experts are "<block>.<experts>" (or "<block>.<experts>.experts", as
        llm-compressor names GPT-OSS's); the family's correction-bias tensor
        ("<block>.gate.e_score_correction_bias") is used when the checkpoint has it."""
        cfg, owned = _as_config(config if config is not None else checkpoint_dir)
        try:
            m = model_settings(cfg)
            block = _block_prefix(m, layer)
            with Checkpoint(os.fspath(checkpoint_dir)) as ckpt:
                prefix = _experts_under(m, block, _expert_containers(ckpt.names()))
                if prefix is None:
                    _errors.fail("NO_MATCH", f"{checkpoint_dir}: no experts under {block} (no "
                                             f"tensor {block}.{m['experts']}[.experts].<e>."
                                             f"<proj>.*)")
                experts = Experts.from_checkpoint(checkpoint_dir, prefix,
                                                  config=cfg, checkpoint=ckpt, settings=m)
                bias = None
                name = f"{block}.{m['correction_bias']}" if m["correction_bias"] else None
                if name and name in ckpt:
                    info = ckpt.info(name)
                    arr = ckpt.tensor(name)
                    bias = _bias_tensor(info["dtype"], arr)
        finally:
            if owned:
                cfg.close()
        return cls(experts, m, bias)

    @classmethod
    def from_tensors(cls, config, layer, tensors, correction_bias=None):
        """Like from_checkpoint, from {full checkpoint name: tensor} of the experts."""
        cfg, owned = _as_config(config)
        try:
            m = model_settings(cfg)
            block = _block_prefix(m, layer)
            prefix = (_experts_under(m, block, _expert_containers(tensors))
                      or f"{block}.{m['experts']}")
            experts = Experts.from_tensors(cfg, prefix, tensors, settings=m)
        finally:
            if owned:
                cfg.close()
        return cls(experts, m, correction_bias)

    def route(self, router_logits):
        """(top_k_index int32 [T, K], top_k_weights float32 [T, K]) for the logits."""
        logits = router_logits.reshape(-1, router_logits.shape[-1])
        with torch.no_grad():
            return route(logits.detach(), self.top_k, correction_bias=self.correction_bias,
                         **self.routing)

    def forward(self, hidden_states, router_logits):
        ids, weights = self.route(router_logits)
        return self.experts(hidden_states, ids, weights)

    def extra_repr(self):
        r = self.routing
        return (f"top_k={self.top_k}, scoring={r['scoring']}, renormalize={r['renormalize']}, "
                f"groups={r['topk_group']}/{r['num_expert_group']}, "
                f"routed_scaling_factor={r['routed_scaling_factor']}, "
                f"correction_bias={self.correction_bias is not None}")


def _bias_tensor(dtype, arr):
    import numpy as np
    if dtype == "BF16":
        return torch.from_numpy(np.array(arr).view(np.int16)).view(torch.bfloat16).float()
    return torch.from_numpy(np.array(arr, dtype=np.float32))


# --------------------------------------------------------------------------
# transformers models
# --------------------------------------------------------------------------


def replace_experts(model, checkpoint_dir, *, config=None, threads=None):
    """Swaps the routed experts of every MoE block of a transformers model for
    ``Experts`` built from `checkpoint_dir` (its config.json and safetensors files),
    in place.  The blocks keep their router and shared experts; each block's
    ``experts`` module (called as experts(hidden [T, H], top_k_index, top_k_weights))
    becomes moeq's, whose weights stay packed in the library.  The replaced experts'
    tensors are released.  `threads`: see Experts (None: torch's thread count).  Returns
    the names of the replaced modules."""
    cfg, owned = _as_config(config if config is not None else checkpoint_dir)
    replaced = []
    try:
        m = model_settings(cfg)
        with Checkpoint(os.fspath(checkpoint_dir)) as ckpt:
            names = ckpt.names()
            for name, block, prefix, ckpt_block in _moe_blocks(model, m, names):
                old = getattr(block, "experts")
                new = Experts.from_checkpoint(checkpoint_dir, prefix, config=cfg,
                                              checkpoint=ckpt, settings=m, threads=threads)
                new.block = ckpt_block
                setattr(block, "experts", new)
                del old
                replaced.append(f"{name}.experts")
        if not replaced:
            _errors.fail("NO_MATCH", f"no MoE block ('<...>.layers.<n>.<block>' with an 'experts' "
                                     f"module whose tensors {checkpoint_dir} holds) in "
                                     f"{type(model).__name__}")
    finally:
        if owned:
            cfg.close()
    return replaced


_EXPERT_TENSOR = re.compile(r"^(.*)\.\d+\.[^.]+\.[^.]+$")  # <experts>.<e>.<proj>.<tensor>


def _expert_containers(names):
    """The prefixes P of the checkpoint names "P.<e>.<proj>.<tensor>"."""
    return {m.group(1) for m in map(_EXPERT_TENSOR.match, names) if m}


def _experts_under(m, block, containers):
    """The checkpoint prefix of the experts of the block at `block`, or None.  Under the
    block they are "<experts>.<e>.<proj>", or "<experts>.experts.<e>.<proj>" where the
    quantizer replaced the experts module by a container that holds them as a list
    named `experts` (llm-compressor's LinearExperts for GPT-OSS)."""
    for prefix in (f"{block}.{m['experts']}", f"{block}.{m['experts']}.experts"):
        if prefix in containers:
            return prefix
    return None


def _moe_blocks(model, m, names):
    """(module name, block, checkpoint prefix of its experts, checkpoint prefix of the
    block) for each MoE block of a model.

    The checkpoint may name a block differently from the module tree (transformers'
    Mixtral is "model.layers.<n>.mlp" in torch and "...block_sparse_moe" on disk): the
    family's block name is tried first, then the module's own name."""
    layer = re.compile(r"^(.*\blayers\.\d+)\.[A-Za-z_]\w*$")
    containers = _expert_containers(names)
    found = []
    for name, mod in model.named_modules():
        match = layer.match(name)
        if not match or isinstance(mod, Experts) or not isinstance(
                getattr(mod, "experts", None), nn.Module):
            continue
        for block in (f"{match.group(1)}.{m['moe_block']}", name):
            prefix = _experts_under(m, block, containers)
            if prefix:
                found.append((name, mod, prefix, block))
                break
    return found


def from_pretrained(checkpoint_dir, *, dtype=torch.bfloat16, low_memory=True, threads=None,
                    **kwargs):
    """A transformers causal LM for a compressed-tensors checkpoint whose routed experts
    run on moeq with the checkpoint's packed weights.  Returns (model, names of the
    replaced experts modules).

    low_memory=True (default): the model is built with its parameters on the meta
    device, its experts are swapped for moeq's, and only the other tensors are
    read into torch (quantized ones, e.g. FP8 attention, dequantized to `dtype`, as
    transformers' dequantize=True does): the experts are never decompressed.
    low_memory=False: transformers loads the whole model (experts decompressed to
    `dtype` while loading, CompressedTensorsConfig(dequantize=True)), then the experts
    are swapped; for models the first path cannot build.  `threads`: see Experts.
    `kwargs` go to
    AutoModelForCausalLM.from_pretrained (low_memory=False) or from_config."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig

    path = os.fspath(checkpoint_dir)
    if not low_memory:
        with warnings.catch_warnings():
            # transformers notes that dequantize=True overrides the checkpoint's own
            # quantization_config: that is the point here.
            warnings.filterwarnings("ignore", message=".*already has a `quantization_config`")
            model = AutoModelForCausalLM.from_pretrained(
                path, dtype=dtype, quantization_config=CompressedTensorsConfig(dequantize=True),
                **kwargs)
        model.eval()
        return model, replace_experts(model, path, threads=threads)

    hf_config = AutoConfig.from_pretrained(path)
    if hasattr(hf_config, "quantization_config"):
        del hf_config.quantization_config
    with _parameters_on_meta():
        model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype, **kwargs)
    with Config.load(path) as cfg:
        replaced = replace_experts(model, path, config=cfg, threads=threads)
        _load_dense(model, path, cfg, dtype, _expert_prefixes(model))
    model.eval()
    return model, replaced


def _expert_prefixes(model):
    """{checkpoint prefix of each moeq Experts + ".": its block's checkpoint prefix and module
    name, each + "."} (they differ where the checkpoint names blocks otherwise: Mixtral)."""
    out = {}
    for name, mod in model.named_modules():
        if isinstance(mod, Experts):
            out[mod.prefix + "."] = (mod.block + ".", name.rpartition(".")[0] + ".")
    return out


class _parameters_on_meta:
    """Every parameter registered inside the block lives on the meta device (no memory;
    initialisation is a no-op); buffers stay real (rotary tables are computed then)."""

    def __enter__(self):
        self._original = original = nn.Module.register_parameter

        def register(module, name, param):
            if param is not None and param.device.type != "meta":
                param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
            original(module, name, param)

        nn.Module.register_parameter = register
        return self

    def __exit__(self, *exc):
        nn.Module.register_parameter = self._original


_QUANT_PARAMS = ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape",
                 "weight_global_scale", "weight_g_idx")


def _checkpoint_tensor(ckpt, name):
    """A checkpoint tensor as a torch tensor of its own (the mapping is read-only)."""
    import numpy as np
    from ._core import to_torch
    dtype = ckpt.info(name)["dtype"]
    return to_torch(np.array(ckpt.tensor(name)), dtype)


def _load_dense(model, path, cfg, dtype, skip):
    """Loads every checkpoint tensor outside `skip` (the experts moeq holds, see
    _expert_prefixes) into the meta-built model: plain tensors as they are, quantized
    modules dequantized; a block's other tensors (router, shared experts) under the
    module name the model gives the block."""
    from .ops import dequantize
    state, modules = {}, {}
    with Checkpoint(path) as ckpt:
        for name in ckpt.names():
            if any(name.startswith(p) for p in skip):
                continue
            module, _, leaf = name.rpartition(".")
            if leaf in _QUANT_PARAMS or leaf == "weight":
                modules.setdefault(module, {})[leaf] = name
            else:
                state[name] = _checkpoint_tensor(ckpt, name)
        for module, leaves in modules.items():
            if not any(leaf in leaves for leaf in ("weight_packed", "weight_scale")):
                state[leaves["weight"]] = _checkpoint_tensor(ckpt, leaves["weight"])
                continue
            res = cfg.resolve(module)
            tensors = {leaf: _checkpoint_tensor(ckpt, n) for leaf, n in leaves.items()}
            state[module + ".weight"] = dequantize(res["weights"], res["format"], tensors,
                                                   module=module, flags=cfg.dequant_flags,
                                                   out_dtype=dtype)
    renames = [pair for pair in skip.values() if pair[0] != pair[1]]
    for old_name in list(state):
        for ckpt_block, module_block in renames:
            if old_name.startswith(ckpt_block):
                state[module_block + old_name[len(ckpt_block):]] = state.pop(old_name)
                break
    own = dict(model.named_parameters())
    own.update(model.named_buffers())
    for name, value in list(state.items()):
        target = own.get(name)
        if target is None:
            if name.endswith("input_scale") or "k_scale" in name or "v_scale" in name:
                del state[name]  # activation/KV scales: the dense model has no use for them
                continue
            _errors.fail("CHECKPOINT", f"{path}: tensor {name} has no place in "
                                       f"{type(model).__name__}")
        state[name] = value.to(target.dtype)
    model.load_state_dict(state, strict=False, assign=True)
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    left = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if left:
        _errors.fail("CHECKPOINT", f"{path}: {len(left)} parameters of {type(model).__name__} "
                                   f"have no tensor in the checkpoint, e.g. {left[0]}")
