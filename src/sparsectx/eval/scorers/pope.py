"""POPE: F1, accuracy, precision and recall per subset and over all rows, as VLMEvalKit rates POPE.

Source: VLMEvalKit ``vlmeval/dataset/utils/yorn.py`` ``POPE_rating`` (with ``cal_f1_score`` inside it).
"yes" is the positive class (POPE, Li et al. 2023, §3).

Two headlines, and the benchmark config names one (``bench.<name>.headline``; there is no default):

* ``macro_accuracy``: the mean of the three subsets' accuracies, LT-OPD's metric (seed 000, App. D.1: "POPE
  reports macro accuracy across adversarial, popular, and random subsets"); each subset's accuracy is over
  its own rows as ``POPE_rating`` explodes them (below).
* ``f1``: ``POPE_rating``'s ``Overall`` row's ``Overall`` column (the F1 pooled over all exploded rows), the
  figure upstream open-compass/VLMEvalKit's ``ImageYORNDataset.report_primary_metric`` reports as ``Overall
  F1`` (that method is not in the pinned nvidia-vlmeval 26.3, whose ``evaluate`` returns the table alone).

VLMEvalKit's POPE.tsv stores a question shared by several subsets once, with a comma-joined
``category`` (e.g. ``adversarial,popular,random``). ``POPE_rating`` splits the category and explodes
the file into one row per (question, subset), then computes

* **Overall**: F1, acc, precision and recall over *all exploded rows* (a shared question counts once per
  subset it belongs to; a pooled figure, not the mean of the subsets);
* **per subset**: the same four over that subset's rows.

Per row: gold positive is ``answer == Yes``, predicted positive is a reading of "yes"
(``sparsectx.eval.scorers.yes_no.parse_yes_no``, VLMEvalKit's ``YOrN_Extraction``), so an unreadable
answer counts as a "no" prediction (an FN on a "yes" question, never an FP); acc is the percent of rows
whose reading equals the gold. Precision (recall) is 0 when nothing is predicted (labelled) "yes",
F1 is 0 when both are 0 (as in ``cal_f1_score``).

Remaining differences from VLMEvalKit: a subset name other than adversarial/popular/random, or an empty
one, makes its row a skip when the file is read, naming the row (VLMEvalKit rates any name, and drops a NaN
category from the per-split table while keeping its row in Overall); we also report ``yes_ratio`` and the
macro means of the subset accuracies (``macro_accuracy``) and F1s (``macro_f1``), which VLMEvalKit does not
(its per-split ``acc`` column gives the former). A macro mean is over the subsets present (all three in POPE.tsv).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial

from sparsectx.eval.scorers.base import ScoredItem, count_missing
from sparsectx.eval.scorers.spec import BY_SUBSET, ScorerSpec, VlmevalReading
from sparsectx.eval.scorers.yes_no import (
    YES_NO_JUDGED,
    gold_yes_no,
    is_yes_no_correct,
    parse_yes_no,
    vlmeval_yes_no_spelling,
)

VERSION = 3
"""2: comma-joined categories counted in each subset; headline = pooled F1 over exploded rows.
3: ``macro_accuracy`` added; the headline is the config's choice of it or ``f1`` (``HEADLINES``)."""

SUBSETS = ("adversarial", "popular", "random")
HEADLINES = ("macro_accuracy", "f1")
"""The metrics a POPE benchmark config chooses its headline among (``bench.<name>.headline``)."""


def binary_metrics(gold: Sequence[str], pred: Sequence[str | None]) -> dict[str, float]:
    """Returns accuracy, precision, recall, F1 and yes-ratio in percent, positive class "yes".

    Precision (recall) is 0 when nothing is predicted (labelled) "yes"; F1 is 0 when both are 0.
    """
    tp = sum(g == "yes" and p == "yes" for g, p in zip(gold, pred, strict=True))
    fp = sum(g == "no" and p == "yes" for g, p in zip(gold, pred, strict=True))
    fn = sum(g == "yes" and p != "yes" for g, p in zip(gold, pred, strict=True))
    correct = sum(g == p for g, p in zip(gold, pred, strict=True))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "acc": 100.0 * correct / len(gold),
        "precision": 100.0 * precision,
        "recall": 100.0 * recall,
        "f1": 100.0 * f1,
        "yes_ratio": 100.0 * sum(p == "yes" for p in pred) / len(gold),
    }


