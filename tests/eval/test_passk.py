"""Pass@k against brute-force enumeration of k-subsets (float64 vs exact fractions), and Hit>=m@n."""

import itertools
import math
from fractions import Fraction

import pytest

from sparsectx.eval.passk import hit_at_least, hit_rate, k_values, pass_at_k, pass_at_k_curve


def brute_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Fraction of the k-subsets of n samples (the first c correct) holding a correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(i < c for i in s) for s in subsets), len(subsets))


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):  # includes k = n and c = 0, c = n
            assert pass_at_k(n, c, k) == pytest.approx(float(brute_pass_at_k(n, c, k)), abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    n, c, k = 1000, 3, 500
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    assert pass_at_k(1000, 0, 1000) == 0.0
    assert pass_at_k(1000, 1, 1000) == 1.0


@pytest.mark.parametrize(
    ("n", "ks"), [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8]), (16, [1, 2, 4, 8, 16])]
)
def test_k_values(n, ks):
    assert k_values(n) == ks


def test_curve_averages_problems():
    samples = [[True, False, False, False], [False, False, False, False]]
    curve = pass_at_k_curve(samples)
    assert list(curve) == [1, 2, 4]
    assert curve[1] == pytest.approx(0.125)  # (1/4 + 0) / 2
    assert curve[2] == pytest.approx(0.25)  # (1 - C(3,2)/C(4,2) = 1/2, and 0) / 2
    assert curve[4] == pytest.approx(0.5)


def test_hit_at_least():
    assert hit_at_least([True, False, True], 2)
    assert not hit_at_least([True, False, False], 2)
    assert hit_rate([[True, True, False], [True, False, False], [True, True, True]], 2) == pytest.approx(2 / 3)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (4, 5, 1), (4, 1, 0), (4, 1, 5), (4, -1, 1)])
def test_bad_arguments(n, c, k):
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(n, c, k)


def test_ragged_samples_and_bad_m():
    with pytest.raises(ValueError, match="same number"):
        pass_at_k_curve([[True], [True, False]])
    with pytest.raises(ValueError, match="1 <= m <= n"):
        hit_at_least([True], 2)
