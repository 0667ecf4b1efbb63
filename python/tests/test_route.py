"""route() against a numpy reference of the documented algorithm."""

import numpy as np
import pytest

import moeq


def reference(logits, top_k, scoring="softmax", renormalize=True, num_expert_group=0,
              topk_group=0, correction_bias=None, routed_scaling_factor=0.0):
    """moeq_route's algorithm as moeq.h states it, in float32 numpy."""
    x = np.asarray(logits, np.float32)
    T, E = x.shape
    if scoring == "softmax":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        scores = e / e.sum(axis=1, keepdims=True)
    else:
        scores = np.float32(1) / (np.float32(1) + np.exp(-x))
    choice = scores + correction_bias if correction_bias is not None else scores.copy()
    if num_expert_group:
        per = E // num_expert_group
        grouped = choice.reshape(T, num_expert_group, per)
        if correction_bias is not None:
            top2 = -np.sort(-grouped, axis=2)[:, :, :2]
            group_score = top2.sum(axis=2)
        else:
            group_score = grouped.max(axis=2)
        # stable sort on -score: equal scores keep the lower group first
        keep = np.argsort(-group_score, axis=1, kind="stable")[:, :topk_group]
        mask = np.zeros((T, num_expert_group), bool)
        np.put_along_axis(mask, keep, True, axis=1)
        choice = np.where(np.repeat(mask, per, axis=1), choice, -np.inf)
    ids = np.argsort(-choice, axis=1, kind="stable")[:, :top_k].astype(np.int32)
    weights = np.take_along_axis(scores, ids, axis=1)
    if renormalize:
        weights = weights / (weights.sum(axis=1, keepdims=True) + np.float32(1e-20))
    weights = weights * np.float32(routed_scaling_factor or 1.0)
    return ids, weights.astype(np.float32)


def check(logits, top_k, **kw):
    ids, weights = moeq.route(logits, top_k, **kw)
    ref_ids, ref_weights = reference(logits, top_k, **kw)
    assert ids.dtype == np.int32 and weights.dtype == np.float32
    assert ids.shape == weights.shape == (len(logits), top_k)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(weights, ref_weights, rtol=2e-6, atol=1e-7)
    return ids, weights


RNG = np.random.default_rng(42)


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("renormalize", [True, False])
def test_plain_top_k(scoring, renormalize):
    logits = RNG.standard_normal((33, 16)).astype(np.float32) * 3
    check(logits, 4, scoring=scoring, renormalize=renormalize)
    check(logits, 1, scoring=scoring, renormalize=renormalize, routed_scaling_factor=2.5)


def test_sigmoid_with_correction_bias():
    logits = RNG.standard_normal((20, 32)).astype(np.float32)
    bias = RNG.standard_normal(32).astype(np.float32) * 0.5
    ids, weights = check(logits, 6, scoring="sigmoid", correction_bias=bias)
    assert (ids != reference(logits, 6, scoring="sigmoid")[0]).any()  # the bias mattered
    # The bias chooses the experts but is never part of the weights.
    unbiased = 1 / (1 + np.exp(-logits.astype(np.float64)))
    picked = np.take_along_axis(unbiased, ids, axis=1)
    np.testing.assert_allclose(weights, picked / picked.sum(axis=1, keepdims=True), rtol=1e-5)


def test_grouped_top_k_deepseek_v3_style():
    logits = RNG.standard_normal((17, 64)).astype(np.float32)
    bias = RNG.standard_normal(64).astype(np.float32) * 0.1
    ids, _ = check(logits, 8, scoring="sigmoid", num_expert_group=8, topk_group=4,
                   correction_bias=bias, routed_scaling_factor=2.5)
    assert all(len(set(row // 8)) <= 4 for row in ids)  # at most 4 groups used per token
    flat = reference(logits, 8, scoring="sigmoid", correction_bias=bias)[0]
    assert (ids != flat).any()  # grouping changed some choices
    check(logits, 4, num_expert_group=4, topk_group=2)  # softmax, best-expert group score


def test_ties_go_to_the_lower_id():
    ids, weights = moeq.route(np.zeros((2, 8), np.float32), 3)
    assert ids.tolist() == [[0, 1, 2], [0, 1, 2]]
    np.testing.assert_allclose(weights, 1 / 3, rtol=1e-6)


def test_inputs_are_converted_and_zero_tokens_work():
    logits64 = RNG.standard_normal((5, 8))
    ids, _ = moeq.route(logits64, 2)
    np.testing.assert_array_equal(ids, moeq.route(logits64.astype(np.float32), 2)[0])
    strided = np.asfortranarray(logits64.astype(np.float32))
    np.testing.assert_array_equal(moeq.route(strided, 2)[0], ids)
    ids0, w0 = moeq.route(np.zeros((0, 8), np.float32), 2)
    assert ids0.shape == w0.shape == (0, 2)


def test_errors_carry_the_library_message():
    with pytest.raises(moeq.InvalidArgumentError, match="top_k is 9"):
        moeq.route(np.zeros((1, 8), np.float32), 9)
    with pytest.raises(moeq.InvalidArgumentError, match="top_k is 9"):
        moeq.route(np.zeros((0, 8), np.float32), 9)  # checked even without tokens
    bad = np.zeros((3, 4), np.float32)
    bad[1, 2] = np.nan
    with pytest.raises(moeq.InvalidArgumentError, match="token 1"):
        moeq.route(bad, 2)
    with pytest.raises(moeq.InvalidArgumentError):
        moeq.route(np.zeros((1, 6), np.float32), 2, num_expert_group=4, topk_group=1)
    with pytest.raises(moeq.InvalidArgumentError, match="scoring 'relu'"):
        moeq.route(np.zeros((1, 4), np.float32), 1, scoring="relu")
    with pytest.raises(moeq.ShapeError, match="correction_bias"):
        moeq.route(np.zeros((1, 4), np.float32), 1, correction_bias=np.zeros(3, np.float32))
    with pytest.raises(moeq.DTypeError):
        moeq.route(np.zeros((1, 4), np.int32), 1)
