"""MVBench: VLMEvalKit's own answer rule (``check_ans`` against ``"(L) text"``), not the generic multiple-choice reader.

Source: nvidia-vlmeval 26.3 vlmeval/dataset/mvbench.py ``MVBench.evaluate`` and utils/mvbench.py
``check_ans_with_model`` / ``get_dimension_rating``. ``evaluate`` builds the gold as ``"(L) text"`` from the
``candidates`` list and the ``answer`` cell (the right candidate's text) and, with ``model='exact_matching'``,
falls back on ``can_infer`` (``extract_answer_from_item`` with no judge: the letter read, else ``"Z"``) over the
candidates lettered A, B, ...

The rule: the prediction, stripped and lower-cased, is split on single spaces; its first piece hits when, with
its dots removed, it is a substring of ``"(l)"`` (``"B"``, ``"(b"``, ``"b)."``, and also ``""``, ``"("``,
``")"`` or ``"."``, substrings of every label, so these hit every row) or when it contains ``"(l)"``
(``"(B)dog"``); else ``can_infer`` on the whole prediction must read the gold letter. ``get_dimension_rating``
reports per ``task_type`` and ``overall`` = ``[hits, rows, "xx.xx%"]``; ``score`` is that ratio x 100.

``can_infer`` here is nvidia-vlmeval 26.3's (vlmeval/utils/matching_util.py), which differs from the
``mcq_vlmeval`` reader (``sparsectx.eval.scorers.mcq.vlmeval_choice``, recent upstream): a lone option letter
counts wherever it stands (no "among the last four tokens" condition), and ``can_infer_text`` has no length
guard (one option's text anywhere in a long answer counts).

Misses: an extraction miss (``None``) is wrong here. VLMEvalKit never sees one as such: its ``.xlsx`` turns an
empty prediction cell into NaN, ``evaluate`` skips the row, and ``get_dimension_rating`` counts the unset
score (NaN, truthy) as a hit. A prediction holding VLMEvalKit's ``Failed to obtain answer via API`` is scored -1
there, which the rating also counts as a hit; here the rule reads it (no model writes that text).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics
from sparsectx.eval.scorers.spec import ITEM_MEAN, ScorerSpec, VlmevalReading

VERSION = 1

REJECTIONS = (
    "Sorry, I can't help with images of people yet.",
    "I can't process this file.",
    "I'm sorry, but without the image provided",
    "Cannot determine the answer",
)
"""``can_infer_option``'s refusals, read as ``Z``."""
_SEPARATORS = str.maketrans({ch: " " for ch in ".()[],:;!*#{}"})


def can_infer(answer: str, options: Mapping[str, str]) -> str | None:
    """Returns the letter nvidia-vlmeval 26.3's ``can_infer`` reads in ``answer`` (``"Z"``: a refusal), else None.

    ``can_infer_option``: the marks ``.()[],:;!*#{}`` become spaces; exactly one option letter among the
    whitespace-split tokens is the answer; none but a ``Z`` token, or a known refusal, gives ``Z``. Then
    ``can_infer_text``: exactly one option text (lower-cased) inside the lower-cased answer.
    """
    if "Failed to obtain answer via API" not in answer:
        if any(text in answer for text in REJECTIONS):
            return "Z"
        tokens = answer.translate(_SEPARATORS).split()
        present = [letter for letter in options if letter in tokens]
        if len(present) == 1:
            return present[0]
        if not present and "Z" in tokens:
            return "Z"
    low = answer.lower()
    found = [letter for letter, text in options.items() if str(text).lower() in low]
    return found[0] if len(found) == 1 else None


def is_mvbench_correct(item: ScoredItem) -> bool:
    """Returns whether MVBench's ``check_ans_with_model`` (no judge) counts ``item.prediction`` right."""
    if item.prediction is None:
        return False
    first = item.prediction.lower().strip().split(" ")[0]
    label = f"({item.reference.strip().lower()})"
    if first.replace(".", "") in label or label in first:
        return True
    return can_infer(item.prediction, item.options) == item.reference.strip()


def score_mvbench(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns MVBench accuracy in percent (``get_dimension_rating``'s ``overall`` hits / rows x 100).

    Reads ``reference`` (gold letter) and ``options`` (the candidates lettered in order). Keys: ``score``,
    ``n``, ``missing``, ``unmatched`` (a wrong answer in which ``can_infer`` reads no option either),
    ``category/<name>`` when categories are set.
    """
    correct = [is_mvbench_correct(item) for item in items]
    unmatched = sum(
        item.prediction is not None and not ok and can_infer(item.prediction, item.options) in (None, "Z")
        for item, ok in zip(items, correct, strict=True)
    )
    return accuracy_metrics(items, correct, "unmatched", unmatched)


VIDEO_MCQ_COLUMNS = ("task_type", "candidates", "answer")
"""The TSV columns VLMEvalKit's video multiple-choice ``evaluate`` reads (MVBench, MLVU_MCQ, TempCompass_MCQ)."""


def pooled_rating(metrics: dict[str, float]) -> float:
    """Returns 100 x hits / rows pooled over a rating's ``[hits, rows, ...]`` lists (flattened as ``<key>/0``,
    ``<key>/1``): MLVU_MCQ's and TempCompass_MCQ's ``get_dimension_rating`` (MLVU's ``M-Avg``)."""
    hits = sum(value for key, value in metrics.items() if key.endswith("/0"))
    rows = sum(value for key, value in metrics.items() if key.endswith("/1"))
    if not rows:
        raise KeyError("<key>/1 (rows per rating key)")
    return 100.0 * hits / rows


SPECS = (
    ScorerSpec(
        name="mvbench",
        version=VERSION,
        fn=score_mvbench,
        is_correct=is_mvbench_correct,
        resampling=ITEM_MEAN,  # get_dimension_rating's overall: hits / rows
        needs_options=True,
        needs=("reference", "options"),
        vlmeval=VlmevalReading(
            VIDEO_MCQ_COLUMNS,
            lambda m: 100.0 * m["overall/0"] / m["overall/1"],
            "score",
            "get_dimension_rating overall hits / rows x 100",
        ),
    ),
)
