"""dequantize() against numpy references built here (spec §3.4, §3.5, §7b)
and against compressed-tensors' own outputs (tests/data/conformance)."""

import json
import os

import numpy as np
import pytest

import moeq

from conftest import CONFORMANCE

# ---- packing as compressed-tensors writes it (spec §3.4) --------------------------


def pack_rows(q, bits, legacy=False):
    """Signed b-bit values [rows, cols] -> int32 words, packed along each row.

    Dense LSB-first (0.18): element i at bit i*b, straddling words when needed.
    Legacy (< 0.18): floor(32/b) values per word, high bits unused."""
    u = (np.asarray(q, np.int64) + (1 << (bits - 1))).astype(np.uint64)
    rows, cols = u.shape
    per_word = 32 // bits
    words = -(-cols // per_word) if legacy else -(-cols * bits // 32)
    out = np.zeros((rows, words), np.uint64)
    for i in range(cols):
        if legacy:
            w, off = i // per_word, (i % per_word) * bits
        else:
            w, off = (i * bits) >> 5, (i * bits) & 31
        out[:, w] |= (u[:, i] << np.uint64(off)) & np.uint64(0xFFFFFFFF)
        if off + bits > 32:
            out[:, w + 1] |= u[:, i] >> np.uint64(32 - off)
    return out.astype(np.uint32).view(np.int32)


def pack_zero_points(zp, bits):
    """[out, G] zero points, packed down the rows (spec §3.4): I32 [ceil(out*b/32), G]."""
    return np.ascontiguousarray(pack_rows(np.asarray(zp).T, bits).T)


def words(*hexes):
    return np.array(hexes, np.uint32).view(np.int32)


@pytest.mark.parametrize("bits,values,packed", [
    (4, [-8, -7, -6, -5, -4, -3, -2, -1], [0x76543210]),
    (4, [1, 2, 3, 4], [0x0000CBA9]),
    (4, [7, -8, 0, -1, 3, -3, 5, -6], [0x2D5B780F]),
    (4, [5, -3, 0], [0x0000085D]),
    (8, [127, -128, 0, -1], [0x7F8000FF]),
    (2, [1, -1] * 5, [0x00077777]),
    (3, [-4, -3, -2, -1, 0, 1, 2, 3] * 4, [0x88FAC688, 0xC688FAC6, 0xFAC688FA]),
])
def test_the_numpy_packer_reproduces_the_spec_vectors(bits, values, packed):
    np.testing.assert_array_equal(pack_rows([values], bits)[0], words(*packed))


def test_the_numpy_packer_legacy_and_zero_point_vectors():
    legacy = pack_rows([[-4, -3, -2, -1, 0, 1, 2, 3] * 4], 3, legacy=True)[0]
    np.testing.assert_array_equal(legacy, words(0x08FAC688, 0x1A23EB1A, 0x2C688FAC, 0x3E))
    zp = np.array([[-4], [0], [3], [-8], [7], [1], [-1], [2], [5], [-6]])
    np.testing.assert_array_equal(pack_zero_points(zp, 4), words(0xA79F0B84, 0x2D).reshape(2, 1))


# ---- the spec's end-to-end vector E1 -------------------------------------------------

E1_Q = np.array([[7, -8, 0, -1, 3, -3, 5, -6, 1, 2, 3, 4, -1, -2, -3, -4],
                 [-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7]])
E1_SCALE = np.array([[0.25, 0.125], [0.5, 0.0625]], np.float32)


def e1_tensors(**extra):
    t = {"weight_packed": pack_rows(E1_Q, 4), "weight_shape": np.array([2, 16], np.int64),
         "weight_scale": E1_SCALE}
    t.update(extra)
    return t


def test_e1_symmetric():
    np.testing.assert_array_equal(
        e1_tensors()["weight_packed"], words(0x2D5B780F, 0x4567CBA9, 0x76543210, 0xFEDCBA98)
        .reshape(2, 2))
    args = {"num_bits": 4, "strategy": "group", "group_size": 8, "symmetric": True}
    w = moeq.dequantize(args, "pack-quantized", e1_tensors())
    assert w.dtype == np.float32 and w.shape == (2, 16)
    np.testing.assert_array_equal(w[0], [1.75, -2, 0, -0.25, 0.75, -0.75, 1.25, -1.5,
                                         0.125, 0.25, 0.375, 0.5, -0.125, -0.25, -0.375, -0.5])
    np.testing.assert_array_equal(w[1], np.repeat(E1_SCALE[1], 8) * E1_Q[1])


def test_e1_asymmetric_and_actorder():
    zp = np.array([[-4, 1], [0, -8]])
    np.testing.assert_array_equal(pack_zero_points(zp, 4), words(0x84, 0x09).reshape(1, 2))
    args = {"num_bits": 4, "strategy": "group", "group_size": 8, "symmetric": False}
    w = moeq.dequantize(args, "pack-quantized",
                        e1_tensors(weight_zero_point=pack_zero_points(zp, 4)))
    np.testing.assert_array_equal(w[0], [2.75, -1, 1, 0.75, 1.75, 0.25, 2.25, -0.5,
                                         0, 0.125, 0.25, 0.375, -0.25, -0.375, -0.5, -0.625])
    g_idx = np.array([1, 0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1], np.int32)
    args = {"num_bits": 4, "strategy": "group", "group_size": 8, "actorder": "group"}
    w = moeq.dequantize(args, "pack-quantized", e1_tensors(weight_g_idx=g_idx))
    np.testing.assert_array_equal(w[0], [0.875, -2, 0, -0.25, 0.375, -0.75, 0.625, -1.5,
                                         0.25, 0.25, 0.75, 0.5, -0.25, -0.25, -0.75, -0.5])


# ---- random int cases against a numpy reference -----------------------------------------


def f32_to_bf16_bits(x):
    """Round-to-nearest-even float32 -> bfloat16 bits (as torch does)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.asarray(b, np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("bits,group,symmetric,legacy", [
    (4, 16, True, False), (4, 32, False, False), (8, 64, False, False), (3, 32, False, False),
    (3, 32, True, True), (2, 16, False, False),
])
def test_pack_quantized_group_against_numpy(bits, group, symmetric, legacy):
    rng = np.random.default_rng(bits * 100 + group)
    out_f, in_f = 6, 128
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    q = rng.integers(lo, hi + 1, (out_f, in_f))
    groups = in_f // group
    scale_bits = f32_to_bf16_bits(rng.uniform(0.01, 0.5, (out_f, groups)))
    scale = bf16_bits_to_f32(scale_bits)
    tensors = {"model.x.weight_packed": pack_rows(q, bits, legacy),
               "model.x.weight_shape": np.array([out_f, in_f], np.int64),
               "model.x.weight_scale": ("BF16", scale_bits)}
    zp = np.zeros((out_f, groups), np.int64)
    if not symmetric:
        zp = rng.integers(lo, hi + 1, (out_f, groups))
        tensors["model.x.weight_zero_point"] = pack_zero_points(zp, bits)
    args = {"num_bits": bits, "strategy": "group", "group_size": group, "symmetric": symmetric}
    flags = moeq.DEQUANT_LEGACY_PACKING if legacy else 0
    ref = ((q - np.repeat(zp, group, axis=1)).astype(np.float32) *
           np.repeat(scale, group, axis=1))
    w = moeq.dequantize(args, "pack-quantized", tensors, module="model.x", flags=flags)
    np.testing.assert_array_equal(w, ref)
    w16 = moeq.dequantize(args, "pack-quantized", tensors, flags=flags, out_dtype="BF16")
    assert w16.dtype == np.uint16
    np.testing.assert_array_equal(w16, f32_to_bf16_bits(ref))
    h = moeq.dequantize(args, "pack-quantized", tensors, flags=flags, out_dtype="F16")
    np.testing.assert_array_equal(h, ref.astype(np.float16))


def test_legacy_flag_decides_between_equally_wide_3_bit_layouts():
    # 11 columns of 3 bits take 2 words either way; element 10 straddles words
    # in the dense layout and starts word 1 in the legacy one (spec §3.4).
    q = np.array([[-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2]] * 2)
    np.testing.assert_array_equal(pack_rows(q[:1], 3)[0], words(0x88FAC688, 0))
    np.testing.assert_array_equal(pack_rows(q[:1], 3, legacy=True)[0], words(0x08FAC688, 2))
    args = {"num_bits": 3, "strategy": "channel"}
    base = {"weight_shape": np.array([2, 11], np.int64), "weight_scale": np.ones((2, 1), np.float32)}
    dense = dict(base, weight_packed=pack_rows(q, 3))
    legacy = dict(base, weight_packed=pack_rows(q, 3, legacy=True))
    np.testing.assert_array_equal(moeq.dequantize(args, "pack-quantized", dense), q)
    np.testing.assert_array_equal(
        moeq.dequantize(args, "pack-quantized", legacy, flags=moeq.DEQUANT_LEGACY_PACKING), q)
    # Read with the other layout's rule, element 10 comes out wrong.
    wrong = moeq.dequantize(args, "pack-quantized", legacy)
    assert wrong[0, 10] != q[0, 10] and (wrong[:, :10] == q[:, :10]).all()


# ---- FP8 (spec §3.5, vector E2) ------------------------------------------------------


def e4m3_table():
    """float value of every E4M3FN code (NaN for 0x7F/0xFF)."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp, man = (codes >> 3) & 0xF, codes & 7
    value = np.where(exp == 0, man / 8.0 * 2.0**-6, (1 + man / 8.0) * 2.0**(exp - 7.0))
    value = (sign * value).astype(np.float32)
    value[[0x7F, 0xFF]] = np.nan
    return value


def test_fp8_channel_against_numpy():
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 256, (5, 40)).astype(np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x3C  # no NaN codes
    scale = rng.uniform(0.001, 2, (5, 1)).astype(np.float32)
    ref = e4m3_table()[codes] * scale
    args = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}
    w = moeq.dequantize(args, "float-quantized",
                        {"weight": ("F8_E4M3", codes), "weight_scale": scale})
    np.testing.assert_array_equal(w, ref)


