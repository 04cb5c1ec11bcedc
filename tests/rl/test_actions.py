"""decode: the documented squashing (softmax weights, sigmoid tau, ceiling, requests and balance shares),
on Python floats."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from td3sched.rl.actions import CEILING_RANGE, LOGIT_LIMIT, decode


def numpy_decode(action, mode):
    """The definition, as NumPy arrays: what decode must equal (to rounding)."""
    a = np.clip(np.asarray(action, dtype=np.float64), -LOGIT_LIMIT, LOGIT_LIMIT)
    e = np.exp(a[:4] - a[:4].max())
    tau = 0.0 if mode == "seed" else 1.0 / (1.0 + np.exp(-a[4]))
    ceiling, requests, balance, fragmentation = None, 0.0, 0.0, 0.0
    if mode == "ceiling":
        lo, hi = CEILING_RANGE
        ceiling = lo + (hi - lo) / (1.0 + np.exp(-a[5]))
    if mode in ("requests", "balance"):
        requests = 1.0 / (1.0 + np.exp(-a[5]))
    if mode == "balance":
        balance = 1.0 / (1.0 + np.exp(-a[6]))
    if mode == "fragmentation":
        fragmentation = 1.0 / (1.0 + np.exp(-a[5]))
    return e / e.sum(), tau, ceiling, requests, balance, fragmentation


MODES = {"seed": 5, "full": 5, "ceiling": 6, "requests": 6, "balance": 7, "fragmentation": 6}


@settings(max_examples=500, deadline=None)
@given(mode=st.sampled_from(sorted(MODES)), data=st.data())
def test_decode_is_the_softmax_and_sigmoids(mode, data):
    action = data.draw(st.lists(st.floats(-50, 50, allow_subnormal=True), min_size=MODES[mode], max_size=MODES[mode]))
    args = decode(np.array(action, dtype=np.float32).astype(np.float64), mode)
    weights, tau, ceiling, requests, balance, fragmentation = numpy_decode(np.array(action, dtype=np.float32).astype(np.float64), mode)
    np.testing.assert_allclose(args.weights, weights, rtol=1e-14, atol=0)
    assert args.weights.dtype == np.float64 and args.weights.shape == (4,)
    # the sum of 4 exponentials rounds 3 times and each weight once: within about 4 half-ulps (2 eps) of 1,
    # which a draw reaches (5, -1.1, -1.1, -1.1 sums to 1 + 2 eps); 4e-16 was below that bound
    assert math.fsum(args.weights) == pytest.approx(1.0, abs=3 * np.finfo(np.float64).eps)
    assert args.tau == pytest.approx(tau, rel=1e-14, abs=0)
    assert (args.ceiling is None) == (ceiling is None)
    if ceiling is not None:
        assert args.ceiling == pytest.approx(ceiling, rel=1e-14)
    assert args.requests == pytest.approx(requests, rel=1e-14, abs=0)
    assert args.balance == pytest.approx(balance, rel=1e-14, abs=0)
    assert args.fragmentation == pytest.approx(fragmentation, rel=1e-14, abs=0)


def test_clipping_to_the_box():
    inside = decode([LOGIT_LIMIT, -LOGIT_LIMIT, 0.0, 0.0, LOGIT_LIMIT])
    beyond = decode([50.0, -50.0, 0.0, 0.0, 80.0])
    np.testing.assert_array_equal(inside.weights, beyond.weights)
    assert inside.tau == beyond.tau == 1.0 / (1.0 + math.exp(-LOGIT_LIMIT))


@pytest.mark.parametrize("action, mode", [([0.0] * 4, "full"), ([0.0] * 6, "full"), ([0.0, 0.0, float("nan"), 0.0, 0.0], "full"),
                                          ([0.0, 0.0, 0.0, 0.0, float("inf")], "seed"), ([[0.0] * 5], "full")])
def test_bad_actions_are_refused_naming_the_mode(action, mode):
    with pytest.raises(ValueError, match=f"action mode '{mode}'"):
        decode(action, mode)


@settings(max_examples=300, deadline=None)
@given(w=st.lists(st.floats(0.02, 1.0), min_size=4, max_size=4), tau=st.floats(0.02, 0.98),
       ceiling=st.floats(0.6, 1.4), requests=st.floats(0.02, 0.98), balance=st.floats(0.02, 0.98))
def test_encode_is_decodes_inverse_within_the_anchor_bound(w, tau, ceiling, requests, balance):
    """A static score's pre-activations decode back to it while no logit needs more than the bound
    (weights within e^(2 x bound) of each other, tau and the ceiling off the ends)."""
    from td3sched.rl.actions import ANCHOR_BOUND, ScoreArgs, encode

    weights = np.array(w) / sum(w)
    for mode in ("full", "ceiling", "requests", "balance", "fragmentation"):
        reads = mode in ("requests", "balance")
        share = balance  # any share in (0, 1): the fragmentation share's too
        action = encode(ScoreArgs(weights, tau, ceiling if mode == "ceiling" else None,
                                  requests if reads else 0.0, balance if mode == "balance" else 0.0,
                                  share if mode == "fragmentation" else 0.0), mode)
        assert np.abs(action).max() <= ANCHOR_BOUND + 1e-6
        back = decode(action, mode)
        np.testing.assert_allclose(back.weights, weights, rtol=1e-5)
        assert back.tau == pytest.approx(tau, rel=1e-5)
        if mode == "ceiling":
            assert back.ceiling == pytest.approx(ceiling, rel=1e-5)
        assert back.requests == (pytest.approx(requests, rel=1e-5) if reads else 0.0)
        assert back.balance == (pytest.approx(balance, rel=1e-5) if mode == "balance" else 0.0)
        assert back.fragmentation == (pytest.approx(share, rel=1e-5) if mode == "fragmentation" else 0.0)


def test_a_static_score_becomes_the_anchors_action_and_a_bad_one_is_refused():
    from td3sched.rl.actions import encode, static_score_args

    args = static_score_args("static-weights:w=1/0/0/0:tau=0.4")
    back = decode(encode(args))
    assert back.weights[0] > 0.998 and back.tau == pytest.approx(0.4, rel=1e-6)
    assert decode(encode(static_score_args("static-weights:w=1/0/0/0", "seed"), "seed"), "seed").tau == 0.0
    no_ceiling = decode(encode(static_score_args("static-weights:w=1/0/0/0", "ceiling"), "ceiling"), "ceiling")
    assert no_ceiling.ceiling > 1.45  # the top of the box holds practically nothing back
    least_allocated = static_score_args("static-weights:w=0.5/0.5/0/0:req=1", "requests")
    assert least_allocated.requests == 1.0
    assert decode(encode(least_allocated, "requests"), "requests").requests > 0.98
    kube = static_score_args("static-weights:w=0.5/0.5/0/0:req=1:bal=0.5", "balance")
    assert (kube.requests, kube.balance) == (1.0, 0.5)
    back = decode(encode(kube, "balance"), "balance")
    assert back.requests > 0.98 and back.balance == pytest.approx(0.5)
    assert static_score_args("static-weights:w=0.5/0.5/0/0:req=1", "balance").balance == 0.0
    for spec, mode, message in (("trimaran-tlp", "full", "expected a static-weights spec"),
                                ("static-weights:w=1/0/0/0:ceiling=0.9", "full", "needs the action mode 'ceiling'"),
                                ("static-weights:w=1/0/0/0:tau=0.3", "seed", "fixes tau at 0"),
                                ("static-weights:w=1/0/0/0:req=0.5", "full", "needs the action mode 'requests'"),
                                ("static-weights:w=1/0/0/0:req=1.5", "requests", r"req=1.5: expected a requests share"),
                                ("static-weights:w=1/0/0/0:bal=0.5", "requests", "needs the action mode 'balance'"),
                                ("static-weights:w=1/0/0/0:bal=-1", "balance", r"bal=-1.0: expected a balance share"),
                                ("static-weights:w=1/1/0/0", "full", "summing to 1")):
        with pytest.raises(ValueError, match=message):
            static_score_args(spec, mode)
