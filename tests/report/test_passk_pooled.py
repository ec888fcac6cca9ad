"""The pooled Pass@K row (SCOPD's pool of several sources): its values against a hand computation over the
pooled items, its intervals against the exact stratified bootstrap distribution (every ordered resample of two
small sources enumerated), and the groups that are and are not pooled."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sparsectx.eval.passk_mode import samples_path
from sparsectx.paths import leaf_dir
from sparsectx.report.bootstrap import BootstrapConfig, draw_counts, stream
from sparsectx.report.passk_pooled import pooled_cells, pooled_interval, pooled_payload
from sparsectx.report.passk_spread import pooled_layout, pooled_spread
from sparsectx.workflow import Cell

from .passk_fakes import write_passk_leaf

N = 4
SOURCES = {  # bench -> (greedy correctness, correct samples of N, no-image correct samples)
    "mmstar": ([True, False, True], [4, 1, 3], [0, 1, 0]),
    "cvbench": ([False, True, False, False], [0, 4, 2, 1], [0, 0, 2, 0]),
}


def by_hand(correct: int, k: int) -> float:
    """pass@k of one item in percent, from the definition 1 - C(n - c, k) / C(n, k)."""
    return 100.0 * (1.0 - math.comb(N - correct, k) / math.comb(N, k))


def write_sources(root: Path, protocol: str = "paper_numeric") -> dict[str, tuple[dict, Path]]:
    """Writes both sources' Pass@K leaves (base / visionzip / 0.1) and returns bench -> (payload, draws)."""
    leaf = leaf_dir(root, "tiny", "tiny", "base", "visionzip", 0.1)
    out = {}
    for bench, (greedy, correct, control) in SOURCES.items():
        payload = write_passk_leaf(leaf, bench, 0.1, (greedy, correct), control, N, protocol)
        out[bench] = (payload, samples_path(leaf, bench))
    return out


def cells(root: Path, protocol: str = "paper_numeric") -> list[tuple[Cell, dict | None]]:
    payloads = write_sources(root, protocol)
    return [(Cell("tiny", "base", "visionzip", 0.1, bench), payloads[bench][0]) for bench in SOURCES]


def test_pooled_values_are_the_means_over_all_pooled_items(tmp_path: Path) -> None:
    (group,) = pooled_cells(tmp_path, "tiny", cells(tmp_path))
    assert group.cell.bench == "pooled: mmstar+cvbench" and group.left_out == ()
    greedy = [g for g, _, _ in SOURCES.values() for g in g]
    correct = [c for _, c, _ in SOURCES.values() for c in c]
    control = [c for _, _, c in SOURCES.values() for c in c]
    payload = group.payload
    assert payload["cohort"]["size"] == 7 and payload["cohort"]["protocol"] == "paper_numeric"
    assert payload["sparse"]["greedy_accuracy"] == pytest.approx(100.0 * sum(greedy) / 7)
    for k in (1, 2, 4):
        assert payload["sparse"]["pass_at_k"][str(k)] == pytest.approx(np.mean([by_hand(c, k) for c in correct]))
    gap = np.mean([by_hand(c, N) for c in correct]) - 100.0 * sum(greedy) / 7
    assert payload["gap"] == pytest.approx(gap)
    floor = np.mean([by_hand(c, N) for c in control])
    assert payload["gap_over_control"] == pytest.approx(gap - floor)


def test_pooled_resamples_keep_each_source_count(tmp_path: Path) -> None:
    lay = pooled_layout({"mmstar": 3, "cvbench": 4})
    counts = draw_counts(lay, 500, stream(0, "passk", "pooled"))
    assert (counts[:, :3].sum(axis=1) == 3).all() and (counts[:, 3:].sum(axis=1) == 4).all()


def exact_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    return float(values[order][np.searchsorted(np.cumsum(weights[order]), q)])


def sum_distribution(values: list[int], draws: int) -> dict[int, float]:
    """Returns the exact distribution of the sum of ``draws`` independent uniform picks from ``values``."""
    dist = {0: 1.0}
    for _ in range(draws):
        step: dict[int, float] = {}
        for total, p in dist.items():
            for v in values:
                step[total + v] = step.get(total + v, 0.0) + p / len(values)
        dist = step
    return dist


def test_pooled_interval_matches_the_exact_stratified_bootstrap(tmp_path: Path) -> None:
    big = {"mmstar": ([True] * 5, [4, 1, 3, 0, 2], [0] * 5), "cvbench": ([False] * 6, [0, 4, 2, 1, 1, 3], [0] * 6)}
    leaf = leaf_dir(tmp_path, "tiny", "tiny", "base", "visionzip", 0.1)
    sources = {}
    for bench, (greedy, correct, control) in big.items():
        payload = write_passk_leaf(leaf, bench, 0.1, (greedy, correct), control, N, "paper_numeric")
        sources[bench] = (payload, samples_path(leaf, bench))
    # pass@1 of an item with c of 4 right is 25·c: a resample's pooled mean is (Σ 25·c over 5 + 6 picks) / 11,
    # each source's picks uniform over its own items (one stratum per source)
    a = sum_distribution([25 * c for c in big["mmstar"][1]], 5)
    b = sum_distribution([25 * c for c in big["cvbench"][1]], 6)
    joint: dict[float, float] = {}
    for sa, pa in a.items():
        for sb, pb in b.items():
            joint[(sa + sb) / 11] = joint.get((sa + sb) / 11, 0.0) + pa * pb
    values, weights = np.array(list(joint)), np.array(list(joint.values()))
    assert weights.sum() == pytest.approx(1.0)
    boot = BootstrapConfig(resamples=20_000, seed=0, level=0.95)
    lo, hi = pooled_spread(sources, boot, "pooled").columns["pass@1 (%)"]
    assert exact_quantile(values, weights, 0.015) <= lo <= exact_quantile(values, weights, 0.035)
    assert exact_quantile(values, weights, 0.965) <= hi <= exact_quantile(values, weights, 0.985)


def test_a_source_without_draws_leaves_the_row_without_interval(tmp_path: Path) -> None:
    (group,) = pooled_cells(tmp_path, "tiny", cells(tmp_path))
    group.sources["cvbench"][1].unlink()
    why = pooled_interval(group, BootstrapConfig(resamples=100, seed=0, level=0.95))
    assert why == "no per-item draws: cvbench.passk.samples.jsonl missing"


def test_only_paper_numeric_groups_of_two_or_more_are_pooled(tmp_path: Path) -> None:
    assert pooled_cells(tmp_path / "a", "tiny", cells(tmp_path / "a", "authors_code")) == []
    one = cells(tmp_path / "b")
    assert pooled_cells(tmp_path / "b", "tiny", [one[0], (one[1][0], None)]) == []
    three = [*cells(tmp_path / "c"), (Cell("tiny", "base", "visionzip", 0.1, "blink"), None)]
    (group,) = pooled_cells(tmp_path / "c", "tiny", three)
    assert group.left_out == ("blink",) and group.payload["cohort"]["size"] == 7


def test_sources_drawn_with_different_n_are_refused(tmp_path: Path) -> None:
    (a, _), (b, _) = write_sources(tmp_path).values()
    with pytest.raises(ValueError, match="differ"):
        pooled_payload([a, {**b, "n": 8}])
