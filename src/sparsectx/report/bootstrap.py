"""The paired bootstrap over benchmark items: resample counts, each cell's replicate scores, intervals.

One benchmark's resamples are drawn once (``draw_counts``) and applied to every row scored on it, so any two
rows' replicates are paired: replicate ``r`` of both is their score on the same resampled items, and a
difference's interval is the spread of ``r``-wise differences. Units are drawn with replacement within their
stratum (the scorer's ``ScorerSpec.resampling``), so a resample keeps the benchmark's composition.

A replicate is the scorer's own headline on the resampled items (``sparsectx.eval.scorers``; for POPE the one
its config names, ``Layout.headline``), so a benchmark's metric (POPE's macro accuracy or F1, MME's acc + acc+,
HallusionBench's fAcc/qAcc) is recomputed, not averaged; for scorers whose headline is an item mean
(``Resampling.additive``) the same number comes from one scorer call per unit, checked against the scorer on the
full item set and on the first resample.

Intervals are percentile intervals: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the
replicates (numpy's default, linear, interpolation).

"Too few items" (``check_enough``): the number of distinct resamples a benchmark admits (multisets of
``n_s`` units drawn from the ``n_s`` of each stratum ``s``: the product of ``C(2 n_s - 1, n_s)``) is below
``bootstrap.resamples``: the interval would be built from repeats of fewer distinct values than asked for.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sparsectx.eval.scorers import SCORERS, ScoredItem

SCORE_TOLERANCE = 1e-6
"""Relative tolerance of the additive path's checks against the scorer (floating-point summation order)."""


TOO_FEW = ("error", "no_interval")
"""What ``bootstrap.too_few`` may say (``BootstrapConfig.too_few``)."""


@dataclass
class BootstrapConfig:
    """``bootstrap:`` of ``conf/make_tables.yaml``: how many resamples, their seed and the coverage."""

    resamples: int
    """Resamples per benchmark; each tail of the interval must hold at least one, so
    ``resamples * (1 - level) / 2 >= 1`` (at least 40 at level 0.95)."""
    seed: int
    """Root of every resample: benchmark ``b``'s item counts and method ``m``'s seed draws each come from a
    stream derived from (seed, b) and (seed, m), so a table's intervals do not depend on which cells exist."""
    level: float
    """Coverage of the percentile intervals, in (0, 1)."""
    too_few: str = "error"
    """A benchmark with fewer distinct resamples than ``resamples``: ``error`` stops the tables naming it;
    ``no_interval`` gives its cells no interval, each saying why (a pilot on a few items, the rehearsal)."""

    def __post_init__(self) -> None:
        if self.too_few not in TOO_FEW:
            raise ValueError(f"bootstrap.too_few={self.too_few!r} must be one of {list(TOO_FEW)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"bootstrap.seed={self.seed!r} must be an int")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"bootstrap.level={self.level} must be in (0, 1), e.g. 0.95")
        if self.resamples * (1.0 - self.level) / 2.0 < 1.0:
            least = math.ceil(2.0 / (1.0 - self.level))
            raise ValueError(
                f"bootstrap.resamples={self.resamples}: a {self.level:g} interval needs at least one resample "
                f"in each tail, so bootstrap.resamples >= {least} (1000 or more for stable ends)"
            )


def stream(seed: int, *labels: str) -> np.random.Generator:
    """Returns the generator of ``labels`` under ``seed``: the same labels and seed always draw the same."""
    words = [int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "little") for label in labels]
    return np.random.default_rng(np.random.SeedSequence([seed, *words]))


@dataclass(frozen=True)
class Layout:
    """One benchmark's resampling structure: its item ids grouped into units, the units into strata."""

    scorer: str
    ids: tuple[str, ...]
    """Item ids in the order ``units`` lists them (what every row on this benchmark must have scored)."""
    units: tuple[tuple[int, ...], ...]
    """Positions in ``ids`` of each unit's items."""
    strata: tuple[tuple[int, ...], ...]
    """Indices in ``units`` of each stratum's units."""
    headline: str | None = None
    """The scorer's metric each replicate is, for a scorer with several (``bench.<name>.headline``)."""


def layout(scorer: str, items: Sequence[ScoredItem], headline: str | None = None) -> Layout:
    """Returns the units and strata of ``items`` under ``scorer``'s rule (``ScorerSpec.resampling``); replicates
    are ``scorer``'s ``headline`` (needed by a scorer with several, ``ScorerSpec.headlines``)."""
    rule = SCORERS.get(scorer).resampling
    units: dict[str, list[int]] = {}
    strata: dict[str, list[str]] = {}
    for position, item in enumerate(items):
        key = rule.unit(item)
        if key not in units:
            units[key] = []
            strata.setdefault(rule.stratum(item), []).append(key)
        units[key].append(position)
    order = {key: i for i, key in enumerate(units)}
    return Layout(
        scorer,
        tuple(item.id for item in items),
        tuple(tuple(p) for p in units.values()),
        tuple(tuple(order[k] for k in keys) for keys in strata.values()),
        headline,
    )


def distinct_resamples(lay: Layout, cap: int) -> int:
    """Returns how many distinct resamples ``lay`` admits (the product over strata of ``C(2n - 1, n)``),
    or ``cap`` when it is at least ``cap`` (the product grows too fast to compute for large benchmarks)."""
    total = 1
    for stratum in lay.strata:
        n = len(stratum)
        total *= math.comb(2 * n - 1, n)
        if total >= cap:
            return cap
    return total


