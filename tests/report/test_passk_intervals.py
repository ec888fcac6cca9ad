"""Pass@K intervals against brute force: every one of the 5^5 resamples of a five-item cohort enumerated with
pass@k written from the binomial definition, a large-sample check of the seeded draws against that exact
distribution, pairing of the gaps, seeded reproducibility, and the refusals (stale or incomplete draws, too
few items)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from sparsectx.eval.passk_mode import passk_path, samples_path
from sparsectx.io import read_jsonl
from sparsectx.report.analyses import SideTable, passk_footnote
from sparsectx.report.bootstrap import BootstrapConfig, Layout, counts_from_indices
from sparsectx.report.passk_spread import item_values, passk_spread, read_draws, resampled_means, too_small
from sparsectx.report.tables import Spread

from .passk_fakes import write_passk_leaf

N = 4
GREEDY = [True, False, False, True, False]
CORRECT = [3, 2, 0, 4, 1]  # correct samples of N per item
CONTROL = [0, 1, 0, 0, 2]


def by_hand(correct: int, k: int) -> float:
    """pass@k of one item in percent, from the definition 1 - C(n - c, k) / C(n, k) (math.comb, no product)."""
    return 100.0 * (1.0 - math.comb(N - correct, k) / math.comb(N, k))


def all_tuples(items: int) -> np.ndarray:
    """Every one of the items^items ordered resamples, one per row."""
    return np.array(list(itertools.product(range(items), repeat=items)))


@pytest.fixture
def leaf(tmp_path: Path) -> Path:
    write_passk_leaf(tmp_path, "syn_count", 0.1, (GREEDY, CORRECT), CONTROL, N)
    return tmp_path


def spread(leaf: Path, resamples: int = 1000, seed: int = 0):
    payload = json.loads(passk_path(leaf, "syn_count").read_text())
    boot = BootstrapConfig(resamples=resamples, seed=seed, level=0.95)
    return passk_spread(payload, samples_path(leaf, "syn_count"), boot, "syn_count")


def test_replicates_equal_brute_force_over_every_resample(leaf: Path) -> None:
    payload = json.loads(passk_path(leaf, "syn_count").read_text())
    draws = read_draws(payload, samples_path(leaf, "syn_count"))
    values = item_values(draws["sparse"], N)
    control = item_values(draws["no_image"], N)
    lay = Layout("passk", tuple(map(str, range(5))), tuple((i,) for i in range(5)), (tuple(range(5)),))
    tuples = all_tuples(5)
    counts = counts_from_indices(lay, [tuples])
    for k in (1, 2, 4):
        expected = [np.mean([by_hand(CORRECT[i], k) for i in t]) for t in tuples]
        assert resampled_means(values[f"pass@{k}"], counts) == pytest.approx(expected)
    gap = resampled_means(values["pass@4"] - values["greedy"], counts)
    by_tuple = [np.mean([by_hand(CORRECT[i], 4) - 100.0 * GREEDY[i] for i in t]) for t in tuples]
    assert gap == pytest.approx(by_tuple)  # each resample's gap is on its own items: paired
    over = resampled_means(values["pass@4"] - values["greedy"] - control["pass@4"], counts)
    floors = [np.mean([by_hand(CONTROL[i], 4) for i in t]) for t in tuples]
    assert over == pytest.approx([g - f for g, f in zip(by_tuple, floors, strict=True)])


def exact_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Returns the smallest value whose cumulative weight reaches ``q`` (weights sum to 1)."""
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, q)])


def test_seeded_intervals_match_the_exact_bootstrap_distribution(tmp_path: Path) -> None:
    correct = [3, 2, 0, 4, 1, 1, 3, 0, 2]  # nine items: 24,310 distinct resamples, enumerated as multisets
    write_passk_leaf(tmp_path, "syn_count", 0.1, ([c > 1 for c in correct], correct), [0] * 9, N)
    items = len(correct)
    means, weights = [], []
    for multiset in itertools.combinations_with_replacement(range(items), items):
        _, counts = np.unique(multiset, return_counts=True)
        ways = math.factorial(items) // math.prod(math.factorial(int(c)) for c in counts)
        means.append(np.mean([by_hand(correct[i], 1) for i in multiset]))
        weights.append(ways / items**items)
    means_a, weights_a = np.array(means), np.array(weights)
    assert weights_a.sum() == pytest.approx(1.0)
    lo, hi = spread(tmp_path, resamples=20_000).columns["pass@1 (%)"]
    # The sampled 2.5% / 97.5% quantiles fall between the exact 1.5% and 3.5% (96.5% and 98.5%) quantiles.
    assert exact_quantile(means_a, weights_a, 0.015) <= lo <= exact_quantile(means_a, weights_a, 0.035)
    assert exact_quantile(means_a, weights_a, 0.965) <= hi <= exact_quantile(means_a, weights_a, 0.985)
    point = np.mean([by_hand(c, 1) for c in correct])
    assert lo < point < hi


