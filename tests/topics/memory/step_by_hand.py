"""A decode step and the largest batch within a TPOT, by hand in plain Python; shared by the tests of
kv-bytes-per-token and users-per-gpu."""
from __future__ import annotations

from fractions import Fraction

from tests.oracles import link_each_way


def exact_q(x) -> Fraction:
    return Fraction(str(x))  # a figure as the decimal it prints as


def step_time_by_hand(model, gpu, n: int, W, N, kv_req, P, *, stream=1, reach=1, overhead=0):
    """t(B) of a TP-n decode step in exact arithmetic: the roofline plus two ring all-reduces per layer (on a
    mesh, MI300X's, over the n − 1 links among the group's GPUs). stream, reach, overhead: the step model's
    share of HBM bandwidth, share of peak and seconds a step (the bare roofline by default)."""
    BW, link = exact_q(gpu.hbm_tb_s) * 10**12 * stream, link_each_way(gpu, n)

    def t(B):
        ring = Fraction(2 * (n - 1), n) * B * model.hidden * 2 / link
        ar = 0 if n == 1 else 2 * model.layers * (Fraction(1, 100_000) + ring)
        return max((W + B * kv_req) / (n * BW), 2 * N * B / (n * P * reach)) + ar + overhead
    return t


def largest_within(t, target) -> int:
    """The largest batch B with t(B) <= target (t grows with B), by bisection."""
    lo, hi = 0, 1
    while t(hi) <= target:
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if t(mid) <= target else (lo, mid)
    return lo
