"""MME-RealWorld(-Lite): VLMEvalKit's own answer rule and report, not the generic multiple-choice reader.

VLMEvalKit scores MME-RealWorld with ``MMERealWorld.evaluate`` (vlmeval/dataset/image_mcq.py): each
prediction is read by ``extract_characters_regex`` (vlmeval/dataset/utils/multiple_choice.py) and is right when
the letter it returns equals the ``answer`` cell; ``get_dimension_rating`` then reports ``Overall`` = right
answers / rows, and per ``Task`` (``category`` before ``/``) and ``Task/Subtask`` the same ratio.

``extract_characters_regex``, restated: strip the text; delete each answer prefix of its list wherever it
occurs (two pairs of its list lack the comma between them, so Python joins them: ``"The best option isThe
correct option is"`` and ``"Best answer:Best option:"`` are deleted as such, never their halves); a text of
more than ten words with no capital A-E reads as nothing; else the first capital A-E anywhere in the text is
the answer ("Based on ..." reads as B); a text with none is the letter of the first of ``(A)``..``(E)`` that
contains it, lower-cased (so an empty text reads as A); else nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sparsectx.eval.scorers.base import ScoredItem, accuracy_metrics, per_key_accuracy
from sparsectx.eval.scorers.spec import ITEM_MEAN, ScorerSpec, VlmevalReading

PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option isThe correct option is",
    "Best answer:Best option:",
)
"""``extract_characters_regex``'s prefixes as Python reads its list (two adjacent literals joined)."""
CHOICES = ("(A)", "(B)", "(C)", "(D)", "(E)")
_LETTER = re.compile(r"[ABCDE]")


def mme_realworld_choice(prediction: str | None) -> str:
    """Returns the letter ``extract_characters_regex`` reads in ``prediction``, "" when none (None: "")."""
    if prediction is None:
        return ""
    text = prediction.strip()
    for prefix in PREFIXES:
        text = text.replace(prefix, "")
    found = _LETTER.search(text)
    if found is not None:
        return found.group(0)
    if len(text.split()) > 10:
        return ""
    lowered = text.lower()
    return next((choice[1] for choice in CHOICES if lowered in choice.lower()), "")


def is_mme_realworld_correct(item: ScoredItem) -> bool:
    """Returns whether VLMEvalKit's MME-RealWorld rule reads the gold letter in ``item.prediction``."""
    return item.prediction is not None and mme_realworld_choice(item.prediction) == item.reference.strip()


def score_mme_realworld(items: Sequence[ScoredItem]) -> dict[str, float]:
    """Returns MME-RealWorld accuracy in percent (``get_dimension_rating``'s ``Overall`` x 100).

    Reads ``reference`` (gold letter) and ``category`` (``Task/Subtask``). Keys: ``score``, ``n``, ``missing``
    (extraction misses), ``unmatched`` (answers the rule reads as nothing, VLMEvalKit's "failed to obtain the
    score"), ``category/<Task/Subtask>`` and ``task/<Task>``.
    """
    correct = [is_mme_realworld_correct(item) for item in items]
    unmatched = sum(item.prediction is not None and not mme_realworld_choice(item.prediction) for item in items)
    metrics = accuracy_metrics(items, correct, "unmatched", unmatched)
    tasks = ((item.category.split("/")[0], ok) for item, ok in zip(items, correct, strict=True))
    return {**metrics, **per_key_accuracy(tasks, "task")}


SPECS = (
    ScorerSpec(
        name="mme_realworld",
        version=1,
        fn=score_mme_realworld,
        is_correct=is_mme_realworld_correct,  # extract_characters_regex, not the generic reader
        resampling=ITEM_MEAN,  # get_dimension_rating's Overall: right answers / rows
        needs_options=True,
        needs=("reference", "category"),
        vlmeval=VlmevalReading(
            ("category", "l2-category", "answer"),
            lambda m: 100.0 * m["Overall"],
            "score",
            "get_dimension_rating Overall x 100",
        ),
    ),
)
