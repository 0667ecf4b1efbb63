"""Configs: parse, inspect, resolve layer names, select schemes, plan."""

import ctypes
import json as _json
import os

from . import _errors
from ._core import (ACTORDERS, Handle, Owner, SCHEMES, STRATEGIES, c_list, cstr, dtype_name,
                    format_name, int32, lookup, name_of, text)
from ._lib import (lib, moeq_config_options, moeq_fused_name, moeq_group_view,
                   moeq_engine_verdict, moeq_inspect_options, moeq_inspect_summary,
                   moeq_plan_options, moeq_model_moe, moeq_quant_args, moeq_resolution,
                   moeq_resolve_options, moeq_select_options, moeq_selection)

KINDS = {"linear": 0, "expert": 1, "other": 2}
PRECEDENCES = {"ct": 0, "engine": 1}
PLATFORMS = {"cpu": 0, "npu": 1}
MATCH_STATUS = ("quantized", "ignored", "unmatched")
RESOLVE_ORDER_DISAGREES = 0x1
RESOLVE_FUSED = 0x2

# How compressed-tensors spells dtypes in QuantizationArgs (as `moeq plan --json` prints them).
_TORCH_DTYPE = {
    "F64": "torch.float64", "F32": "torch.float32", "F16": "torch.float16",
    "BF16": "torch.bfloat16", "F8_E4M3": "torch.float8_e4m3fn", "F8_E5M2": "torch.float8_e5m2",
    "I8": "torch.int8", "U8": "torch.uint8", "I16": "torch.int16", "U16": "torch.uint16",
    "I32": "torch.int32", "U32": "torch.uint32", "I64": "torch.int64", "U64": "torch.uint64",
    "BOOL": "torch.bool",
}


def _torch_dtype(value):
    return _TORCH_DTYPE.get(dtype_name(value)) if value else None