def test_fp8_block_e2():
    codes = np.array([[0x38, 0x40, 0xB8, 0x30, 0x7E], [0x00, 0x48, 0xC0, 0x34, 0x3C],
                      [0x38, 0x38, 0x38, 0x38, 0xF6]], np.uint8)
    np.testing.assert_array_equal(e4m3_table()[codes],
                                  [[1, 2, -1, 0.5, 448], [0, 4, -2, 0.75, 1.5],
                                   [1, 1, 1, 1, -224]])
    args = {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [2, 4]}
    w = moeq.dequantize(args, "float-quantized",
                        {"weight": ("F8_E4M3", codes),
                         "weight_scale": np.array([[0.5, 2], [0.25, 1]], np.float32)})
    np.testing.assert_array_equal(w, [[0.5, 1, -0.5, 0.25, 896], [0, 2, -1, 0.375, 3],
                                      [0.25, 0.25, 0.25, 0.25, -224]])


def test_resolution_args_feed_dequantize(glm):
    res = glm.resolve("model.layers.9.mlp.experts.3.down_proj", kind="expert")
    q = np.random.default_rng(1).integers(-8, 8, (4, 128))
    scale = np.full((4, 2), 0.5, np.float32)
    w = moeq.dequantize(res["weights"], res["format"],
                        {"weight_packed": pack_rows(q, 4), "weight_scale": scale,
                         "weight_shape": np.array([4, 128], np.int64)},
                        flags=glm.dequant_flags)
    np.testing.assert_array_equal(w, q * np.float32(0.5))


