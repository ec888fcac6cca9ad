"""CDPruner's matrix-free fp32 greedy against the explicit-kernel log-det greedy in float64."""

from __future__ import annotations

import math

import pytest
import torch

from sparsectx.pruning.cdpruner import (
    conditional_dpp_order,
    greedy_dpp_map,
    question_relevance,
    select_cdpruner,
)
from sparsectx.visual import ImageTokens


def reference_quality(x: torch.Tensor, question: torch.Tensor, theta: float | None) -> tuple[list, list]:
    """Returns (relevance, quality) in float64: min-max cos to the mean question vector, then exp(alpha r)."""
    x, question = x.double(), question.double()
    if question.shape[0] == 0:
        rel = [1.0] * x.shape[0]
    else:
        mean = question.sum(dim=0) / question.shape[0]
        cos = [float(row @ mean / (row.norm() * mean.norm())) for row in x]
        lo, hi = min(cos), max(cos)
        rel = [1.0] * len(cos) if hi - lo <= 1e-6 else [(c - lo) / (hi - lo) for c in cos]
    if theta is None:
        return rel, rel
    alpha = theta / (2 * (1 - theta))
    return rel, [math.exp(alpha * r) for r in rel]


def reference_order(x: torch.Tensor, question: torch.Tensor, k: int, theta: float | None) -> list[int]:
    """Returns greedy picks maximising det(L_P) of the explicit L = diag(q) S diag(q), then relevance fill."""
    rel, q = reference_quality(x, question, theta)
    x = x.double()
    unit = x / x.norm(dim=1, keepdim=True)
    q = torch.tensor(q, dtype=torch.float64)
    L = q[:, None] * (unit @ unit.T) * q[None, :]
    picks = [i for i, gain in zip(*greedy_log_det(L, k), strict=True) if gain > 1e-12]  # float64 rank
    rest = sorted((i for i in range(len(q)) if i not in picks), key=lambda i: (-rel[i], i))
    return picks + rest[: k - len(picks)]


def greedy_log_det(kernel: torch.Tensor, k: int) -> tuple[list[int], list[float]]:
    """Returns k greedy picks maximising det(L_P) of the float64 ``kernel`` L and each pick's gain / max L_ii.

    The gain of a pick is det(L_P+j) / det(L_P), its marginal gain d_j^2; no early stop.
    """
    picks: list[int] = []
    gains: list[float] = []
    det_p, scale = 1.0, float(kernel.diagonal().max())
    while len(picks) < k:
        dets = {
            i: float(torch.linalg.det(kernel[picks + [i]][:, picks + [i]]))
            for i in range(kernel.shape[0])
            if i not in picks
        }
        top = max(dets.values())
        best = min(i for i, v in dets.items() if v >= top - 1e-9 * abs(top))  # float64 near-ties -> lowest
        picks.append(best)
        gains.append(dets[best] / det_p / scale)
        det_p = dets[best]
    return picks, gains


@pytest.mark.parametrize("theta", [None, 0.5, 0.8])
@pytest.mark.parametrize("seed", range(4))
def test_full_rank_matches_explicit_kernel(theta, seed):
    g = torch.Generator().manual_seed(seed)
    x, question = torch.randn(9, 12, generator=g), torch.randn(4, 12, generator=g)
    for k in range(1, 10):
        assert conditional_dpp_order(x, question, k, theta).tolist() == reference_order(x, question, k, theta)


@pytest.mark.parametrize("seed", range(4))
def test_rank_exhaustion_stops_early_and_fills_by_relevance(seed):
    g = torch.Generator().manual_seed(seed)
    x, question = torch.randn(12, 4, generator=g), torch.randn(3, 4, generator=g)
    expected = reference_order(x, question, 10, 0.5)
    got = conditional_dpp_order(x, question, 10, 0.5).tolist()
    assert got == expected
    unit = torch.nn.functional.normalize(x, dim=-1)
    quality = torch.exp(0.5 * question_relevance(unit, question))
    assert greedy_dpp_map(unit, quality, 10).numel() == 4  # rank(S) = D = 4, then the fill takes over
    rel, _ = reference_quality(x, question, 0.5)
    fill = got[4:]
    assert [rel[i] for i in fill] == sorted((rel[i] for i in fill), reverse=True)