class _ReadOnlyDict(dict):
    """A dict that refuses changes: it mirrors a C struct that would not follow them."""

    def _refuse(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is read-only (it mirrors the library's struct); "
                        f"copy it with dict(...)")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return (dict, (dict(self),))


class QuantArgs(_ReadOnlyDict):
    """One QuantizationArgs after compressed-tensors' defaults and derivations.

    A dict with compressed-tensors' keys, equal to what ``moeq plan --json``
    prints for it (actorder, block_structure, dynamic, group_size, num_bits,
    observer, scale_dtype, strategy, symmetric, type, zp_dtype).  It also
    carries the C struct, so it can be handed back to dequantize() and
    MoELayer(), and is therefore read-only.  Build one from a plain dict
    with moeq.quant_args()."""

    def __init__(self, c_args, owner):
        a = c_args
        dict.__init__(
            self,
            actorder=None if a.actorder == 0 else name_of(ACTORDERS, a.actorder),
            block_structure=[a.block_rows, a.block_cols] if a.block_rows > 0 else None,
            dynamic="local" if a.dynamic == 2 else bool(a.dynamic),
            group_size=a.group_size or None,
            num_bits=a.num_bits,
            observer=text(a.observer),
            scale_dtype=_torch_dtype(a.scale_dtype),
            strategy=name_of(STRATEGIES, a.strategy),
            symmetric=bool(a.symmetric),
            type="float" if a.type == 1 else "int",
            zp_dtype=_torch_dtype(a.zp_dtype),
        )
        self._c = moeq_quant_args.from_buffer_copy(a)
        self._owner = owner  # the config the observer string lives in

    @property
    def summary(self):
        """Short text such as "int4 group(64) sym static"."""
        buf = ctypes.create_string_buffer(128)
        lib.moeq_quant_args_summary(ctypes.byref(self._c), buf, len(buf))
        return buf.value.decode()

    def __repr__(self):
        return f"QuantArgs({dict.__repr__(self)})"

    def __reduce__(self):
        return (quant_args, (dict(self),))


def _args_or_none(ptr, owner):
    return QuantArgs(ptr.contents, owner) if ptr else None


def quant_args(spec):
    """QuantArgs from a dict of compressed-tensors QuantizationArgs keys.

    The library parses it, with compressed-tensors' defaults and derivation
    rules (strategy inference, actorder aliases, zp_dtype...), exactly as it
    would in a config.  A QuantArgs is returned as it is."""
    if isinstance(spec, QuantArgs):
        return spec
    if not isinstance(spec, dict):
        raise TypeError(f"quant args must be a dict or QuantArgs, not {type(spec).__name__}")
    # strict_keys: a misspelt key is an error here, as in compressed-tensors.
    cfg = Config.parse({"quant_method": "compressed-tensors",
                        "config_groups": {"args": {"targets": ["Linear"], "weights": spec}}},
                       strict_keys=True)
    return cfg.groups[0]["weights"]


def args_pointer(args, what):
    """None/QuantArgs/dict -> (pointer or None, keep-alive)."""
    if args is None:
        return None, None
    qa = quant_args(args) if isinstance(args, dict) else None
    if qa is None:
        raise TypeError(f"{what} must be a dict, QuantArgs or None")
    return ctypes.pointer(qa._c), qa


class Resolution(_ReadOnlyDict):
    """What moeq_resolve/moeq_resolve_moe say about one name.

    Keys: name, status ("quantized", "ignored", "unmatched"), group,
    group_index, target, format, weights, input_activations,
    output_activations (QuantArgs or None), ignore_index, order_disagrees,
    fused, other_group_index.  Read-only; pass it to Config.select()."""

    def __init__(self, name, c_res, handle):
        r = c_res
        dict.__init__(
            self,
            name=name,
            status=MATCH_STATUS[r.status] if 0 <= r.status < 3 else r.status,
            group=text(r.group_name),
            group_index=r.group_index,
            target=text(r.target),
            format=format_name(r.format),
            weights=_args_or_none(r.weights, handle),
            input_activations=_args_or_none(r.input_activations, handle),
            output_activations=_args_or_none(r.output_activations, handle),
            ignore_index=r.ignore_index,
            order_disagrees=bool(r.flags & RESOLVE_ORDER_DISAGREES),
            fused=bool(r.flags & RESOLVE_FUSED),
            other_group_index=r.other_group_index,
        )
        self._c = moeq_resolution.from_buffer_copy(r)
        self._owner = handle  # its strings and args point into the config

    def __repr__(self):
        return f"Resolution({dict.__repr__(self)})"


def _resolve_options(precedence, fused):
    """-> (pointer or None, keep-alive) for moeq_resolve_options."""
    if precedence == "ct" and fused is None:
        return None, None
    opts = moeq_resolve_options()
    opts.precedence = lookup(PRECEDENCES, precedence, "precedence")
    keep = []
    if fused is not None:
        if fused is False or (isinstance(fused, dict) and not fused):
            opts.no_fused = 1
        elif isinstance(fused, dict):
            rules = (moeq_fused_name * len(fused))()
            for rule, (name, shards) in zip(rules, fused.items()):
                if isinstance(shards, (str, bytes)):
                    raise TypeError(f"fused[{name!r}] must be a list of shard names")
                shard_arr = (ctypes.c_char_p * max(len(shards), 1))(
                    *[cstr(s, "shard name") for s in shards])
                rule.fused = cstr(name, "fused name")
                rule.n_shards = len(shards)
                rule.shards = shard_arr
                keep.append(shard_arr)
            opts.n_fused = len(fused)
            opts.fused = rules
            keep.append(rules)
        else:
            raise TypeError("fused must be None (defaults), False/{} (off) or "
                            "{fused_name: [shard, ...]}")
    return ctypes.pointer(opts), (opts, keep)


def _select_options(platform, prefer_mxint4):
    opts = moeq_select_options()
    opts.platform = lookup(PLATFORMS, platform, "platform")
    opts.prefer_mxint4 = 1 if prefer_mxint4 else 0
    return opts


def _proj_array(proj_names):
    if proj_names is None:
        return None
    names = [cstr(p, "projection name") for p in proj_names]
    if len(names) != 3:
        _errors.fail("INVALID_ARG", f"proj_names must be (gate, up, down), got {len(names)} names")
    return (ctypes.c_char_p * 3)(*names)


def select(resolution, layer=None, platform="cpu", prefer_mxint4=False):
    """The MoE scheme for a resolution (from resolve_moe): (scheme name, reason).

    Raises UnsupportedError when no scheme accepts, with each scheme's reason."""
    if not isinstance(resolution, Resolution):
        raise TypeError("resolution must come from Config.resolve or Config.resolve_moe")
    opts = _select_options(platform, prefer_mxint4)
    out = moeq_selection()
    layer_b = cstr(layer if layer is not None else resolution["name"], "layer")
    _errors.call(lib.moeq_select, ctypes.byref(resolution._c), layer_b, ctypes.byref(opts),
                 ctypes.byref(out))
    return lib.moeq_scheme_name(out.scheme).decode(), out.reason.decode("utf-8", "replace")


class Config(Owner):
    """An immutable, thread-safe compressed-tensors quantization config.

    Create with Config.parse(json) or Config.load(path); close() (or a with
    block) releases it."""

    _what = "config"

    def __init__(self, _ptr):
        if not isinstance(_ptr, Handle):
            raise TypeError("use Config.parse() or Config.load()")
        self._handle = _ptr

    @staticmethod
    def _options(strict_keys, regex_match_limit):
        opts = moeq_config_options()
        opts.strict_keys = 1 if strict_keys else 0
        opts.regex_match_limit = int32(regex_match_limit, "regex_match_limit",
                                       unsigned=True)
        return opts

    @classmethod
    def _wrap(cls, out):
        return cls(Handle(out.value, lib.moeq_config_destroy))

    @classmethod
    def parse(cls, json, strict_keys=False, regex_match_limit=0):
        """Parses a config.json or a bare quantization_config (str, bytes or dict)."""
        if isinstance(json, dict):
            json = _json.dumps(json)
        if isinstance(json, str):
            json = json.encode("utf-8")
        if not isinstance(json, (bytes, bytearray, memoryview)):
            raise TypeError(f"json must be str, bytes or dict, not {type(json).__name__}")
        buf = bytes(json)
        opts = cls._options(strict_keys, regex_match_limit)
        out = ctypes.c_void_p()
        _errors.call(lib.moeq_config_parse, buf, len(buf), ctypes.byref(opts), ctypes.byref(out))
        return cls._wrap(out)

    @classmethod
    def load(cls, path, strict_keys=False, regex_match_limit=0):
        """Reads a model directory (its config.json), a config.json or a bare block."""
        opts = cls._options(strict_keys, regex_match_limit)
        out = ctypes.c_void_p()
        _errors.call(lib.moeq_config_load, cstr(os.fspath(path), "path"), ctypes.byref(opts),
                     ctypes.byref(out))
        return cls._wrap(out)

    # ---- what the config says ---------------------------------------------------

    @property
    def source_key(self):
        return text(self._call(lib.moeq_config_source_key))

    @property
    def format(self):
        """Top-level format name, None when absent."""
        return format_name(self._call(lib.moeq_config_format))

    @property
    def version(self):
        return text(self._call(lib.moeq_config_version))

    @property
    def quantization_status(self):
        return text(self._call(lib.moeq_config_quantization_status))

    @property
    def kv_cache_scheme(self):
        h = self._live()
        return _args_or_none(lib.moeq_config_kv_cache_scheme(h.ptr), h)

    def raw(self, key):
        """Raw JSON text of sparsity_config/transform_config/kv_cache_scheme, or None."""
        return text(self._call(lib.moeq_config_raw, cstr(key, "key")))

    @property
    def ignore(self):
        h = self._live()
        return [text(lib.moeq_config_ignore(h.ptr, i))
                for i in range(lib.moeq_config_ignore_count(h.ptr))]

    @property
    def warnings(self):
        h = self._live()
        return [text(lib.moeq_config_warning(h.ptr, i))
                for i in range(lib.moeq_config_warning_count(h.ptr))]

    @property
    def groups(self):
        """The config groups in JSON order, as dicts ("format": the group's own,
        "effective_format": the one its modules are read with)."""
        h = self._live()
        return [{
            "name": text(g.name),
            "index": g.index,
            "targets": [text(g.targets[t]) for t in range(g.n_targets)],
            "weights": _args_or_none(g.weights, h),
            "input_activations": _args_or_none(g.input_activations, h),
            "output_activations": _args_or_none(g.output_activations, h),
            "format": format_name(g.format),
            "effective_format": format_name(lib.moeq_config_group_format(h.ptr, g.index)),
            "preset": bool(g.preset),
        } for g in c_list(h, lib.moeq_config_group_count, lib.moeq_config_group, moeq_group_view)]

    def model_number(self, key, default=None):
        """A numeric (or boolean, as 0/1) model field such as "num_experts", or `default`."""
        out = ctypes.c_double()
        st = self._call(lib.moeq_config_model_number, cstr(key, "key"), ctypes.byref(out))
        return out.value if st == 0 else default

    def model_string(self, key, default=None):
        """A string model field such as "scoring_func", or `default`."""
        value = text(self._call(lib.moeq_config_model_string, cstr(key, "key")))
        return default if value is None else value

    @property
    def moe_sparsity(self):
        """compressed-tensors 0.20's moe_sparsity_config, or None: {"method": "prune" or
        "novice", "num_experts": [the experts each decoder layer retains, None for a
        dense layer]}."""
        h = self._live()
        n = ctypes.c_uint32()
        method = lib.moeq_config_moe_sparsity(h.ptr, ctypes.byref(n))
        if method == 0:
            return None
        counts = [lib.moeq_config_moe_sparsity_layer(h.ptr, i) for i in range(n.value)]
        return {"method": {1: "prune", 2: "novice"}.get(method, str(method)),
                "num_experts": [c if c > 0 else None for c in counts]}

    def retained_experts(self, prefix):
        """The experts the MoE layer `prefix` ("model.layers.3.mlp.experts") holds under
        moe_sparsity_config; 0 without one (the model's own count stands).  Raises
        NoMatchError for a layer the list marks dense or does not cover, and
        UnsupportedError for method "novice"."""
        out = ctypes.c_int32()
        h = self._live()
        _errors.call(lib.moeq_config_retained_experts, h.ptr, cstr(prefix, "prefix"),
                     ctypes.byref(out))
        return out.value

    def model_moe(self):
        """The model's MoE blocks as its family's code runs them (moeq_model_moe_get):
        a dict with family, known, dimensions, routing (scoring, renormalize,
        num_expert_group, topk_group, routed_scaling_factor,
        apply_router_weight_on_input), experts (activation, swiglu_alpha,
        swiglu_limit, gated, expert_bias, shared experts), module names and
        `defaults`: the settings taken from the family table, not config.json."""
        m = moeq_model_moe()
        h = self._live()
        _errors.call(lib.moeq_model_moe_get, h.ptr, ctypes.byref(m))
        return model_moe_dict(m)

    @property
    def dequant_flags(self):
        """Flags a checkpoint written by this config's version needs (see dequantize)."""
        return self._call(lib.moeq_config_dequant_flags)

    # ---- resolving, selecting, planning -------------------------------------------

    def resolve(self, name, kind="linear", precedence="ct", fused=None):
        """Resolves one module name -> Resolution.

        kind: "linear", "expert" or "other".  precedence: "ct" (compressed-
        tensors) or "engine" (vLLM/SGLang).  fused: None for the default fused
        names (qkv_proj, gate_up_proj), False to switch them off, or
        {"w13": ["w1", "w3"], ...}."""
        h = self._live()
        opts, keep = _resolve_options(precedence, fused)
        out = moeq_resolution()
        _errors.call(lib.moeq_resolve, h.ptr, cstr(name, "name"), lookup(KINDS, kind, "kind"),
                     opts, ctypes.byref(out))
        del keep
        return Resolution(name, out, h)

    def resolve_moe(self, prefix, num_experts, proj_names=None, precedence="ct", fused=None):
        """Resolves a fused-experts layer ("model.layers.3.mlp.experts", 256 experts).

        proj_names: (gate, up, down), default gate_proj/up_proj/down_proj."""
        h = self._live()
        opts, keep = _resolve_options(precedence, fused)
        projs = _proj_array(proj_names)
        out = moeq_resolution()
        _errors.call(lib.moeq_resolve_moe, h.ptr, cstr(prefix, "prefix"), int32(num_experts, "num_experts", unsigned=True),
                     projs, opts, ctypes.byref(out))
        del keep
        return Resolution(prefix, out, h)

    def select(self, resolution, platform="cpu", prefer_mxint4=False, layer=None):
        """(scheme name, reason) for a resolution of this config; see moeq.select."""
        if not isinstance(resolution, Resolution) or resolution._owner is not self._live():
            raise TypeError("resolution must come from this config's resolve/resolve_moe")
        return select(resolution, layer=layer, platform=platform, prefer_mxint4=prefer_mxint4)

    def engine_verdict(self, prefix, num_experts, engine="sglang", proj_names=None,
                       precedence="ct", fused=None, platform="cpu", prefer_mxint4=False):
        """What `engine` ("sglang", "sglang@eba6af385d", "vllm:sm100", ...) would do with
        the MoE layer `prefix` (moeq_engine_judge) -> dict with keys engine, scheme (the
        class it builds, or None), error ("Type: message", or None), branch (the table
        row), group and args_group (names or None), differs (words, [] when the engine
        agrees with moeq) and moeq_scheme (moeq's own choice, None when it fails)."""
        h = self._live()
        ropts, keep = _resolve_options(precedence, fused)
        sopts = _select_options(platform, prefer_mxint4)
        projs = _proj_array(proj_names)
        out = moeq_engine_verdict()
        _errors.call(lib.moeq_engine_judge, h.ptr, _engine_spec(engine), cstr(prefix, "prefix"),
                     int32(num_experts, "num_experts", unsigned=True), projs, ropts,
                     ctypes.byref(sopts), ctypes.byref(out))
        del keep
        groups = [g["name"] for g in self.groups]

        def group(i):
            return groups[i] if i >= 0 else None

        return {
            "engine": out.engine.decode(),
            "scheme": out.scheme.decode() or None,
            "error": out.error.decode("utf-8", "replace") or None,
            "branch": out.branch.decode(),
            "group": group(out.group_index),
            "args_group": group(out.args_group_index),
            "differs": [w for bit, w in enumerate(ENGINE_DIFFERS) if out.differs >> bit & 1],
            "moeq_scheme": lib.moeq_scheme_name(out.moeq_scheme).decode()
            if out.moeq_scheme >= 0 else None,
        }

    def plan(self, lines, json=True, threads=1, precedence="ct", fused=None, platform="cpu",
             prefer_mxint4=False, engine=None):
        """Plans layer lines: "NAME" or "NAME moe N [GATE,UP,DOWN]".

        `lines` is one string (newline-separated) or a list of lines.  Returns
        the list of dicts `moeq plan --json` prints (json=True) or its text
        table (json=False).  `engine` ("sglang", "sglang@eba6af385d",
        "vllm:sm100", ...) adds what that engine's MoE dispatch would do:
        keys engine, engine_scheme, engine_error, engine_group and
        engine_differs (see docs/engines.md)."""
        h = self._live()
        if not isinstance(lines, (str, bytes)):
            lines = list(lines)
            for i, line in enumerate(lines):
                if "\n" in line:
                    _errors.fail("INVALID_ARG", f"lines[{i}] contains a newline")
            lines = "\n".join(lines)
        data = lines.encode("utf-8") if isinstance(lines, str) else bytes(lines)
        ropts, keep = _resolve_options(precedence, fused)
        sopts = _select_options(platform, prefer_mxint4)
        popts = moeq_plan_options()
        popts.resolve = ropts
        popts.select = ctypes.pointer(sopts)
        popts.json = 1 if json else 0
        popts.threads = int32(threads, "threads")
        if engine is not None:
            popts.engine = _engine_spec(engine)
        out = ctypes.c_void_p()
        errors = ctypes.c_uint32()
        _errors.call(lib.moeq_plan, h.ptr, data, len(data), ctypes.byref(popts),
                     ctypes.byref(out), ctypes.byref(errors))
        del keep
        try:
            result = ctypes.string_at(out.value).decode("utf-8", "replace")
        finally:
            lib.moeq_free(out)
        return _json.loads(result) if json else result


def _engine_spec(engine):
    if not isinstance(engine, str):
        raise TypeError("engine must be a str such as \"sglang@d315eb725\"")
    return engine.encode("utf-8")


def inspect(config, checkpoint, json=True, names_only=False, precedence="ct", fused=None,
            platform="cpu", prefer_mxint4=False, engine=None):
    """moeq_inspect: plans a checkpoint's modules against `config` and accounts
    for every tensor -> (report, summary).

    report: the dict `moeq inspect --json` prints (json=True) or the text
    report; summary: counts (tensors, modules, moe_layers, unconsumed,
    missing, errors, ...).  `engine` as in Config.plan: MoE rows also say
    what that engine's dispatch would build or raise."""
    h = config._live()
    ck = checkpoint._live()
    ropts, keep = _resolve_options(precedence, fused)
    sopts = _select_options(platform, prefer_mxint4)
    opts = moeq_inspect_options()
    opts.resolve = ropts
    opts.select = ctypes.pointer(sopts)
    opts.json = 1 if json else 0
    opts.names_only = 1 if names_only else 0
    if engine is not None:
        opts.engine = _engine_spec(engine)
    out = ctypes.c_void_p()
    summary = moeq_inspect_summary()
    _errors.call(lib.moeq_inspect, h.ptr, ck.ptr, ctypes.byref(opts), ctypes.byref(out),
                 ctypes.byref(summary))
    del keep
    try:
        text = ctypes.string_at(out.value).decode("utf-8", "replace")
    finally:
        lib.moeq_free(out)
    counts = {name: getattr(summary, name) for name, _ in summary._fields_}
    return (_json.loads(text) if json else text), counts


def dequant_flags(config):
    """moeq_config_dequant_flags: the flags dequantize() needs for this config's checkpoints."""
    return config.dequant_flags


# The words of moeq_engine_verdict.differs, bit by bit (as `plan --json` writes them).
ENGINE_DIFFERS = ("error", "scheme", "group", "unquantized", "quantized", "args", "moeq_fails")


def engines():
    """[(name, summary)] of the modelled engine versions ("sglang@d315eb725", ...),
    newest first within an engine."""
    return [(lib.moeq_engine_name(i).decode(), lib.moeq_engine_summary(i).decode())
            for i in range(lib.moeq_engine_count())]


def schemes():
    """Every MoE scheme name, in id order."""
    return list(SCHEMES)


def scheme_summary(scheme):
    """One line saying what a scheme computes."""
    return lib.moeq_scheme_summary(lookup(SCHEMES, scheme, "scheme")).decode()


ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "swiglu_oai", "relu2")


