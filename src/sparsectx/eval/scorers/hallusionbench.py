"""HallusionBench: aAcc (question), fAcc (figure) and qAcc (question across figures), as VLMEvalKit rates it.

Source: VLMEvalKit ``vlmeval/dataset/utils/yorn.py`` ``Hallusion_rating`` (``calc_aAcc``, ``calc_fAcc``,
``calc_qAcc``) and the headline in ``vlmeval/dataset/image_yorn.py``
``ImageYORNDataset.report_primary_metric`` (``Overall Acc``: the mean of the overall aAcc, fAcc, qAcc).

A row is right when its yes/no reading (``sparsectx.eval.scorers.yes_no.parse_yes_no``, VLMEvalKit's
``YOrN_Extraction``) equals the gold. VLMEvalKit reads the ids from the row's ``index``, split on ``_``:
field 3 is the set, field 4 the figure, field 5 the question. Then

* **aAcc**: percent of rows right;
* **fAcc**: percent of figure groups, key ``f"{l2-category}_{set}_{figure}"``, with every row right;
* **qAcc**: percent of question groups, key ``f"{l2-category}_{set}_{question}"`` (one question asked
  of the original and the edited figures), with every row right.

All three are reported overall and per value of ``category`` (VD/VS) and of ``l2-category``; the
headline ``score`` is their overall mean.

Fields read: ``id`` (VLMEvalKit's ``index``), ``reference`` (yes/no), ``category`` (VLMEvalKit's
``category``; may be empty, then no per-category splits, as VLMEvalKit skips a missing column) and
``subset`` (VLMEvalKit's ``l2-category``; the benchmark config sets ``subset_field: l2-category``).

Remaining differences from VLMEvalKit: a row whose index has fewer than 6 ``_``-separated fields, or whose
gold is not yes/no, is skipped when the file is read, naming the row (``Scorer.rules``; VLMEvalKit fails with
an ``IndexError``); split names are keys
``<split>/aAcc`` etc. rather than rows of a table.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from sparsectx.eval.scorers.base import ScoredItem, count_missing, percent, register_scorer
from sparsectx.eval.scorers.yes_no import gold_yes_no, parse_yes_no

VERSION = 1


def hallusion_ids(item: ScoredItem) -> tuple[str, str, str]:
    """Returns (set, figure, question) ids: fields 3, 4, 5 of the ``_``-split index, as VLMEvalKit reads them."""
    fields = item.id.split("_")
    if len(fields) < 6:
        raise ValueError(
            f"hallusionbench: item {item.id!r} has index (column 'index') {item.id!r}; VLMEvalKit's "
            "HallusionBench index has at least 6 '_'-separated fields, set/figure/question ids at 3/4/5"
        )
    return fields[3], fields[4], fields[5]


def _all_right(keys: Sequence[str], right: Sequence[bool]) -> float:
    groups: dict[str, bool] = {}
    for key, ok in zip(keys, right, strict=True):
        groups[key] = groups.get(key, True) and ok
    return percent(sum(groups.values()), len(groups))


def _accuracies(rows: Sequence[tuple[ScoredItem, bool]]) -> dict[str, float]:
    right = [ok for _, ok in rows]
    ids = [hallusion_ids(it) for it, _ in rows]
    l2 = [it.subset for it, _ in rows]
    return {
        "aAcc": percent(sum(right), len(right)),
        "fAcc": _all_right([f"{c}_{s}_{f}" for c, (s, f, _) in zip(l2, ids, strict=True)], right),
        "qAcc": _all_right([f"{c}_{s}_{q}" for c, (s, _, q) in zip(l2, ids, strict=True)], right),
    }


@register_scorer(
    "hallusionbench",
    VERSION,
    needs=("reference", "subset"),
    rules={"reference": partial(gold_yes_no, scorer="hallusionbench"), "id": hallusion_ids},
)
def score_hallusionbench(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns the mean of aAcc, fAcc and qAcc in percent (``score``), each overall and per split.

    Keys: ``score``, ``aAcc``, ``fAcc``, ``qAcc`` (overall), ``<category or l2-category>/<metric>``,
    ``n``, ``missing``, ``unparsed``.
    """
    rows = [(it, parse_yes_no(it.prediction) == gold_yes_no(it, "hallusionbench")) for it in items]
    overall = _accuracies(rows)
    metrics: dict[str, float] = {}
    for field in ("category", "subset"):
        for split in sorted({getattr(it, field) for it in items} - {""}):
            per = _accuracies([(it, ok) for it, ok in rows if getattr(it, field) == split])
            metrics |= {f"{split}/{name}": value for name, value in per.items()}
    unparsed = sum(it.prediction is not None and parse_yes_no(it.prediction) is None for it in items)
    return {
        "score": (overall["aAcc"] + overall["fAcc"] + overall["qAcc"]) / 3,
        **overall,
        "n": float(len(items)),
        "missing": float(count_missing(items)),
        "unparsed": float(unparsed),
        **metrics,
    }
