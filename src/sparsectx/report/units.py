"""What the bootstrap resamples for each scorer: the unit of items scored jointly, its stratum, and copies.

A benchmark's headline is not always a mean of item scores: MME adds acc+ over image pairs, HallusionBench
counts figure and question groups with every row right, POPE averages its subsets' accuracies (or takes an F1
over all rows), HR-Bench averages its cycles, CV-Bench its image sources. A resample must keep what the scorer
scores jointly together, so each scorer names

* ``unit``: the key of the items scored jointly (a pair, a circular question, a figure set), or the item;
* ``stratum``: units are drawn with replacement *within* each stratum, so every resample keeps the benchmark's
  composition (MME's categories, CV-Bench's sources; a resample without a category would change the metric's
  definition, not only its value);
* ``copy``: item ``k`` (>= 1) of a unit drawn several times, relabelled so that the scorer sees a new unit (a new
  id, a new pair key) and never merges or rejects the repeats;
* ``additive``: the headline of any multiset of units is the item-count-weighted mean of the units' own
  headlines (accuracy-type scorers). Those are resampled through one scorer call per unit; the others are
  rescored by the scorer on every resample (``sparsectx.report.bootstrap``), which checks either way.

Every registered scorer needs an entry here (a test checks): a new scorer whose items are scored jointly would
otherwise be resampled item by item, silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from sparsectx.eval.scorers import ScoredItem
from sparsectx.eval.scorers.hallusionbench import hallusion_ids


def _item(item: ScoredItem) -> str:
    return item.id


def _whole(item: ScoredItem) -> str:
    return ""


def _subset(item: ScoredItem) -> str:
    return item.subset


def _copy_id(item: ScoredItem, k: int) -> ScoredItem:
    return dataclasses.replace(item, id=f"{item.id}#{k}")


def _copy_group(item: ScoredItem, k: int) -> ScoredItem:
    return dataclasses.replace(item, id=f"{item.id}#{k}", group=f"{item.group}#{k}")


def _mme_pair(item: ScoredItem) -> str:
    return f"{item.category}\x00{item.group}"


def _hallusion_set(item: ScoredItem) -> str:
    return f"{item.subset}\x00{hallusion_ids(item)[0]}"


def _copy_hallusion(item: ScoredItem, k: int) -> ScoredItem:
    # The figure and question groups are keyed by (l2-category, set, figure | question), the set being field 3
    # of the index: a new set id makes the copy's groups new ones.
    fields = item.id.split("_")
    fields[3] = f"{fields[3]}#{k}"
    return dataclasses.replace(item, id="_".join(fields))


@dataclass(frozen=True)
class Resampling:
    """How one scorer's items are resampled (see the module docstring)."""

    unit: Callable[[ScoredItem], str]
    stratum: Callable[[ScoredItem], str]
    copy: Callable[[ScoredItem, int], ScoredItem]
    additive: bool


ITEM_MEAN = Resampling(_item, _whole, _copy_id, additive=True)
"""Accuracy-type headlines: the mean over items of a per-item score."""

RESAMPLING: dict[str, Resampling] = {
    "exact_match": ITEM_MEAN,
    "exact_match_vlmeval": ITEM_MEAN,
    "number_match": ITEM_MEAN,
    "mcq": ITEM_MEAN,
    "mcq_vlmeval": ITEM_MEAN,
    "mmmu_vlmeval": ITEM_MEAN,
    "mme_realworld": ITEM_MEAN,  # get_dimension_rating's Overall: right answers / rows
    "mathvista": ITEM_MEAN,  # MathVista_acc's Overall
    "logicvista": ITEM_MEAN,  # evaluate_logicvista's Overall
    "mvbench": ITEM_MEAN,  # get_dimension_rating's overall: hits / rows
    "mlvu": ITEM_MEAN,  # M-Avg: hits / rows over the multiple-choice tasks
    "videomme": ITEM_MEAN,  # get_dimension_rating's overall mean score
    "video_tt": ITEM_MEAN,  # get_dimension_rating's overall score
    "tempcompass_mcq": ITEM_MEAN,  # hits / rows pooled over get_dimension_rating's dim/task rows
    "yes_no": ITEM_MEAN,
    "vqa_soft": ITEM_MEAN,
    "ocrbench": ITEM_MEAN,  # 1000 x the share of items hit
    "pope": Resampling(_item, _subset, _copy_id, additive=False),  # subset-acc mean or pooled F1; counts kept
    "mme": Resampling(_mme_pair, lambda it: it.category, _copy_group, additive=False),  # acc + acc+ per category
    "mmbench_circular": Resampling(lambda it: it.group, _whole, _copy_group, additive=False),  # per question
    "hallusionbench": Resampling(_hallusion_set, _subset, _copy_hallusion, additive=False),  # fAcc, qAcc groups
    "hrbench": Resampling(_item, _subset, _copy_id, additive=False),  # the mean of the cycles' accuracies
    "cvbench": Resampling(_item, _subset, _copy_id, additive=False),  # the mean over image sources
}
"""Scorer name (``sparsectx.eval.scorers.SCORERS``) -> how its items are resampled."""


def resampling(scorer: str) -> Resampling:
    """Returns how ``scorer``'s items are resampled; raises naming this table when it has no entry."""
    if scorer not in RESAMPLING:
        raise KeyError(
            f"scorer {scorer!r} has no resampling rule: add its unit, stratum and copy rule to "
            "sparsectx.report.units.RESAMPLING (an item-level bootstrap of jointly scored items would be wrong)"
        )
    return RESAMPLING[scorer]
