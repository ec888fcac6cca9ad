"""Statistics of per-token traces: how far teacher–student KL and visual sensitivity agree along responses.

Pure functions of plain lists (the lines of ``token_traces.jsonl``, ``sparsectx.training.token_trace``):

* ``spearman``: the Spearman rank correlation of two samples, the Pearson correlation of their ranks with ties
  given their average rank (no scipy: the project does not depend on it);
* ``top_positions`` and ``jaccard``: the ⌈ρ·T_i⌉ positions of one response with the largest values (SCOPD
  Eq. 8's count) and the overlap |A ∩ B| / |A ∪ B| of two such sets;
* ``phase_stats``: over the traced rollouts of one step, the pooled Spearman correlation of KL and S over every
  token and the mean over rollouts of the Jaccard overlap of the top-ρ positions by KL and by S.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def average_ranks(values: Sequence[float]) -> list[float]:
    """Returns the 1-based rank of each value in ascending order, tied values sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Returns the Pearson correlation of ``x`` and ``y`` (NaN when either is constant or has < 2 values)."""
    if len(x) != len(y):
        raise ValueError(f"pearson: {len(x)} and {len(y)} values; the samples must pair up")
    n = len(x)
    if n < 2:
        return math.nan
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0.0 or syy == 0.0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Returns the Spearman rank correlation of paired samples: Pearson of their average ranks (NaN when
    either sample is constant or has fewer than two values)."""
    return pearson(average_ranks(x), average_ranks(y))


def top_count(length: int, fraction: float) -> int:
    """Returns k_i = ⌈ρ·T_i⌉ (SCOPD Eq. 8; ``training.positions.positions_per_sequence``'s count)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction!r} must lie in (0, 1]: ρ, the share of positions kept")
    return max(0, math.ceil(length * fraction - 1e-9))


def top_positions(values: Sequence[float], fraction: float) -> frozenset[int]:
    """Returns the ⌈ρ·T⌉ positions with the largest values (ties: the earlier position first)."""
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    return frozenset(order[: top_count(len(values), fraction)])


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    """Returns |a ∩ b| / |a ∪ b| (1 for two empty sets)."""
    union = a | b
    return 1.0 if not union else len(a & b) / len(union)


@dataclass(frozen=True)
class PhaseStats:
    """What the traced rollouts of one step say about KL against sensitivity."""

    step: int
    rollouts: int
    tokens: int
    fraction: float
    """ρ: the share of each response's positions compared (the method's ``positions.fraction``)."""
    spearman: float
    """Spearman correlation of KL and S over every traced token of the step (pooled)."""
    jaccard: float
    """Mean over rollouts of the Jaccard overlap of the top-ρ positions by KL and by S."""
    mean_kl: float
    mean_sensitivity: float


def phase_stats(lines: Sequence[Mapping[str, Any]]) -> PhaseStats:
    """Returns the statistics of one step's traced rollouts (lines with ``kl`` and ``sensitivity`` lists); ρ
    is the lines' ``fraction`` (1 when the method distils every position)."""
    if not lines:
        raise ValueError("phase_stats: no traced rollout")
    fraction = 1.0 if lines[0]["fraction"] is None else float(lines[0]["fraction"])
    kl = [v for line in lines for v in line["kl"]]
    sens = [v for line in lines for v in line["sensitivity"]]
    overlaps = [
        jaccard(top_positions(line["kl"], fraction), top_positions(line["sensitivity"], fraction))
        for line in lines
        if line["kl"]
    ]
    return PhaseStats(
        step=int(lines[0]["step"]),
        rollouts=len(lines),
        tokens=len(kl),
        fraction=fraction,
        spearman=spearman(kl, sens),
        jaccard=sum(overlaps) / len(overlaps) if overlaps else math.nan,
        mean_kl=sum(kl) / len(kl) if kl else math.nan,
        mean_sensitivity=sum(sens) / len(sens) if sens else math.nan,
    )