@pytest.mark.parametrize("sigma", [3e-3, 1e-2])
@pytest.mark.parametrize("seed", range(4))
def test_near_duplicates_match_float64_picks_above_noise(sigma, seed):
    # Four directions with six near-copies each: after one pick per direction the gains fall to ~sigma^2,
    # far below the former 1e-4 stop yet far above fp32 rounding, and float64 orders them stably.
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 16, generator=g).repeat_interleave(6, 0) + sigma * torch.randn(24, 16, generator=g)
    question = torch.randn(3, 16, generator=g)
    _, quality = reference_quality(x, question, 0.5)
    unit = x.double() / x.double().norm(dim=1, keepdim=True)
    q = torch.tensor(quality, dtype=torch.float64)
    want, gains = greedy_log_det(q[:, None] * (unit @ unit.T) * q[None, :], 20)
    eps = torch.finfo(torch.float32).eps
    stable = next(t for t, gain in enumerate(gains) if gain <= 20 * max(t, 1) * eps)  # 10x the fp32 stop
    assert sum(gains[t] < 1e-4 for t in range(stable)) >= 1  # picks the former stop dropped
    assert conditional_dpp_order(x, question, 20, 0.5).tolist()[:stable] == want[:stable]


@pytest.mark.parametrize("spread", [0.0, 3.0, 6.0])
@pytest.mark.parametrize("seed", range(3))
def test_rank_exhausted_correlated_kernel_stops_at_rank(spread, seed):
    # Tokens sharing a mean direction (cos up to ~0.97, as LLM embeddings are) from bf16: after D picks the
    # fp32 gains are rounding residue that grows with the number of picks, and must not be picked.
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(300, 32, generator=g) + spread * torch.randn(1, 32, generator=g)).bfloat16()
    unit = torch.nn.functional.normalize(x.float(), dim=-1)
    quality = torch.exp(0.5 * torch.rand(300, generator=g))
    assert greedy_dpp_map(unit, quality, 60).numel() == 32


@pytest.mark.parametrize("question", [torch.zeros(0, 6), torch.ones(2, 6)])
def test_constant_relevance_is_guarded(question):
    # Empty question, or every token at the same angle to it: relevance is constant, so quality is uniform.
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(2))
    if question.shape[0]:
        x = x - (x @ torch.ones(6) / 6)[:, None] + 0.0  # every row orthogonal to the all-ones question
    got = conditional_dpp_order(x, question, 5, 0.5)
    assert got.tolist() == reference_order(x, torch.zeros(0, 6), 5, None)


def test_identical_tokens_fill_in_index_order():
    x = torch.ones(6, 3)
    assert conditional_dpp_order(x, torch.randn(2, 3), 4, 0.5).tolist() == [0, 1, 2, 3]


def test_bf16_inputs_give_k_finite_picks():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 32, generator=g).bfloat16()
    picks = conditional_dpp_order(x, torch.randn(5, 32, generator=g).bfloat16(), 150, 0.5)
    assert sorted(set(picks.tolist())) == sorted(picks.tolist()) and picks.numel() == 150


@pytest.mark.parametrize("theta", [1.0, -0.1, 2])
def test_theta_outside_range_names_value(theta):
    image = ImageTokens(torch.randn(4, 3), (1, 2, 2), torch.rand(4), torch.randn(4, 2))
    with pytest.raises(ValueError, match=rf"pruner.params.theta={theta!r} is outside \[0, 1\)"):
        select_cdpruner(image, torch.randn(1, 3), 2, torch.Generator(), theta=theta)