def test_gap_is_paired_and_narrower_than_independent_resampling(tmp_path: Path) -> None:
    # Greedy right exactly where some sample is right, except on two items: pass@n - greedy is 0 on most items.
    greedy = [True] * 10 + [False] * 10
    correct = [4] * 10 + [1, 1] + [0] * 8
    write_passk_leaf(tmp_path, "syn_count", 0.1, (greedy, correct), [0] * 20, N)
    lo, hi = spread(tmp_path, resamples=4000).columns["gap (pp)"]
    assert lo >= 0.0 and hi <= 25.0  # the paired gap spans only the two items' share
    payload = json.loads(passk_path(tmp_path, "syn_count").read_text())
    values = item_values(read_draws(payload, samples_path(tmp_path, "syn_count"))["sparse"], N)
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, 20, size=(4000, 20)) for _ in range(2))
    independent = values["pass@4"][a].mean(axis=1) - values["greedy"][b].mean(axis=1)
    ind_lo, ind_hi = np.quantile(independent, [0.025, 0.975])
    # Standard errors: paired gap 100 * sqrt(0.1 * 0.9 / 20) = 6.7; unpaired sqrt(2) * 100 * sqrt(0.6 * 0.4 / 20)
    # = 15.5 (pass@4 and greedy are each 60% / 50% hits, their spreads add up): about 2.3 times wider.
    assert ind_hi - ind_lo > 2 * (hi - lo)


def test_same_seed_same_intervals_other_seed_others(leaf: Path) -> None:
    first, again, other = (spread(leaf, resamples=100, seed=s) for s in (0, 0, 1))
    assert first == again
    assert first.columns != other.columns
    assert set(first.curves) == {"sparse", "no_image"} and set(first.curves["sparse"]) == {1, 2, 4}


def test_stale_draws_are_refused_naming_the_file(leaf: Path) -> None:
    path = passk_path(leaf, "syn_count")
    payload = json.loads(path.read_text())
    payload["sparse"]["pass_at_k"]["1"] += 5.0
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=r"syn_count\.passk\.samples\.jsonl.*pass@1.*stale"):
        spread(leaf)


def test_draws_of_another_config_are_refused(leaf: Path) -> None:
    path = passk_path(leaf, "syn_count")
    payload = json.loads(path.read_text())
    payload["provenance"]["config_hash"] = "f" * 16
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=r"draws of config .* but the Pass@K JSON beside it is config ffff"):
        spread(leaf)


def test_incomplete_draws_are_refused(leaf: Path) -> None:
    draws = samples_path(leaf, "syn_count")
    rows = [r for r in read_jsonl(draws) if r["key"] != "3/no_image"]
    draws.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"no no_image draws for cohort items \['3'\]"):
        spread(leaf)


def test_too_few_items_for_the_resamples_names_the_key(tmp_path: Path) -> None:
    write_passk_leaf(tmp_path, "syn_count", 0.1, ([True, False], [2, 1]), [0, 0], N)  # 3 distinct resamples
    with pytest.raises(ValueError, match=r"bootstrap.resamples=1000: benchmark 'syn_count \(Pass@K cohort\)'"):
        spread(tmp_path)
    boot = BootstrapConfig(resamples=1000, seed=0, level=0.95)
    assert too_small(2, boot) == (
        "a cohort of 2 items admits only 3 distinct resamples, fewer than bootstrap.resamples=1000"
    )
    assert too_small(8, boot) is None  # C(15, 8) = 6,435


def test_side_table_shows_bounds_in_markdown_and_columns_in_csv() -> None:
    table = SideTable(
        ("model", "gap (pp)", "note"),
        (("tiny", "5.00", ""), ("big", "-", "no record")),
        ({"gap (pp)": Spread(1.0, 9.0, None, "up")}, {}),
        "a note",
    )
    md = table.markdown("t")
    assert "| tiny | 5.00 [1.00, 9.00] ↑ |  |" in md and md.rstrip().endswith("a note")
    assert table.csv().splitlines() == [
        "model,gap (pp),note,gap (pp) lo,gap (pp) hi",
        "tiny,5.00,,1.00,9.00",
        "big,-,no record,,",
    ]


def test_footnote_lists_rows_without_draws() -> None:
    boot = BootstrapConfig(resamples=1000, seed=3, level=0.9)
    text = passk_footnote(boot, ["tiny / syn_ocr / Vanilla / visionzip / 0.1 (why)"])
    assert "90% percentile interval" in text and "bootstrap.seed=3" in text
    assert text.endswith("No interval: tiny / syn_ocr / Vanilla / visionzip / 0.1 (why)")
