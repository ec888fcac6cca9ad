"""Aggregates over benchmarks: average retain ratio and compression-gap recovery.

Both take plain mappings from benchmark name to score (the scale each benchmark's scorer reports)
and refuse mismatched benchmark sets, non-finite scores and zero denominators, naming the benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


def _check_keys(named: Mapping[str, Mapping[str, float]]) -> list[str]:
    (first_name, first), *rest = named.items()
    if not first:
        raise ValueError(f"{first_name} has no benchmarks: an average over none is undefined")
    for name, scores in rest:
        if set(scores) != set(first):
            only_first = sorted(set(first) - set(scores))
            only_other = sorted(set(scores) - set(first))
            raise ValueError(
                f"benchmark sets differ: missing from {name}: {only_first}; missing from {first_name}: "
                f"{only_other}. Compare the same benchmarks, or drop them from both explicitly"
            )
    for name, scores in named.items():
        for bench, value in scores.items():
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name}[{bench!r}] = {value!r} is not a finite number")
    return list(first)


def retain_ratios(scores: Mapping[str, float], full: Mapping[str, float]) -> dict[str, float]:
    """Returns ``100 * scores[b] / full[b]`` for every benchmark ``b``, in the order of ``scores``.

    Args:
        scores: Benchmark -> score of the compressed (or trained) model.
        full: Benchmark -> score of the full-token model on the same scale.

    Raises:
        ValueError: Key sets differ, a score is not finite, or ``full[b] == 0`` (named).
    """
    benches = _check_keys({"scores": scores, "full": full})
    for bench in benches:
        if full[bench] == 0:
            raise ValueError(f"full-token score of {bench!r} is 0: its retain ratio is undefined")
    return {bench: 100.0 * scores[bench] / full[bench] for bench in benches}


def retain_ratio(scores: Mapping[str, float], full: Mapping[str, float]) -> float:
    """Returns the average retain ratio in percent: ``mean_b(scores[b] / full[b]) * 100``.

    Source: LT-OPD §4.1 ("average retain ratio") and SCOPD Table 1 (Avg₁₃, "mean performance
    normalized to the unpruned Vanilla model on each benchmark"). Raises as ``retain_ratios``.
    """
    ratios = retain_ratios(scores, full)
    return math.fsum(ratios.values()) / len(ratios)


@dataclass(frozen=True)
class Recovery:
    """Compression-gap recovery per benchmark and its unweighted mean, both in percent."""

    per_benchmark: dict[str, float]
    mean: float


def recovery(method: Mapping[str, float], pruned: Mapping[str, float], full: Mapping[str, float]) -> Recovery:
    """Returns ``100 (S_method - S_pruned) / (S_full - S_pruned)`` per benchmark and its mean.

    Source: LT-OPD §4.6 "Compression-gap recovery". 100 means the trained model closes the whole
    gap that pruning opened; values below 0 or above 100 are kept as they are.

    Args:
        method: Benchmark -> score of the trained compressed model.
        pruned: Benchmark -> score of the untrained compressed model (same pruner and budget).
        full: Benchmark -> score of the full-token model.

    Raises:
        ValueError: Key sets differ, a score is not finite, or ``S_full == S_pruned`` (named).
    """
    benches = _check_keys({"method": method, "pruned": pruned, "full": full})
    per: dict[str, float] = {}
    for bench in benches:
        gap = full[bench] - pruned[bench]
        if gap == 0:
            raise ValueError(
                f"{bench!r}: full and pruned scores are both {full[bench]!r}; pruning lost nothing, "
                f"so recovery is undefined. Leave {bench!r} out of the recovery average"
            )
        per[bench] = 100.0 * (method[bench] - pruned[bench]) / gap
    return Recovery(per_benchmark=per, mean=math.fsum(per.values()) / len(per))