def test_dequantize_argument_checks():
    args = {"num_bits": 4, "strategy": "group", "group_size": 8}
    with pytest.raises(moeq.DTypeError, match="out_dtype"):
        moeq.dequantize(args, "pack-quantized", e1_tensors(), out_dtype="F64")
    with pytest.raises(moeq.InvalidArgumentError, match="format 'packed'"):
        moeq.dequantize(args, "packed", e1_tensors())
    with pytest.raises(moeq.CheckpointError, match="m.weight_shape: missing"):
        t = e1_tensors()
        del t["weight_shape"]
        moeq.dequantize(args, "pack-quantized", t, module="m")
    with pytest.raises(TypeError):
        moeq.dequantize("int4", "pack-quantized", e1_tensors())


# ---- compressed-tensors' own outputs ---------------------------------------------------


def conformance_cases():
    with open(os.path.join(CONFORMANCE, "index.json")) as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("case", conformance_cases())
def test_conformance_fixture(case):
    with open(os.path.join(CONFORMANCE, case + ".json")) as f:
        meta = json.load(f)
    with moeq.Checkpoint(os.path.join(CONFORMANCE, case + ".safetensors")) as ckpt:
        module = meta["module"]
        tensors = {}
        for name in ckpt.names():
            if name.startswith(module + "."):
                info = ckpt.info(name)
                tensors[name] = (info["dtype"], ckpt.tensor(name))
        assert set(tensors) == {f"{module}.{p}" for p in meta["tensors"]}
        expected = np.array(ckpt.tensor("expected"))
    out_dtype = meta["expected_dtype"]
    w = moeq.dequantize(meta["args"], meta["format"], tensors, module=module,
                        out_dtype=out_dtype)
    assert w.shape == tuple(meta["shape"])
    if out_dtype == "BF16":
        np.testing.assert_array_equal(w, f32_to_bf16_bits(expected))
    elif out_dtype == "F16":
        np.testing.assert_array_equal(w, expected.astype(np.float16))
    else:
        np.testing.assert_array_equal(w, expected)
