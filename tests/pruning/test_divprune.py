"""DivPrune against float64 brute force: the greedy sequence and the exhaustive max-min optimum."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from sparsectx.pruning.divprune import max_min_order


def cosine_distances(x: torch.Tensor) -> list[list[float]]:
    """Returns d_ij = 1 - x_i.x_j / (|x_i| |x_j|) in float64, element by element."""
    rows = x.double().tolist()
    norm = [math.sqrt(sum(v * v for v in r)) for r in rows]
    return [
        [1.0 - sum(a * b for a, b in zip(ri, rj, strict=True)) / (norm[i] * norm[j]) for j, rj in enumerate(rows)]
        for i, ri in enumerate(rows)
    ]


def brute_force_greedy(x: torch.Tensor, k: int) -> list[int]:
    """Returns DivPrune's greedy picks, recomputing each min distance from scratch (reference code style)."""
    d = cosine_distances(x)
    n = len(d)
    nearest = [min((d[i][j] for j in range(n) if j != i), default=math.inf) for i in range(n)]
    picks = [max(range(n), key=lambda i: (nearest[i], -i))]
    while len(picks) < k:
        rest = [i for i in range(n) if i not in picks]
        picks.append(max(rest, key=lambda i: (min(d[i][p] for p in picks), -i)))
    return picks


def min_pairwise(d: list[list[float]], subset) -> float:
    """Returns the smallest distance between two members of ``subset`` (+inf for one member)."""
    return min((d[i][j] for i, j in itertools.combinations(subset, 2)), default=math.inf)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [1, 2, 5, 12])
def test_greedy_sequence_matches_brute_force(seed, n):
    x = torch.randn(n, 6, generator=torch.Generator().manual_seed(seed))
    for k in range(1, n + 1):
        assert max_min_order(x, k).tolist() == brute_force_greedy(x, k)


@pytest.mark.parametrize("seed", range(8))
def test_min_distance_against_exhaustive_optimum(seed):
    # The greedy is not exact. With d = |u - v|^2 / 2 on unit vectors, the farthest-point argument on the
    # Euclidean metric gives d_greedy >= d_opt / 4; the greedy can never beat the optimum.
    x = torch.randn(10, 5, generator=torch.Generator().manual_seed(seed))
    d = cosine_distances(x)
    for k in range(2, 7):
        optimum = max(min_pairwise(d, s) for s in itertools.combinations(range(10), k))
        achieved = min_pairwise(d, max_min_order(x, k).tolist())
        assert optimum / 4 - 1e-6 <= achieved <= optimum + 1e-6


def test_well_separated_clusters_reach_the_optimum():
    # Four tight clusters on orthogonal axes: both the optimum and the greedy take one token per cluster.
    g = torch.Generator().manual_seed(0)
    centers = torch.eye(4).repeat_interleave(3, dim=0)
    x = centers + 1e-3 * torch.randn(12, 4, generator=g)
    d = cosine_distances(x)
    picks = max_min_order(x, 4).tolist()
    assert sorted(p // 3 for p in picks) == [0, 1, 2, 3]
    optimum = max(min_pairwise(d, s) for s in itertools.combinations(range(12), 4))
    # Within the cluster noise (radius ~1e-3, distance ~1 - cos): far tighter than the optimum / 4 bound.
    assert min_pairwise(d, picks) == pytest.approx(optimum, abs=5e-3)


def test_duplicates_break_ties_by_lowest_index():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    # Nearest-neighbour distances are all 0: first pick is token 0; token 1 is the farthest, then the
    # duplicates (distance 0, picked masked) come in index order.
    assert max_min_order(x, 4).tolist() == [0, 1, 2, 3]


def test_bf16_and_chunked_rows_agree_with_fp32(monkeypatch):
    x = torch.randn(50, 16, generator=torch.Generator().manual_seed(1))
    full = max_min_order(x, 20)
    monkeypatch.setattr("sparsectx.pruning.divprune._ROW_CHUNK", 7)
    assert torch.equal(max_min_order(x, 20), full)
    assert max_min_order(x.bfloat16(), 20).shape == (20,)
