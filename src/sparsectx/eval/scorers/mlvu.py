"""MLVU (multiple choice): VLMEvalKit's own answer rule (the letter before ``)``), not the generic reader.

Source: nvidia-vlmeval 26.3 vlmeval/dataset/mlvu.py ``MLVU_MCQ.evaluate`` and utils/mlvu.py
``check_ans_with_model`` / ``get_dimension_rating``. ``evaluate`` builds the gold as ``"(L) text"`` from the
``candidates`` list and the ``answer`` cell (the right candidate's text) and, with ``model='exact_matching'``,
falls back on ``can_infer`` (nvidia-vlmeval 26.3's, ``sparsectx.eval.scorers.mvbench.can_infer``) over the
candidates lettered A, B, ...

The rule: a prediction holding ``)`` is cut to the one character before its first ``)`` (``"(B) dog"`` ->
``"B"``, ``"B)"`` -> ``"B"``, ``")..."`` -> ``""``) and hits when that equals the gold letter (case-sensitive);
a prediction without ``)`` hits when it is the gold letter exactly; else ``can_infer`` on the whole, uncut
prediction must read the gold letter. ``get_dimension_rating`` reports ``[hits, rows]`` per ``task_type``;
VLMEvalKit's ``MLVU`` (this part and the open-ended one) reports the pooled ratio of these tasks as ``M-Avg``,
which ``score`` is (x 100).

Misses: an extraction miss (``None``) is wrong here; ``""`` is wrong by the rule. VLMEvalKit's ``.xlsx`` turns an
empty prediction into NaN, on which ``evaluate`` stops with a ``TypeError``. A prediction holding VLMEvalKit's
``Failed to obtain answer via API`` is scored -1 there (the rating adds -1 to the hits); here the rule reads it.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics
from sparsectx.eval.scorers.mvbench import VIDEO_MCQ_COLUMNS, can_infer, pooled_rating
from sparsectx.eval.scorers.spec import ITEM_MEAN, ScorerSpec, VlmevalReading

VERSION = 1


def is_mlvu_correct(item: ScoredItem) -> bool:
    """Returns whether MLVU's ``check_ans_with_model`` (no judge) counts ``item.prediction`` right."""
    if item.prediction is None:
        return False
    pred = item.prediction
    if ")" in pred:
        cut = pred.index(")")
        pred = pred[cut - 1 : cut]
    if pred == item.reference.strip():
        return True
    return can_infer(item.prediction, item.options) == item.reference.strip()


def score_mlvu(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns MLVU multiple-choice accuracy in percent (hits / rows x 100: ``MLVU``'s ``M-Avg``).

    Reads ``reference`` (gold letter) and ``options`` (the candidates lettered in order). Keys: ``score``,
    ``n``, ``missing``, ``unmatched`` (a wrong answer in which ``can_infer`` reads no option either),
    ``category/<name>`` when categories are set.
    """
    correct = [is_mlvu_correct(item) for item in items]
    unmatched = sum(
        item.prediction is not None and not ok and can_infer(item.prediction, item.options) in (None, "Z")
        for item, ok in zip(items, correct, strict=True)
    )
    return accuracy_metrics(items, correct, "unmatched", unmatched)


SPECS = (
    ScorerSpec(
        name="mlvu",
        version=VERSION,
        fn=score_mlvu,
        is_correct=is_mlvu_correct,
        resampling=ITEM_MEAN,  # M-Avg: hits / rows over the multiple-choice tasks
        needs_options=True,
        needs=("reference", "options"),
        vlmeval=VlmevalReading(
            VIDEO_MCQ_COLUMNS, pooled_rating, "score", "get_dimension_rating hits / rows over the tasks x 100 (M-Avg)"
        ),
    ),
)