def pope_subsets(item: ScoredItem) -> list[str]:
    """Returns the subsets of one POPE row: its ``category`` split on commas, each checked.

    Raises ``ValueError`` naming the column, the value and the item for a name not in ``SUBSETS``.
    """
    names = [name.strip() for name in item.subset.split(",")]
    for name in names:
        if name not in SUBSETS:
            raise ValueError(
                f"pope: item {item.id!r} has category (column 'category', the POPE subset) "
                f"{item.subset!r}; {name!r} is not one of {', '.join(SUBSETS)} (comma-joined for a "
                "question shared by several subsets)"
            )
    return names


def score_pope(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns POPE's metrics in percent: both headlines (``HEADLINES``; the registry record copies the
    config's choice to ``score``), and overall and per-subset acc/precision/recall/F1.

    Reads ``reference`` (yes/no) and ``subset`` (VLMEvalKit's ``category``, possibly comma-joined). Keys:
    ``acc``, ``precision``, ``recall``, ``f1``, ``yes_ratio`` (over all exploded rows), ``<subset>/<metric>``,
    ``macro_accuracy`` and ``macro_f1`` (means over the subsets of ``<subset>/acc`` and ``<subset>/f1``),
    ``n`` (questions), ``n_rows`` (exploded rows), ``missing``.
    """
    rows: list[tuple[str, str, str | None]] = []  # (subset, gold, reading), one per (question, subset)
    for item in items:
        gold, reading = gold_yes_no(item, "pope"), parse_yes_no(item.prediction)
        rows.extend((name, gold, reading) for name in pope_subsets(item))
    overall = binary_metrics([g for _, g, _ in rows], [p for _, _, p in rows])
    metrics: dict[str, float] = {}
    for subset in sorted({name for name, _, _ in rows}):
        mine = [(g, p) for name, g, p in rows if name == subset]
        per = binary_metrics([g for g, _ in mine], [p for _, p in mine])
        metrics |= {f"{subset}/{key}": value for key, value in per.items()}
    subsets = sorted({name for name, _, _ in rows})
    return {
        **overall,
        "macro_accuracy": sum(metrics[f"{s}/acc"] for s in subsets) / len(subsets),
        "macro_f1": sum(metrics[f"{s}/f1"] for s in subsets) / len(subsets),
        "n": float(len(items)),
        "n_rows": float(len(rows)),
        "missing": float(count_missing(items)),
        **metrics,
    }


def vlmeval_row_problem(index: str, row: Mapping[str, str]) -> str | None:
    """Returns why VLMEvalKit's ``POPE_rating`` would misread a row of POPE's TSV: a gold not spelt ``Yes``/``No``
    (``vlmeval_yes_no_spelling``), a category (comma-joined ones split) outside ``SUBSETS``; else None."""
    spelling = vlmeval_yes_no_spelling(index, row)
    if spelling is not None:
        return spelling
    if any(name not in SUBSETS for name in row["category"].split(",")):
        return (
            f"row index {index} has category {row['category']!r} (column 'category'); POPE's "
            f"subsets are {', '.join(SUBSETS)}, comma-joined for a question shared by several"
        )
    return None


def split_accuracy_mean(metrics: dict[str, float]) -> float:
    """Returns the mean of ``POPE_rating``'s per-split ``acc`` (every row but ``Overall``, already in percent):
    LT-OPD's macro accuracy (``macro_accuracy``) read off VLMEvalKit's own table (flattened by
    ``sparsectx.eval.vlmeval_bridge.flatten`` as ``<split>/acc``)."""
    accs = [value for key, value in metrics.items() if key.endswith("/acc") and key != "Overall/acc"]
    if not accs:
        raise KeyError("<split>/acc")
    return sum(accs) / len(accs)


VLMEVAL_F1 = VlmevalReading(
    ("category", "answer"), lambda m: m["Overall/Overall"], "f1", "POPE_rating Overall F1", vlmeval_row_problem
)
"""``POPE_rating``'s ``Overall`` row's ``Overall`` column: the pooled F1 (module docstring)."""

SPECS = (
    ScorerSpec(
        name="pope",
        version=VERSION,
        fn=score_pope,
        is_correct=is_yes_no_correct,
        resampling=BY_SUBSET,  # the subsets' accuracy mean or the pooled F1, recomputed; the subsets' counts kept
        headlines=HEADLINES,
        needs=("reference", "subset"),
        rules={"reference": partial(gold_yes_no, scorer="pope"), "subset": pope_subsets},
        judge=YES_NO_JUDGED,
        vlmeval=VLMEVAL_F1,
        vlmeval_headlines={
            "f1": VLMEVAL_F1,
            "macro_accuracy": replace(
                VLMEVAL_F1,
                headline=split_accuracy_mean,
                project_key="macro_accuracy",
                describe="POPE_rating mean of the splits' acc",
            ),
        },
    ),
)
