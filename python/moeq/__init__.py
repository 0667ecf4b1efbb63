"""moeq: quantized compressed-tensors MoE layers on any CPU (Python binding).

A thin ctypes binding of libmoeq's C API (include/moeq/moeq.h); no torch.
The shared library is found through MOEQ_LIBRARY (a full path), then a copy
inside this package directory, then the system loader (see moeq._lib).

    import moeq
    cfg = moeq.Config.load("path/to/model")
    res = cfg.resolve_moe("model.layers.3.mlp.experts", 256)
    scheme, why = cfg.select(res)
    plan = cfg.plan(["model.layers.3.mlp.experts moe 256", "lm_head"])

Every failure raises a subclass of moeq.Error carrying the library's status
and message.
"""

from ._errors import *  # noqa: F401,F403  (Error and one subclass per status)
from ._errors import __all__ as _error_names
from ._lib import lib as _cdll
from ._lib import path as library_path
from ._log import set_log_callback
from ._version import __version__
from .checkpoint import Checkpoint, safetensors_write
from .config import (Config, QuantArgs, Resolution, dequant_flags, engines, inspect,
                     model_families, model_family, quant_args, scheme_summary, schemes, select)
from .linear import Linear
from .moe import Context, MoELayer
from .ops import DEQUANT_LEGACY_PACKING, DEQUANT_MXFP4_V013, dequantize, route
from .writer import (compress, compress_input, nvfp4_global_scale, synth_original, synth_presets,
                     synth_write)


def version():
    """The loaded library's version string ("0.1.0")."""
    return _cdll.moeq_version().decode()


def version_number():
    """The loaded library's MOEQ_VERSION_NUMBER (major * 10000 + minor * 100 + patch)."""
    return _cdll.moeq_version_number()


__all__ = _error_names + [
    "Checkpoint", "Config", "Context", "DEQUANT_LEGACY_PACKING", "DEQUANT_MXFP4_V013",
    "Linear", "MoELayer", "QuantArgs", "Resolution", "compress", "compress_input", "dequant_flags",
    "dequantize", "engines", "inspect", "nvfp4_global_scale", "synth_original", "synth_presets",
    "synth_write",
    "library_path",
    "quant_args", "route", "safetensors_write", "scheme_summary", "schemes", "select",
    "set_log_callback", "version", "version_number", "__version__",
]
