"""The bootstrap's replicates and intervals against brute force: every one of the n^n resamples of a tiny
benchmark enumerated (item means, POPE's F1 and macro accuracy, MME's pairs), a large-sample check of the random
draws against that exact distribution, stratified draws, seed pooling, and the refusals (too few items, too few
resamples)."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest

from sparsectx.eval.scorers import SCORERS, ScoredItem
from sparsectx.eval.scorers.spec import ITEM_MEAN
from sparsectx.report.bootstrap import (
    BootstrapConfig,
    check_enough,
    counts_from_indices,
    distinct_resamples,
    draw_counts,
    interval,
    layout,
    pool_seeds,
    replicates,
    seed_draws,
    stream,
)

RIGHT = [True, True, False, True, False]


def exact_items(right: list[bool]) -> list[ScoredItem]:
    """Returns exact-match items, item i right when ``right[i]``."""
    return [ScoredItem(id=str(i), prediction="cat" if ok else "dog", reference="cat") for i, ok in enumerate(right)]


def all_resamples(n: int) -> np.ndarray:
    """Returns every one of the n^n index tuples, one per row."""
    return np.array(list(itertools.product(range(n), repeat=n)))


def test_jointly_scored_benchmarks_are_not_resampled_item_by_item() -> None:
    """The scorers whose headline is no item mean declare units or strata of their own in their spec."""
    joint = {"pope", "mme", "mmbench_circular", "hallusionbench", "hrbench", "cvbench"}
    assert {name for name in SCORERS if SCORERS.get(name).resampling is not ITEM_MEAN} == joint
    assert not any(SCORERS.get(name).resampling.additive for name in joint)


def test_item_mean_replicates_equal_brute_force_over_all_resamples() -> None:
    items = exact_items(RIGHT)
    lay = layout("exact_match", items)
    tuples = all_resamples(len(items))
    reps = replicates(lay, items, counts_from_indices(lay, [tuples]))
    reference = [100.0 * sum(RIGHT[i] for i in t) / len(t) for t in tuples]  # the mean of each resample, by hand
    assert reps == pytest.approx(reference)
    assert interval(reps, 0.95) == pytest.approx(tuple(np.quantile(reference, [0.025, 0.975])))


def _f1(gold: list[str], pred: list[str]) -> float:
    """POPE's F1 in percent, written out independently of the scorer."""
    tp = sum(g == p == "yes" for g, p in zip(gold, pred, strict=True))
    fp = sum(g == "no" and p == "yes" for g, p in zip(gold, pred, strict=True))
    fn = sum(g == "yes" and p == "no" for g, p in zip(gold, pred, strict=True))
    return 0.0 if tp == 0 else 100.0 * 2 * tp / (2 * tp + fp + fn)


def test_pope_f1_is_recomputed_on_every_resample_not_averaged() -> None:
    gold, pred = ["yes", "yes", "no", "no", "yes"], ["yes", "no", "yes", "no", "yes"]
    items = [
        ScoredItem(id=f"q{i}", prediction=p, reference=g, subset="random")
        for i, (g, p) in enumerate(zip(gold, pred, strict=True))
    ]
    lay = layout("pope", items, "f1")
    tuples = all_resamples(len(items))
    reps = replicates(lay, items, counts_from_indices(lay, [tuples]))
    reference = [_f1([gold[i] for i in t], [pred[i] for i in t]) for t in tuples]
    assert reps == pytest.approx(reference)
    per_item_mean = [np.mean([_f1([gold[i]], [pred[i]]) for i in t]) for t in tuples]
    assert not np.allclose(reps, per_item_mean)  # an F1 is not a mean of item F1s


def _macro_accuracy(rows: list[tuple[str, str, str]]) -> float:
    """LT-OPD's POPE macro accuracy in percent, written out independently of the scorer: per subset, the percent
    of its rows (a comma-joined category counted in each subset it names) answered right; then their mean."""
    accs = []
    for subset in ("adversarial", "popular", "random"):
        mine = [gold == pred for category, gold, pred in rows if subset in category.split(",")]
        accs.append(100.0 * sum(mine) / len(mine))
    return sum(accs) / 3


def test_pope_macro_accuracy_is_recomputed_on_every_resample_within_category_strata() -> None:
    """Every resample of four strata (one per category string, two questions each) enumerated: 4^4 = 256."""
    rows = [  # (category, gold, prediction)
        ("adversarial,popular,random", "yes", "yes"),
        ("adversarial,popular,random", "no", "yes"),
        ("adversarial", "yes", "no"),
        ("adversarial", "no", "no"),
        ("popular,random", "no", "no"),
        ("popular,random", "yes", "yes"),
        ("random", "no", "yes"),
        ("random", "yes", "no"),
    ]
    items = [ScoredItem(id=f"q{i}", prediction=p, reference=g, subset=c) for i, (c, g, p) in enumerate(rows)]
    lay = layout("pope", items, "macro_accuracy")
    assert [len(s) for s in lay.strata] == [2, 2, 2, 2]  # the category strings, in file order
    picks = list(itertools.product(all_resamples(2), repeat=4))  # one index pair per stratum
    draws = [np.array([p[s] for p in picks]) for s in range(4)]
    reps = replicates(lay, items, counts_from_indices(lay, draws))
    reference = [_macro_accuracy([rows[2 * s + j] for s, pair in enumerate(p) for j in pair]) for p in picks]
    assert reps == pytest.approx(reference)
    exploded = [
        [(g == q) for c, g, q in (rows[2 * s + j] for s, pair in enumerate(p) for j in pair) for _ in c.split(",")]
        for p in picks
    ]
    assert not np.allclose(reps, [100.0 * np.mean(e) for e in exploded])  # not the pooled (Overall) accuracy


