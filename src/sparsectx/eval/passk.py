"""Pass@k (unbiased estimator) and Hit>=m@n over n sampled answers per problem.

Source: Chen et al. (2021), "Evaluating Large Language Models Trained on Code", Eq. 1:
``pass@k = 1 - C(n - c, k) / C(n, k)`` for n samples of which c are correct, computed as the
product ``prod_{i = n-c+1}^{n} (1 - k / i)`` so that no large binomial is ever formed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _check(n: int, c: int, k: int) -> None:
    for name, value in (("n", n), ("c", c), ("k", k)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"pass@k: {name}={value!r} must be an int")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs n >= 1, 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Returns the unbiased pass@k in [0, 1] for one problem: ``1 - C(n-c, k) / C(n, k)``.

    Args:
        n: Samples drawn for the problem.
        c: Correct samples among them.
        k: Budget of attempts, 1 <= k <= n.
    """
    _check(n, c, k)
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i): each factor is in [0, 1), so the product is stable.
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def k_values(n: int) -> list[int]:
    """Returns ``[1, 2, 4, ..., n]``: powers of two below ``n``, then ``n`` itself."""
    if n < 1:
        raise ValueError(f"k_values needs n >= 1, got {n}")
    ks = [1 << p for p in range(n.bit_length()) if 1 << p < n]
    return [*ks, n]


def _counts(samples: Sequence[Sequence[bool]]) -> tuple[int, list[int]]:
    if not samples:
        raise ValueError("pass@k over no problems is undefined")
    n = len(samples[0])
    if any(len(s) != n for s in samples):
        raise ValueError(f"every problem needs the same number of samples; got {sorted({len(s) for s in samples})}")
    return n, [sum(bool(x) for x in s) for s in samples]


def pass_at_k_curve(samples: Sequence[Sequence[bool]]) -> dict[int, float]:
    """Returns ``{k: mean over problems of pass@k}`` in [0, 1] for ``k`` in ``k_values(n)``.

    Args:
        samples: One row per problem, one correctness flag per sample; every row has length n.
    """
    n, counts = _counts(samples)
    return {k: math.fsum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in k_values(n)}


def hit_at_least(correct: Sequence[bool], m: int) -> bool:
    """Returns whether at least ``m`` of the samples are correct (Hit>=m@n for one problem)."""
    if not 1 <= m <= len(correct):
        raise ValueError(f"Hit>=m@n needs 1 <= m <= n; got m={m}, n={len(correct)}")
    return sum(bool(x) for x in correct) >= m


def hit_rate(samples: Sequence[Sequence[bool]], m: int) -> float:
    """Returns the fraction of problems with at least ``m`` of their n samples correct (Hit>=m@n)."""
    _, counts = _counts(samples)
    return sum(hit_at_least(s, m) for s in samples) / len(counts)
