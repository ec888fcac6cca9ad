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
gold is not yes/no, is skipped when the file is read, naming the row (``ScorerSpec.rules``; VLMEvalKit fails with
an ``IndexError``); split names are keys
``<split>/aAcc`` etc. rather than rows of a table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import partial

from sparsectx.eval.scorers.base import ScoredItem, count_missing, percent
from sparsectx.eval.scorers.spec import Resampling, ScorerSpec, VlmevalReading, subset_stratum
from sparsectx.eval.scorers.yes_no import (
    YES_NO_JUDGED,
    gold_yes_no,
    is_yes_no_correct,
    parse_yes_no,
    vlmeval_yes_no_spelling,
)

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


def figure_set_unit(item: ScoredItem) -> str:
    """Returns the item's (l2-category, set): every figure and question group of fAcc and qAcc lies in one."""
    return f"{item.subset}\x00{hallusion_ids(item)[0]}"


def copy_figure_set(item: ScoredItem, k: int) -> ScoredItem:
    """Returns copy ``k`` of an item: its set id (field 3 of the index) relabelled, so the copy's figure and
    question groups, keyed by (l2-category, set, figure | question), are new ones."""
    fields = item.id.split("_")
    fields[3] = f"{fields[3]}#{k}"
    return dataclasses.replace(item, id="_".join(fields))


def vlmeval_row_problem(index: str, row: Mapping[str, str]) -> str | None:
    """Returns why VLMEvalKit's ``Hallusion_rating`` would misread a row: a gold not spelt ``Yes``/``No``
    (``vlmeval_yes_no_spelling``), an index without the set/figure/question fields; else None."""
    spelling = vlmeval_yes_no_spelling(index, row)
    if spelling is not None:
        return spelling
    if len(index.split("_")) < 6:
        return (
            f"index {index!r} (column 'index') lacks the '_'-separated set/figure/question ids "
            "(fields 3/4/5) that VLMEvalKit's Hallusion_rating reads"
        )
    return None


SPECS = (
    ScorerSpec(
        name="hallusionbench",
        version=VERSION,
        fn=score_hallusionbench,
        is_correct=is_yes_no_correct,
        resampling=Resampling(figure_set_unit, subset_stratum, copy_figure_set, additive=False),  # fAcc, qAcc groups
        needs=("reference", "subset"),
        rules={"reference": partial(gold_yes_no, scorer="hallusionbench"), "id": hallusion_ids},
        judge=YES_NO_JUDGED,
        vlmeval=VlmevalReading(
            ("category", "l2-category", "answer"),
            lambda m: (m["Overall/aAcc"] + m["Overall/fAcc"] + m["Overall/qAcc"]) / 3,
            "score",
            "Hallusion_rating mean of aAcc, fAcc, qAcc",
            vlmeval_row_problem,
        ),
    ),
)
