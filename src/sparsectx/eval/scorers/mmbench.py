"""MMBench circular evaluation: a question counts only if it is answered right under every rotation.

Source: MMBench (Liu et al., 2023, §3.2 "CircularEval"): each N-option question is asked N times
with its options circularly shifted; the model passes the question only if all N answers are
correct. Scale: percent of questions.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparsectx.eval.scorers.base import (
    ScoredItem,
    check_items,
    count_missing,
    per_key_accuracy,
    percent,
    register_scorer,
)
from sparsectx.eval.scorers.mcq import is_choice_correct

VERSION = 1


@register_scorer("mmbench_circular", VERSION)
def score_mmbench_circular(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns circular accuracy in percent (``score``) over questions, with per-rotation accuracy.

    Each item is one rotation; ``group`` is the question id shared by its rotations, ``reference``
    the gold letter in that rotation, ``options`` that rotation's letter -> text. Keys: ``score``
    (circular, percent of questions), ``rotation_acc`` (percent of single rotations correct),
    ``n`` (questions), ``n_items``, ``missing``, ``category/<name>`` (circular, per category).
    """
    check_items(items, "mmbench_circular", needs=("reference", "options", "group"))
    passed: dict[str, bool] = {}
    category: dict[str, str] = {}
    hits = 0
    for item in items:
        ok = is_choice_correct(item)
        hits += ok
        passed[item.group] = passed.get(item.group, True) and ok
        if category.setdefault(item.group, item.category) != item.category:
            raise ValueError(
                f"mmbench_circular: question {item.group!r} has rotations in categories "
                f"{category[item.group]!r} and {item.category!r}; rotations must share one category"
            )
    metrics = {
        "score": percent(sum(passed.values()), len(passed)),
        "rotation_acc": percent(hits, len(items)),
        "n": float(len(passed)),
        "n_items": float(len(items)),
        "missing": float(count_missing(items)),
    }
    if any(category.values()):
        metrics |= per_key_accuracy(((category[g], ok) for g, ok in passed.items()), "category")
    return metrics