def check_enough(lay: Layout, resamples: int, bench: str, too_few: str = "error") -> str | None:
    """Returns None when ``bench`` admits at least ``resamples`` distinct resamples; else, with ``too_few`` set to
    ``no_interval``, why it gets no interval, and with ``error`` raises naming the key."""
    distinct = distinct_resamples(lay, resamples)
    if distinct >= resamples:
        return None
    sizes = [len(s) for s in lay.strata]
    why = (
        f"bootstrap.resamples={resamples}: benchmark {bench!r} has too few items for it ({len(lay.ids)} "
        f"items in {len(lay.units)} resampling units, strata of {sizes} units) and admits only {distinct} "
        "distinct resamples"
    )
    if too_few == "no_interval":
        return why
    raise ValueError(
        f"{why}; lower bootstrap.resamples to at most {distinct}, evaluate more items, or set "
        "bootstrap.too_few=no_interval (docs/tables.md, 'too few items')"
    )


def counts_from_indices(lay: Layout, draws: Sequence[np.ndarray]) -> np.ndarray:
    """Returns the ``(B, units)`` count matrix of per-stratum draws: ``draws[s][r]`` lists the positions (within
    stratum ``s``) of the units resample ``r`` takes; a unit drawn ``c`` times counts ``c``."""
    resamples = len(draws[0]) if draws else 0
    counts = np.zeros((resamples, len(lay.units)), dtype=np.int64)
    rows = np.arange(resamples)[:, None]
    for stratum, picks in zip(lay.strata, draws, strict=True):
        np.add.at(counts, (rows, np.asarray(stratum)[picks]), 1)
    return counts


def draw_counts(lay: Layout, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Returns ``(resamples, units)`` counts: each resample draws every stratum's units with replacement."""
    draws = [rng.integers(0, len(s), size=(resamples, len(s))) for s in lay.strata]
    return counts_from_indices(lay, draws)


def _score(lay: Layout, items: Sequence[ScoredItem]) -> float:
    return float(SCORERS.get(lay.scorer)(items, lay.headline)["score"])


def _resample_items(
    lay: Layout,
    items: Sequence[ScoredItem],
    counts: np.ndarray,
    copies: dict[tuple[int, int], list[ScoredItem]],
) -> list[ScoredItem]:
    """Returns the items of one resample (a row of ``counts``), every repeat of a unit relabelled as a copy
    (``copies`` caches the relabelled copies (unit, k) across the resamples of one row)."""
    copy = SCORERS.get(lay.scorer).resampling.copy
    out: list[ScoredItem] = []
    for unit in np.flatnonzero(counts):
        out += [items[p] for p in lay.units[unit]]
        for k in range(1, int(counts[unit])):
            if (unit, k) not in copies:
                copies[(unit, k)] = [copy(items[p], k) for p in lay.units[unit]]
            out += copies[(unit, k)]
    return out


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=SCORE_TOLERANCE, abs_tol=SCORE_TOLERANCE)


def replicates(lay: Layout, items: Sequence[ScoredItem], counts: np.ndarray) -> np.ndarray:
    """Returns the scorer's headline on each resample of ``counts`` (``(B,)``) for one row's ``items``.

    ``items`` are in ``lay.ids`` order (``align``). A scorer marked additive is resampled from its units' own
    headlines and checked against the scorer on all items and on resample 0; a mismatch raises, naming
    the scorer's ``ScorerSpec.resampling``.
    """
    copies: dict[tuple[int, int], list[ScoredItem]] = {}
    if not SCORERS.get(lay.scorer).resampling.additive:
        return np.array([_score(lay, _resample_items(lay, items, row, copies)) for row in counts])
    sizes = np.array([len(u) for u in lay.units], dtype=float)
    totals = np.array([_score(lay, [items[p] for p in u]) for u in lay.units]) * sizes
    reps = (counts @ totals) / (counts @ sizes)
    checks = {"all items": (_score(lay, items), totals.sum() / sizes.sum())}
    if len(counts):
        checks["resample 0"] = (
            _score(lay, _resample_items(lay, items, counts[0], copies)),
            float(reps[0]),
        )
    for what, (direct, additive) in checks.items():
        if not _close(direct, additive):
            raise ValueError(
                f"scorer {lay.scorer!r} is marked additive in its ScorerSpec.resampling, but on {what} "
                f"its score {direct} differs from the item-weighted mean of its units' scores {additive}; "
                "mark it additive=False"
            )
    return reps


def align(lay: Layout, items: Sequence[ScoredItem], where: str) -> list[ScoredItem]:
    """Returns ``items`` in ``lay.ids`` order; raises when they are not the same item ids (rows of one benchmark
    must be scored on the same items for their resamples to be paired)."""
    by_id = {item.id: item for item in items}
    if set(by_id) != set(lay.ids) or len(by_id) != len(items):
        only_here = sorted(set(by_id) - set(lay.ids))[:3]
        only_there = sorted(set(lay.ids) - set(by_id))[:3]
        raise ValueError(
            f"{where}: its items are not those of the other rows on this benchmark (ids only here: "
            f"{only_here}, only there: {only_there}); re-evaluate it on the same benchmark file"
        )
    return [by_id[i] for i in lay.ids]


def seed_draws(n_seeds: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Returns ``(resamples, n_seeds)`` indices of training seeds drawn with replacement for each resample."""
    return rng.integers(0, n_seeds, size=(resamples, n_seeds))


def pool_seeds(per_seed: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Returns the replicates of a row trained with several seeds: replicate ``r`` is the mean, over the seeds
    resample ``r`` drew (``draws[r]``), of each drawn seed's replicate ``r`` (``per_seed`` is ``(seeds, B)``)."""
    return per_seed[draws.T, np.arange(per_seed.shape[1])].mean(axis=0)


def interval(reps: np.ndarray, level: float) -> tuple[float, float]:
    """Returns the percentile interval of ``reps`` at coverage ``level``."""
    lo, hi = np.quantile(reps, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(lo), float(hi)