def model_moe_dict(m):
    """A moeq_model_moe as a plain dict."""
    summary = ctypes.create_string_buffer(256)
    lib.moeq_model_moe_summary(ctypes.byref(m), summary, len(summary))
    return {
        "family": m.family.decode(), "model_type": m.model_type.decode(), "known": bool(m.known),
        "num_experts": m.num_experts, "top_k": m.top_k, "hidden_size": m.hidden_size,
        "intermediate_size": m.intermediate_size,
        "scoring": "sigmoid" if m.scoring == 1 else "softmax",
        "renormalize": bool(m.renormalize), "num_expert_group": m.num_expert_group,
        "topk_group": m.topk_group, "routed_scaling_factor": m.routed_scaling_factor,
        "apply_router_weight_on_input": bool(m.apply_router_weight_on_input),
        "activation": ACTIVATIONS[m.activation], "swiglu_alpha": m.swiglu_alpha,
        "swiglu_limit": m.swiglu_limit, "gated": bool(m.gated),
        "expert_bias": bool(m.expert_bias), "n_shared_experts": m.n_shared_experts,
        "shared_expert_gate": bool(m.shared_expert_gate),
        "params_dtype": dtype_name(m.params_dtype), "moe_block": m.moe_block.decode(),
        "router": m.router.decode(), "router_bias": bool(m.router_bias),
        "correction_bias": m.correction_bias.decode(), "experts": m.experts.decode(),
        "proj": [p.value.decode() for p in m.proj], "defaults": m.defaults.decode(),
        "unknown_defaults": bool(m.unknown_defaults), "summary": summary.value.decode(),
    }


def model_family(model_type):
    """The family table's row for a model_type (what its code does with a silent config)."""
    m = moeq_model_moe()
    _errors.call(lib.moeq_model_family, cstr(model_type, "model_type"), ctypes.byref(m))
    return model_moe_dict(m)


def model_families():
    """[(model_type, modeling file)] of every family in the table."""
    out, i = [], 0
    while True:
        name = lib.moeq_model_family_name(i)
        if name is None:
            return out
        out.append((name.decode(), lib.moeq_model_family_source(i).decode()))
        i += 1
