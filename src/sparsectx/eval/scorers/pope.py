"""POPE: accuracy, precision, recall and F1 per subset, macro-averaged over subsets.

Source: POPE (Li et al., 2023, §3 and Table 2): "yes" is the positive class; each sampling
setting (random, popular, adversarial) is scored on its own. We macro-average the per-subset
metrics; the headline ``score`` is the macro F1 in percent. An unreadable or missing answer is
counted as wrong and, for F1, as a non-positive prediction (neither TP nor FP).
"""

from __future__ import annotations

from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, check_items, count_missing, register_scorer
from sparsectx.eval.scorers.yes_no import gold_yes_no, parse_yes_no

VERSION = 1


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


@register_scorer("pope", VERSION)
def score_pope(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns POPE macro F1 in percent (``score``), with per-subset and macro acc/precision/recall/F1.

    Reads ``reference`` (yes/no) and ``subset``. Keys: ``score`` (= ``f1``), ``acc``, ``precision``,
    ``recall``, ``f1``, ``yes_ratio`` (macro over subsets), ``<subset>/<metric>``, ``n``, ``missing``.
    """
    check_items(items, "pope", needs=("reference", "subset"))
    by_subset: dict[str, list[ScoredItem]] = {}
    for item in items:
        by_subset.setdefault(item.subset, []).append(item)
    metrics: dict[str, float] = {}
    names = ("acc", "precision", "recall", "f1", "yes_ratio")
    macro = dict.fromkeys(names, 0.0)
    for subset, group in sorted(by_subset.items()):
        per = binary_metrics(
            [gold_yes_no(it, "pope") for it in group], [parse_yes_no(it.prediction) for it in group]
        )
        for name in names:
            metrics[f"{subset}/{name}"] = per[name]
            macro[name] += per[name] / len(by_subset)
    return {
        "score": macro["f1"],
        **macro,
        "n": float(len(items)),
        "missing": float(count_missing(items)),
        **metrics,
    }