def test_mme_pairs_are_resampled_together() -> None:
    # three images of one category, each asked two questions; pair i has right[i] answers right
    right = [(True, True), (True, False), (False, False)]
    items = [
        ScoredItem(
            id=f"{i}{j}", prediction="yes" if ok else "no", reference="yes", category="existence", group=f"img{i}"
        )
        for i, pair in enumerate(right)
        for j, ok in enumerate(pair)
    ]
    lay = layout("mme", items)
    assert len(lay.units) == 3 and [len(u) for u in lay.units] == [2, 2, 2]
    tuples = all_resamples(3)
    reps = replicates(lay, items, counts_from_indices(lay, [tuples]))
    acc = [100.0 * sum(sum(right[i]) for i in t) / 6 for t in tuples]
    acc_plus = [100.0 * sum(all(right[i]) for i in t) / 3 for t in tuples]
    assert reps == pytest.approx([a + b for a, b in zip(acc, acc_plus, strict=True)])


def test_hallusionbench_sets_are_units_and_copies_stay_apart() -> None:
    # two sets; set 0 has one figure asked two questions (both right), set 1 one question on two figures
    ids = ["VS_chart_0_0_0_0", "VS_chart_0_0_0_1", "VS_chart_0_1_0_0", "VS_chart_0_1_1_0"]
    right = [True, True, True, False]
    items = [
        ScoredItem(id=i, prediction="yes" if ok else "no", reference="yes", subset="chart")
        for i, ok in zip(ids, right, strict=True)
    ]
    lay = layout("hallusionbench", items)
    assert [len(u) for u in lay.units] == [2, 2]
    reps = replicates(lay, items, counts_from_indices(lay, [np.array([[0, 0], [1, 1]])]))
    # set 0 twice: aAcc 100, fAcc 100 (2 figure groups), qAcc 100; set 1 twice: aAcc 50, fAcc 50, qAcc 0
    assert reps == pytest.approx([100.0, (50.0 + 50.0 + 0.0) / 3])


def test_large_sample_interval_matches_the_exact_bootstrap_distribution() -> None:
    items = exact_items(RIGHT)
    lay = layout("exact_match", items)
    exact = replicates(lay, items, counts_from_indices(lay, [all_resamples(5)]))
    drawn = replicates(lay, items, draw_counts(lay, 40_000, stream(0, "test")))
    for value in np.unique(exact):  # the frequency of every value is the exact probability
        assert np.mean(drawn == value) == pytest.approx(np.mean(exact == value), abs=0.01)
    step = 100.0 / len(items)  # the distribution is discrete: quantiles agree to within one step
    assert np.allclose(interval(drawn, 0.95), interval(exact, 0.95), atol=step)
    assert drawn.std() == pytest.approx(exact.std(), rel=0.03)


def test_stratified_draws_keep_every_stratum_size() -> None:
    items = [
        ScoredItem(id=str(i), prediction="yes", reference="yes", subset="random" if i < 3 else "popular")
        for i in range(7)
    ]
    lay = layout("pope", items, "macro_accuracy")
    counts = draw_counts(lay, 500, stream(3, "strata"))
    assert (counts[:, :3].sum(axis=1) == 3).all() and (counts[:, 3:].sum(axis=1) == 4).all()


def test_same_seed_same_draws_other_seed_other_draws() -> None:
    lay = layout("exact_match", exact_items(RIGHT * 4))
    first, again = (draw_counts(lay, 200, stream(0, "items", "b")) for _ in range(2))
    assert (first == again).all()
    assert not (first == draw_counts(lay, 200, stream(1, "items", "b"))).all()
    assert not (first == draw_counts(lay, 200, stream(0, "items", "other bench"))).all()


def test_pooled_seeds_average_the_drawn_seeds_replicates() -> None:
    per_seed = np.arange(12, dtype=float).reshape(3, 4)  # 3 seeds x 4 resamples
    draws = seed_draws(3, 4, stream(0, "seeds"))
    expected = [statistics.fmean(per_seed[s, r] for s in draws[r]) for r in range(4)]
    assert pool_seeds(per_seed, draws) == pytest.approx(expected)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
def test_distinct_resamples_counts_multisets(n: int) -> None:
    lay = layout("exact_match", exact_items([True] * n))
    multisets = sum(1 for _ in itertools.combinations_with_replacement(range(n), n))
    assert distinct_resamples(lay, 10**9) == multisets == math.comb(2 * n - 1, n)


def test_too_few_items_for_the_resamples_names_the_key() -> None:
    lay = layout("exact_match", exact_items(RIGHT))  # 5 items: C(9, 5) = 126 distinct resamples
    check_enough(lay, 126, "tiny_bench")
    with pytest.raises(ValueError, match=r"bootstrap.resamples=127: benchmark 'tiny_bench' has too few items"):
        check_enough(lay, 127, "tiny_bench")
    why = check_enough(lay, 127, "tiny_bench", too_few="no_interval")
    assert why is not None and why.startswith("bootstrap.resamples=127") and "126 distinct" in why
    assert check_enough(lay, 126, "tiny_bench", too_few="no_interval") is None


def test_too_few_resamples_for_the_level_names_the_key() -> None:
    BootstrapConfig(resamples=40, seed=0, level=0.95)
    with pytest.raises(ValueError, match=r"bootstrap.resamples >= 40"):
        BootstrapConfig(resamples=39, seed=0, level=0.95)
    with pytest.raises(ValueError, match="bootstrap.level"):
        BootstrapConfig(resamples=1000, seed=0, level=1.0)
